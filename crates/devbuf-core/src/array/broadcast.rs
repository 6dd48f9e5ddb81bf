//! Broadcasting a source [`Layout`] to the shape it is assigned into, NumPy's rules for
//! `x[...] = value`: the shapes are aligned from their last dimension, a dimension of extent 1
//! (or one the source lacks) repeats its element (stride 0), and leading dimensions of extent 1
//! that the destination lacks are dropped. Nothing moves: the result is a view of the source.

use super::{Dims, Layout, python_shape};
use crate::{Error, Result};

impl Layout {
    /// This layout seen with `shape`, as NumPy broadcasts the value of an assignment into an
    /// array of that shape; `value: could not broadcast ...` (NumPy's words) otherwise.
    ///
    /// ```
    /// use devbuf_core::{DType, Layout};
    ///
    /// // A row of 3 repeated over 4 rows: the new dimension has stride 0.
    /// let row = Layout::contiguous(DType::FLOAT32, &[3], 0)?;
    /// let rows = row.broadcast_for_assignment(&[4, 3])?;
    /// assert_eq!((rows.shape(), rows.strides()), (&[4, 3][..], &[0, 4][..]));
    /// // Leading ones the destination lacks are dropped, as NumPy drops them.
    /// let nested = Layout::contiguous(DType::FLOAT32, &[1, 1, 3], 0)?;
    /// assert_eq!(nested.broadcast_for_assignment(&[3])?.shape(), &[3]);
    /// assert!(row.broadcast_for_assignment(&[4, 2]).is_err());
    /// # Ok::<(), devbuf_core::Error>(())
    /// ```
    pub fn broadcast_for_assignment(&self, shape: &[usize]) -> Result<Layout> {
        let refuse = || {
            Error::invalid(
                "value",
                format!(
                    "could not broadcast input array from shape {} into shape {}",
                    python_shape(self.shape()),
                    python_shape(shape)
                ),
            )
        };
        // The source's leading dimensions of extent 1 beyond the destination's count go.
        let extra = self.ndim().saturating_sub(shape.len());
        if self.shape[..extra].iter().any(|&n| n != 1) {
            return Err(refuse());
        }
        let (own_shape, own_strides) = (&self.shape[extra..], &self.strides[extra..]);
        let missing = shape.len().saturating_sub(own_shape.len());
        let mut strides: Dims<isize> = Dims::from_elem(0, missing);
        for ((&n, &stride), &wanted) in own_shape.iter().zip(own_strides).zip(&shape[missing..]) {
            strides.push(match n {
                _ if n == wanted => stride,
                1 => 0,
                _ => return Err(refuse()),
            });
        }
        Ok(Layout {
            dtype: self.dtype,
            shape: Dims::from_slice(shape),
            strides,
            offset: self.offset,
            readonly: self.readonly,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::DType;

    fn shape_and_strides(from: &[usize], to: &[usize]) -> Result<(Vec<usize>, Vec<isize>)> {
        let layout = Layout::contiguous(DType::INT16, from, 6)?.broadcast_for_assignment(to)?;
        assert_eq!(layout.offset(), 6);
        Ok((layout.shape().to_vec(), layout.strides().to_vec()))
    }

    #[test]
    fn numpy_broadcasting_of_assigned_values() {
        assert_eq!(
            shape_and_strides(&[], &[2, 3]).unwrap(),
            (vec![2, 3], vec![0, 0])
        );
        assert_eq!(
            shape_and_strides(&[3], &[2, 3]).unwrap(),
            (vec![2, 3], vec![0, 2])
        );
        assert_eq!(
            shape_and_strides(&[2, 1], &[2, 3]).unwrap(),
            (vec![2, 3], vec![2, 0])
        );
        assert_eq!(
            shape_and_strides(&[2, 3], &[2, 3]).unwrap(),
            (vec![2, 3], vec![6, 2])
        );
        assert_eq!(
            shape_and_strides(&[1, 1, 3], &[3]).unwrap(),
            (vec![3], vec![2])
        );
        assert_eq!(shape_and_strides(&[1], &[]).unwrap(), (vec![], vec![]));
        assert_eq!(
            shape_and_strides(&[0], &[4, 0]).unwrap(),
            (vec![4, 0], vec![0, 2])
        );
        assert_eq!(shape_and_strides(&[1], &[0]).unwrap(), (vec![0], vec![0]));
    }

    #[test]
    fn shapes_that_do_not_broadcast_are_named_as_numpy_names_them() {
        for (from, to) in [
            (&[3][..], &[2, 4][..]),
            (&[2, 3], &[3]),
            (&[2], &[]),
            (&[0], &[3]),
        ] {
            let err = shape_and_strides(from, to).unwrap_err();
            assert_eq!(
                err.to_string(),
                format!(
                    "value: could not broadcast input array from shape {} into shape {}",
                    python_shape(from),
                    python_shape(to)
                )
            );
        }
    }
}
