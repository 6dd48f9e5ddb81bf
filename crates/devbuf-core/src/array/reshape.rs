//! Reshaping a [`Layout`] without moving its elements: NumPy's rule for when `x.reshape(shape)`
//! can be a view (C order), and the shape arithmetic (`-1`, sizes that must agree).

use super::{Dims, Layout, check_ndim};
use crate::{Error, Result};

impl Layout {
    /// The shape `requested` means for this layout's elements: at most one `-1`, which takes the
    /// extent the others leave, and the same number of elements (`shape: ...` otherwise, naming
    /// both).
    pub fn resolve_shape(&self, requested: &[isize]) -> Result<Dims<usize>> {
        check_ndim(requested.len() as i64, "shape")?;
        let size = self.size();
        let refuse = || {
            Error::invalid(
                "shape",
                format!(
                    "cannot reshape an array of {size} elements (shape {:?}) into shape {requested:?}",
                    self.shape()
                ),
            )
        };
        let mut unknown = None;
        let mut known: usize = 1;
        for (axis, &n) in requested.iter().enumerate() {
            match n {
                -1 if unknown.is_none() => unknown = Some(axis),
                -1 => {
                    return Err(Error::invalid(
                        "shape",
                        format!(
                            "{requested:?} has more than one -1: only one extent can be inferred"
                        ),
                    ));
                }
                n if n < 0 => {
                    return Err(Error::invalid(
                        "shape",
                        format!("{requested:?} has the negative extent {n}"),
                    ));
                }
                n => known = known.checked_mul(n as usize).ok_or_else(refuse)?,
            }
        }
        let mut shape: Dims<usize> = requested.iter().map(|&n| n.max(0) as usize).collect();
        if let Some(axis) = unknown {
            if !size.is_multiple_of(known) {
                return Err(refuse());
            }
            shape[axis] = size.checked_div(known).ok_or_else(refuse)?;
        } else if known != size {
            return Err(refuse());
        }
        Ok(shape)
    }

    /// This layout's elements, in C order, seen with `shape` (which [`Layout::resolve_shape`]
    /// resolved): the view when strides can express it, `None` when only a copy can (a
    /// transposed or strided array merged across a gap), as NumPy decides; `None` too for a
    /// shape of another number of elements.
    #[allow(
        clippy::arithmetic_side_effects,
        reason = "`shape` holds this layout's elements (checked first): every group's count is \
                  at most their number, each stride at most their span, and every index stays \
                  below a group's end"
    )]
    pub fn reshaped(&self, shape: &[usize]) -> Option<Layout> {
        let itemsize = self.dtype.itemsize() as isize;
        let new_shape = Dims::<usize>::from_slice(shape);
        let elements = shape
            .iter()
            .try_fold(1usize, |count, &n| count.checked_mul(n));
        if elements != Some(self.size()) {
            return None;
        }
        if self.size() == 0 || self.is_c_contiguous() {
            let layout = Layout::new(self.dtype, &new_shape, None, self.offset, self.readonly);
            return layout.ok();
        }
        // Dimensions of extent 1 move nowhere: leave them out of the old side.
        let (old_shape, old_strides): (Dims<usize>, Dims<isize>) = self
            .shape
            .iter()
            .zip(&self.strides)
            .filter(|(n, _)| **n != 1)
            .map(|(&n, &s)| (n, s))
            .unzip();
        let mut strides: Dims<isize> = Dims::from_elem(0, shape.len());
        let (mut oi, mut oj, mut ni, mut nj) = (0, 1, 0, 1);
        while ni < shape.len() && oi < old_shape.len() {
            let (mut new_count, mut old_count) = (shape[ni], old_shape[oi]);
            // Grow the shorter side until both groups hold the same elements.
            while new_count != old_count {
                if new_count < old_count {
                    new_count *= shape[nj];
                    nj += 1;
                } else {
                    old_count *= old_shape[oj];
                    oj += 1;
                }
            }
            // The old group must be one run of memory (each stride the next one's span).
            if (oi..oj - 1)
                .any(|k| old_strides[k] != old_strides[k + 1] * old_shape[k + 1] as isize)
            {
                return None;
            }
            strides[nj - 1] = old_strides[oj - 1];
            for k in (ni + 1..nj).rev() {
                strides[k - 1] = strides[k] * shape[k] as isize;
            }
            ni = nj;
            nj += 1;
            oi = oj;
            oj += 1;
        }
        let last = if ni >= 1 { strides[ni - 1] } else { itemsize };
        for stride in &mut strides[ni..] {
            *stride = last;
        }
        Some(Layout {
            dtype: self.dtype,
            shape: new_shape,
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

    fn f32s(shape: &[usize], strides: Option<&[isize]>) -> Layout {
        Layout::new(DType::FLOAT32, shape, strides, 0, false).unwrap()
    }

    #[test]
    fn minus_one_takes_what_is_left_and_sizes_must_agree() {
        let a = f32s(&[2, 3, 4], None);
        assert_eq!(a.resolve_shape(&[-1, 4]).unwrap().as_slice(), &[6, 4]);
        assert_eq!(a.resolve_shape(&[24]).unwrap().as_slice(), &[24]);
        let err = a.resolve_shape(&[5, -1]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "shape: cannot reshape an array of 24 elements (shape [2, 3, 4]) into shape [5, -1]"
        );
        assert!(
            a.resolve_shape(&[-1, -1])
                .unwrap_err()
                .to_string()
                .contains("more than one -1")
        );
        assert!(
            a.resolve_shape(&[-2, -12])
                .unwrap_err()
                .to_string()
                .contains("negative extent -2")
        );
        assert!(a.resolve_shape(&[25]).is_err());
        let empty = f32s(&[0, 3], None);
        assert!(empty.resolve_shape(&[0, -1]).is_err());
        assert_eq!(
            empty.resolve_shape(&[3, 0, 7]).unwrap().as_slice(),
            &[3, 0, 7]
        );
    }

    #[test]
    fn contiguous_arrays_reshape_to_views() {
        let a = f32s(&[2, 3, 4], None);
        let v = a.reshaped(&[6, 4]).unwrap();
        assert_eq!(v.strides(), &[16, 4]);
        let v = a.with_offset(8).reshaped(&[1, 24, 1]).unwrap();
        assert_eq!((v.strides(), v.offset()), (&[96, 4, 4][..], 8));
    }

    #[test]
    fn strided_arrays_reshape_to_views_where_groups_are_runs() {
        // Every other row of an (8, 4) array: rows stay runs, so (4, 4) -> (4, 2, 2) is a view
        // and (4, 4) -> (16,) is not.
        let rows = f32s(&[4, 4], Some(&[32, 4]));
        let v = rows.reshaped(&[4, 2, 2]).unwrap();
        assert_eq!(v.strides(), &[32, 8, 4]);
        let v = rows.reshaped(&[2, 2, 4]).unwrap();
        assert_eq!(v.strides(), &[64, 32, 4]);
        assert!(rows.reshaped(&[16]).is_none());
        // A transpose flattens only by copying; adding unit dimensions is a view.
        let t = f32s(&[3, 2], Some(&[4, 12]));
        assert!(t.reshaped(&[6]).is_none());
        let v = t.reshaped(&[3, 1, 2, 1]).unwrap();
        assert_eq!(v.strides(), &[4, 24, 12, 12]);
        // Unit dimensions of any stride are dropped before matching.
        let unit = f32s(&[2, 1, 3], Some(&[24, 999, 4]));
        assert!(!unit.is_c_contiguous());
        assert_eq!(unit.reshaped(&[2, 3]).unwrap().strides(), &[24, 4]);
    }
}
