//! Seeing a [`Layout`]'s bytes as another element type, NumPy's rules for `x.view(dtype)`: a
//! type of the same size changes nothing else; one of another size rescales the last axis,
//! which must then be contiguous, and whose bytes it must divide.

use super::{Layout, python_shape};
use crate::{DType, Error, Result};

impl Layout {
    /// The same bytes as `dtype` elements, as NumPy's `ndarray.view(dtype)` sees them: the
    /// offset and every stride but the last axis's stay; with another item size the last axis
    /// holds as many of the new elements as its bytes make. Refused, naming `dtype`, where NumPy
    /// refuses: a 0-d array (its item size cannot change), a last axis that is not contiguous,
    /// or one whose bytes are not a whole number of new elements.
    ///
    /// ```
    /// use devbuf_core::{DType, Layout};
    ///
    /// let a = Layout::contiguous(DType::FLOAT64, &[2, 3], 16)?;
    /// let halves = a.with_dtype(DType::INT32)?;
    /// assert_eq!((halves.shape(), halves.strides(), halves.offset()), (&[2, 6][..], &[24, 4][..], 16));
    /// assert_eq!(halves.with_dtype(DType::FLOAT64)?, a);
    /// // Three float64 are 24 bytes: not a whole number of complex128 (16 bytes).
    /// assert!(a.with_dtype(DType::COMPLEX128).is_err());
    /// # Ok::<(), devbuf_core::Error>(())
    /// ```
    pub fn with_dtype(&self, dtype: DType) -> Result<Layout> {
        let (old, new) = (self.dtype.itemsize(), dtype.itemsize());
        let mut layout = Layout {
            dtype,
            ..self.clone()
        };
        if old == new {
            return Ok(layout);
        }
        let refuse = |why: String| {
            Error::invalid(
                "dtype",
                format!(
                    "cannot view {} elements of shape {} as {dtype}: {why}",
                    self.dtype,
                    python_shape(self.shape())
                ),
            )
        };
        let Some(last) = self.ndim().checked_sub(1) else {
            return Err(refuse(
                "the item size of a 0-d array cannot change (index it with [None] first)".into(),
            ));
        };
        let (n, stride) = (self.shape[last], self.strides[last]);
        if n != 1 && self.size() != 0 && stride != old as isize {
            return Err(refuse(format!(
                "to change to a dtype of a different size, the last axis must be contiguous \
                 (its byte stride is {stride})"
            )));
        }
        let bytes = n.checked_mul(old).ok_or_else(|| {
            refuse(format!(
                "the last axis holds more than {} bytes",
                usize::MAX
            ))
        })?;
        if new == 0 || !bytes.is_multiple_of(new) {
            return Err(refuse(format!(
                "the last axis holds {bytes} bytes, not a whole number of {new}-byte elements"
            )));
        }
        layout.shape[last] = bytes.checked_div(new).unwrap_or(0);
        layout.strides[last] = new as isize;
        Ok(layout)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Index;

    #[test]
    fn the_last_axis_is_rescaled_and_the_rest_kept() {
        let bytes = Layout::contiguous(DType::UINT8, &[4, 8], 0).unwrap();
        let wide = bytes.with_dtype(DType::UINT64).unwrap();
        assert_eq!((wide.shape(), wide.strides()), (&[4, 1][..], &[8, 8][..]));
        // Every other row: the rows' stride stays, the last axis is contiguous.
        let rows = bytes
            .index(&[Index::Slice {
                start: None,
                stop: None,
                step: Some(2),
            }])
            .unwrap();
        let v = rows.with_dtype(DType::FLOAT32).unwrap();
        assert_eq!((v.shape(), v.strides()), (&[2, 2][..], &[16, 4][..]));
        // Same size: only the type changes, even for a 0-d or strided view.
        let scalar = bytes.index(&[Index::At(1), Index::At(2)]).unwrap();
        let same = scalar.with_dtype(DType::INT8).unwrap();
        assert_eq!((same.ndim(), same.offset()), (0, 10));
        // A column of extent 1 takes any stride; an empty array too.
        let column = Layout::new(DType::INT32, &[3, 1], Some(&[4, 12]), 0, false).unwrap();
        assert_eq!(column.with_dtype(DType::INT16).unwrap().shape(), &[3, 2]);
        let empty = Layout::contiguous(DType::INT32, &[0, 2], 0).unwrap();
        assert_eq!(empty.with_dtype(DType::INT64).unwrap().shape(), &[0, 1]);
    }

    #[test]
    fn numpy_refusals_name_the_dtype() {
        let scalar = Layout::contiguous(DType::FLOAT32, &[], 0).unwrap();
        let err = scalar.with_dtype(DType::FLOAT64).unwrap_err();
        assert!(
            err.to_string().starts_with(
                "dtype: cannot view float32 elements of shape () as float64: the item size of a 0-d"
            ),
            "{err}"
        );
        let t = Layout::contiguous(DType::FLOAT32, &[2, 3], 0)
            .unwrap()
            .transpose(None)
            .unwrap();
        let err = t.with_dtype(DType::FLOAT64).unwrap_err();
        assert!(
            err.to_string().contains("last axis must be contiguous"),
            "{err}"
        );
        let odd = Layout::contiguous(DType::UINT8, &[3], 0).unwrap();
        let err = odd.with_dtype(DType::UINT16).unwrap_err();
        assert!(
            err.to_string()
                .contains("3 bytes, not a whole number of 2-byte"),
            "{err}"
        );
    }
}
