//! Basic indexing and transposition of a [`Layout`]: NumPy's rules for `x[...]` with integers,
//! slices, `...` and `None`, and for `x.T` / `x.transpose(axes)`. Every result is a view of the
//! same bytes: only shape, strides and offset change.

use super::{Dims, Layout, MAX_NDIM};
use crate::{Error, Result};

/// One entry of a basic index, as Python's `x[...]` writes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Index {
    /// One position (negative counts from the end): the dimension goes away.
    At(isize),
    /// `start:stop:step`, each `None` where left out (Python's defaults for the step's sign).
    Slice {
        /// First position (inclusive).
        start: Option<isize>,
        /// Last position (exclusive).
        stop: Option<isize>,
        /// The step; zero is refused.
        step: Option<isize>,
    },
    /// `...`: as many whole dimensions as the rest of the index leaves.
    Ellipsis,
    /// `None` (`numpy.newaxis`): a new dimension of extent 1.
    NewAxis,
}

impl Index {
    /// `:`, a whole dimension.
    pub const ALL: Index = Index::Slice {
        start: None,
        stop: None,
        step: None,
    };
}

/// A slice's first position, step and length in a dimension of extent `n`, as Python's
/// `slice.indices(n)` and `len(range(...))` compute them.
fn slice_positions(
    start: Option<isize>,
    stop: Option<isize>,
    step: Option<isize>,
    n: usize,
) -> Result<(isize, isize, usize)> {
    let step = step.unwrap_or(1);
    if step == 0 {
        return Err(Error::invalid("index", "a slice step cannot be zero"));
    }
    let n = n as isize;
    // Where a position from the end lands, clamped as Python clamps slice bounds.
    let clamp = |position: isize, low: isize, high: isize| {
        let position = if position < 0 {
            position.saturating_add(n)
        } else {
            position
        };
        position.clamp(low, high)
    };
    // `n` is at most isize::MAX, so `last` and the clamped positions (in -1..=n) are exact.
    let last = n.saturating_sub(1);
    let (start, stop) = if step > 0 {
        (
            start.map_or(0, |s| clamp(s, 0, n)),
            stop.map_or(n, |s| clamp(s, 0, n)),
        )
    } else {
        (
            start.map_or(last, |s| clamp(s, -1, last)),
            stop.map_or(-1, |s| clamp(s, -1, last)),
        )
    };
    // The positions the slice covers, counted in steps of any size (isize::MIN included).
    let (low, high) = if step > 0 {
        (start, stop)
    } else {
        (stop, start)
    };
    let span = high.abs_diff(low);
    let len = match (span.checked_sub(1), step.unsigned_abs()) {
        (Some(rest), stride) if high > low => rest
            .checked_div(stride)
            .map_or(0, |steps| steps.saturating_add(1)),
        _ => 0,
    };
    Ok((start, step, len))
}

impl Layout {
    /// The view `x[index]` selects, with NumPy's basic indexing: an integer picks one position
    /// and drops its dimension, a slice keeps a strided part of it, `...` stands for the
    /// dimensions the rest leaves, and `None` inserts a dimension of extent 1. Dimensions the
    /// index does not reach are kept whole.
    ///
    /// Errors name the index: two ellipses or a step of zero (`index: ...`, a ValueError in
    /// Python), and a position outside its dimension or more entries than dimensions
    /// ([`Error::IndexOutOfBounds`], an IndexError, as NumPy raises).
    ///
    /// ```
    /// use devbuf_core::{DType, Index, Layout};
    ///
    /// // A 4x6 float32 array: rows 1 and 3, every other column backwards.
    /// let a = Layout::contiguous(DType::FLOAT32, &[4, 6], 0)?;
    /// let step = |start, step| Index::Slice { start, stop: None, step: Some(step) };
    /// let v = a.index(&[step(Some(1), 2), step(None, -2)])?;
    /// assert_eq!((v.shape(), v.strides(), v.offset()), (&[2, 3][..], &[48, -8][..], 44));
    /// // One row is a 1-d view; `None` adds a dimension.
    /// let row = a.index(&[Index::At(-1), Index::NewAxis])?;
    /// assert_eq!((row.shape(), row.offset()), (&[1, 6][..], 72));
    /// # Ok::<(), devbuf_core::Error>(())
    /// ```
    pub fn index(&self, index: &[Index]) -> Result<Layout> {
        let ellipses = index.iter().filter(|i| **i == Index::Ellipsis).count();
        if ellipses > 1 {
            return Err(Error::invalid(
                "index",
                "an index can only have a single ellipsis ('...')",
            ));
        }
        let consuming = index
            .iter()
            .filter(|i| matches!(i, Index::At(_) | Index::Slice { .. }))
            .count();
        if consuming > self.ndim() {
            return Err(Error::IndexOutOfBounds {
                key: "index",
                message: format!(
                    "too many indices: the array has {} dimension{} and the index {consuming}",
                    self.ndim(),
                    if self.ndim() == 1 { "" } else { "s" }
                ),
            });
        }
        let mut shape = Dims::<usize>::new();
        let mut strides = Dims::<isize>::new();
        let mut offset = self.offset as isize;
        let mut axis = 0usize;
        // Checked above: `consuming` is at most the array's dimensions.
        let whole = self.ndim().saturating_sub(consuming);
        // The positions and strides of a view of a valid layout stay inside its span, an isize;
        // checked all the same, so that no input can wrap them.
        let overflow = || Error::invalid("index", "the view's offset overflows the address space");
        let keep = |axis: usize, shape: &mut Dims<usize>, strides: &mut Dims<isize>| {
            shape.push(self.shape[axis]);
            strides.push(self.strides[axis]);
        };
        for entry in index {
            match *entry {
                Index::At(position) => {
                    let n = self.shape[axis];
                    let at = if position < 0 {
                        position.checked_add(n as isize)
                    } else {
                        Some(position)
                    };
                    let at = at
                        .filter(|&at| at >= 0 && (at as usize) < n)
                        .ok_or_else(|| Error::IndexOutOfBounds {
                            key: "index",
                            message: format!(
                                "{position} is out of bounds for axis {axis} with size {n}"
                            ),
                        })?;
                    offset = at
                        .checked_mul(self.strides[axis])
                        .and_then(|reach| offset.checked_add(reach))
                        .ok_or_else(overflow)?;
                    axis = axis.saturating_add(1);
                }
                Index::Slice { start, stop, step } => {
                    let (first, step, len) = slice_positions(start, stop, step, self.shape[axis])?;
                    if len > 0 {
                        offset = first
                            .checked_mul(self.strides[axis])
                            .and_then(|reach| offset.checked_add(reach))
                            .ok_or_else(overflow)?;
                    }
                    shape.push(len);
                    // One position or none: the stride is never stepped, and any step is allowed.
                    let stride = if len > 1 {
                        self.strides[axis].checked_mul(step).ok_or_else(overflow)?
                    } else {
                        self.strides[axis]
                    };
                    strides.push(stride);
                    axis = axis.saturating_add(1);
                }
                Index::Ellipsis => {
                    for _ in 0..whole {
                        keep(axis, &mut shape, &mut strides);
                        axis = axis.saturating_add(1);
                    }
                }
                Index::NewAxis => {
                    shape.push(1);
                    strides.push(0);
                }
            }
        }
        while axis < self.ndim() {
            keep(axis, &mut shape, &mut strides);
            axis = axis.saturating_add(1);
        }
        if shape.len() > MAX_NDIM {
            return Err(Error::invalid(
                "index",
                format!(
                    "the view would have {} dimensions, more than {MAX_NDIM}",
                    shape.len()
                ),
            ));
        }
        // A view without elements stays where its parent starts, so that it fits whatever the
        // positions of its empty slices were.
        let empty = shape.contains(&0);
        Ok(Layout {
            dtype: self.dtype,
            shape,
            strides,
            offset: if empty { self.offset } else { offset as usize },
            readonly: self.readonly,
        })
    }

    /// The view with its dimensions permuted: `axes[i]` is the dimension that becomes
    /// dimension `i` (negative counts from the end); `None` reverses them, as NumPy's `x.T`.
    /// `axes` must name every dimension once (`axes: ...` otherwise).
    pub fn transpose(&self, axes: Option<&[isize]>) -> Result<Layout> {
        let ndim = self.ndim();
        let order: Dims<usize> = match axes {
            None => (0..ndim).rev().collect(),
            Some(axes) => {
                if axes.len() != ndim {
                    return Err(Error::invalid(
                        "axes",
                        format!("{} axes for an array of {ndim} dimensions", axes.len()),
                    ));
                }
                let mut seen = [false; MAX_NDIM];
                let mut order = Dims::new();
                for &axis in axes {
                    let resolved = if axis < 0 {
                        axis.saturating_add(ndim as isize)
                    } else {
                        axis
                    };
                    if resolved < 0 || resolved >= ndim as isize {
                        return Err(Error::invalid(
                            "axes",
                            format!(
                                "axis {axis} is out of bounds for an array of {ndim} dimensions"
                            ),
                        ));
                    }
                    let resolved = resolved as usize;
                    if std::mem::replace(&mut seen[resolved], true) {
                        return Err(Error::invalid("axes", format!("axis {axis} is repeated")));
                    }
                    order.push(resolved);
                }
                order
            }
        };
        Ok(Layout {
            dtype: self.dtype,
            shape: order.iter().map(|&a| self.shape[a]).collect(),
            strides: order.iter().map(|&a| self.strides[a]).collect(),
            offset: self.offset,
            readonly: self.readonly,
        })
    }
}

#[cfg(test)]
#[allow(
    clippy::arithmetic_side_effects,
    reason = "tests: expected positions and addresses from small constants"
)]
mod tests {
    use super::*;
    use crate::DType;

    fn slice(start: Option<isize>, stop: Option<isize>, step: Option<isize>) -> Index {
        Index::Slice { start, stop, step }
    }

    /// The positions Python's `range(n)[start:stop:step]` holds, for comparison.
    fn python_positions(
        n: usize,
        start: Option<isize>,
        stop: Option<isize>,
        step: isize,
    ) -> Vec<isize> {
        let (first, step, len) = slice_positions(start, stop, Some(step), n).unwrap();
        (0..len as isize).map(|i| first + i * step).collect()
    }

    #[test]
    fn slices_select_what_python_selects() {
        assert_eq!(python_positions(10, None, None, 3), vec![0, 3, 6, 9]);
        assert_eq!(python_positions(10, None, None, -3), vec![9, 6, 3, 0]);
        assert_eq!(python_positions(10, Some(-2), None, 1), vec![8, 9]);
        assert_eq!(python_positions(10, Some(8), Some(2), -2), vec![8, 6, 4]);
        assert_eq!(python_positions(10, Some(20), Some(-20), -4), vec![9, 5, 1]);
        assert_eq!(
            python_positions(10, Some(5), Some(5), 1),
            Vec::<isize>::new()
        );
        assert_eq!(python_positions(0, None, None, -1), Vec::<isize>::new());
        assert_eq!(
            python_positions(3, Some(isize::MIN), Some(isize::MAX), 1),
            vec![0, 1, 2]
        );
        let err = slice_positions(None, None, Some(0), 3).unwrap_err();
        assert_eq!(err.to_string(), "index: a slice step cannot be zero");
    }

    #[test]
    fn integers_ellipsis_and_new_axes() {
        let a = Layout::contiguous(DType::INT16, &[2, 3, 4], 8).unwrap();
        let v = a.index(&[Index::Ellipsis, Index::At(1)]).unwrap();
        assert_eq!(
            (v.shape(), v.strides(), v.offset()),
            (&[2, 3][..], &[24, 8][..], 10)
        );
        let v = a
            .index(&[
                Index::At(1),
                Index::NewAxis,
                Index::Ellipsis,
                Index::NewAxis,
            ])
            .unwrap();
        assert_eq!(v.shape(), &[1, 3, 4, 1]);
        assert_eq!(v.strides(), &[0, 8, 2, 0]);
        assert_eq!(v.offset(), 32);
        let scalar = a
            .index(&[Index::At(-1), Index::At(-1), Index::At(-1)])
            .unwrap();
        assert_eq!((scalar.ndim(), scalar.offset()), (0, 8 + 46));
        // Nothing after the index is left out: trailing dimensions are kept whole.
        assert_eq!(a.index(&[]).unwrap(), a);
    }

    #[test]
    fn mistakes_name_the_index() {
        let a = Layout::contiguous(DType::FLOAT32, &[2, 3], 0).unwrap();
        let err = a.index(&[Index::At(0), Index::At(3)]).unwrap_err();
        assert!(matches!(err, Error::IndexOutOfBounds { .. }));
        assert_eq!(
            err.to_string(),
            "index: 3 is out of bounds for axis 1 with size 3"
        );
        assert!(a.index(&[Index::At(-3)]).is_err());
        assert!(a.index(&[Index::At(isize::MIN)]).is_err());
        let err = a.index(&[Index::ALL, Index::ALL, Index::ALL]).unwrap_err();
        assert!(
            err.to_string().starts_with("index: too many indices"),
            "{err}"
        );
        let err = a.index(&[Index::Ellipsis, Index::Ellipsis]).unwrap_err();
        assert!(err.to_string().contains("single ellipsis"), "{err}");
    }

    #[test]
    fn empty_views_stay_inside_their_parent() {
        let a = Layout::contiguous(DType::FLOAT32, &[4, 4], 0).unwrap();
        let v = a
            .index(&[slice(Some(4), None, None), slice(Some(4), None, None)])
            .unwrap();
        assert_eq!((v.shape(), v.offset()), (&[0, 0][..], 0));
        v.check_fits(0, 64, "offset").unwrap();
    }

    #[test]
    fn transposes_permute_shape_and_strides() {
        let a = Layout::contiguous(DType::FLOAT64, &[2, 3, 4], 0).unwrap();
        let t = a.transpose(None).unwrap();
        assert_eq!((t.shape(), t.strides()), (&[4, 3, 2][..], &[8, 32, 96][..]));
        assert!(t.is_f_contiguous());
        let p = a.transpose(Some(&[1, -1, 0])).unwrap();
        assert_eq!((p.shape(), p.strides()), (&[3, 4, 2][..], &[32, 8, 96][..]));
        for (axes, expected) in [
            (&[0, 1][..], "axes: 2 axes for an array of 3 dimensions"),
            (
                &[0, 1, 3][..],
                "axes: axis 3 is out of bounds for an array of 3 dimensions",
            ),
            (&[0, 1, 1][..], "axes: axis 1 is repeated"),
        ] {
            assert_eq!(a.transpose(Some(axes)).unwrap_err().to_string(), expected);
        }
    }
}
