//! Typed, strided views of a [`Buffer`]: the one place where shapes, strides and offsets are
//! validated, whatever protocol they came from.

// Caller numbers become addresses here: every size, count, offset and alignment is checked
// (docs/architecture.md, "Untrusted numbers").
#![deny(clippy::arithmetic_side_effects)]

mod assign;
mod broadcast;
mod copy;
mod fill;
mod index;
mod literal;
mod reshape;
mod retype;

use smallvec::SmallVec;

use crate::{Buffer, DType, Error, Result};
pub use index::Index;
pub use literal::Literal;

/// Per-dimension values, inline up to four dimensions (no allocation for most arrays).
type Dims<T> = SmallVec<[T; 4]>;

/// Where the elements of an array are, relative to the start of a buffer.
///
/// Strides and offset are in bytes, as in NumPy and CAI; the SUAI and DLPack forms (in elements)
/// are derived on export.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    dtype: DType,
    shape: Dims<usize>,
    strides: Dims<isize>,
    offset: usize,
    readonly: bool,
}

/// The most dimensions an array may have: NumPy's and DLPack consumers' limit. Counts read from
/// foreign memory are checked against it before they index anything.
pub const MAX_NDIM: usize = 64;

/// Checks a dimension count (as a foreign descriptor states it) against [`MAX_NDIM`], naming
/// `key` when it is out of range.
pub fn check_ndim(ndim: i64, key: &'static str) -> Result<usize> {
    usize::try_from(ndim)
        .ok()
        .filter(|&n| n <= MAX_NDIM)
        .ok_or_else(|| {
            Error::invalid(
                key,
                format!("{ndim} dimensions is outside the supported range [0, {MAX_NDIM}]"),
            )
        })
}

impl Layout {
    /// A C-contiguous layout of `shape` at byte `offset`.
    pub fn contiguous(dtype: DType, shape: &[usize], offset: usize) -> Result<Layout> {
        Layout::new(dtype, shape, None, offset, false)
    }

    /// A layout with explicit byte `strides` (`None` = C-contiguous). Checks that the shape's
    /// byte size fits in `isize`, its extents of 0 aside (as NumPy checks: so that no C stride
    /// overflows even when the array is empty), and that `strides` has one entry per dimension.
    pub fn new(
        dtype: DType,
        shape: &[usize],
        strides: Option<&[isize]>,
        offset: usize,
        readonly: bool,
    ) -> Result<Layout> {
        check_ndim(shape.len() as i64, "shape")?;
        shape
            .iter()
            .filter(|&&n| n != 0)
            .try_fold(dtype.itemsize(), |acc, &n| acc.checked_mul(n))
            .filter(|&n| n <= isize::MAX as usize)
            .ok_or_else(|| {
                Error::invalid("shape", format!("{shape:?} overflows the address space"))
            })?;
        let strides = match strides {
            Some(strides) => {
                if strides.len() != shape.len() {
                    return Err(Error::invalid(
                        "strides",
                        format!(
                            "has {} entries for {} dimensions",
                            strides.len(),
                            shape.len()
                        ),
                    ));
                }
                Dims::from_slice(strides)
            }
            None => c_strides(shape, dtype.itemsize()),
        };
        Ok(Layout {
            dtype,
            shape: Dims::from_slice(shape),
            strides,
            offset,
            readonly,
        })
    }

    /// The element type.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// The extent of each dimension.
    #[inline]
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// Byte strides, one per dimension.
    #[inline]
    pub fn strides(&self) -> &[isize] {
        &self.strides
    }

    /// Byte offset of element 0 from the start of the buffer.
    pub fn offset(&self) -> usize {
        self.offset
    }

    /// Whether consumers of this view may not write through it.
    #[inline]
    pub fn readonly(&self) -> bool {
        self.readonly
    }

    /// The same layout with element 0 at byte `offset`.
    pub fn with_offset(mut self, offset: usize) -> Layout {
        self.offset = offset;
        self
    }

    /// The same layout, read-only.
    pub fn into_readonly(mut self, readonly: bool) -> Layout {
        self.readonly = readonly;
        self
    }

    /// The number of dimensions.
    #[inline]
    pub fn ndim(&self) -> usize {
        self.shape.len()
    }

    /// Number of elements.
    #[inline]
    #[allow(
        clippy::arithmetic_side_effects,
        reason = "Layout::new checked that the elements' bytes fit in an isize; views keep to them"
    )]
    pub fn size(&self) -> usize {
        self.shape.iter().product()
    }

    /// Size of the elements in bytes (not the span they occupy).
    #[inline]
    #[allow(
        clippy::arithmetic_side_effects,
        reason = "Layout::new checked that the elements' bytes fit in an isize; views keep to them"
    )]
    pub fn nbytes(&self) -> usize {
        self.size() * self.dtype.itemsize()
    }

    /// Whether the elements are laid out in C order without gaps. Dimensions of extent 1 may have
    /// any stride, and an empty array is contiguous.
    pub fn is_c_contiguous(&self) -> bool {
        self.size() == 0
            || is_packed(
                self.shape.iter().rev().zip(self.strides.iter().rev()),
                self.dtype.itemsize(),
            )
    }

    /// Whether the elements are laid out in Fortran order without gaps.
    pub fn is_f_contiguous(&self) -> bool {
        self.size() == 0
            || is_packed(
                self.shape.iter().zip(self.strides.iter()),
                self.dtype.itemsize(),
            )
    }

    /// The byte range the elements occupy relative to element 0: `(lowest, end)` with `lowest <= 0`,
    /// or `None` for an array with no elements. Wide integers, so that absurd strides are reported
    /// rather than wrapped.
    #[allow(
        clippy::arithmetic_side_effects,
        reason = "each reach is below 2^126 (an extent below 2^63 times a stride of 64 bits), and \
                  the elements' count bounds their sum far below i128's range"
    )]
    pub fn extent(&self) -> Option<(i128, i128)> {
        if self.size() == 0 {
            return None;
        }
        let (mut low, mut high) = (0i128, 0i128);
        for (&n, &stride) in self.shape.iter().zip(&self.strides) {
            let reach = (n as i128 - 1) * stride as i128;
            if reach < 0 {
                low += reach;
            } else {
                high += reach;
            }
        }
        Some((low, high + self.dtype.itemsize() as i128))
    }

    /// Checks that every element lies inside a buffer of `len` bytes starting at address `base`,
    /// and that element 0 and the strides are aligned for the element type. `pointer_key` names the
    /// descriptor key that carried the address (e.g. "data" or "offset").
    pub fn check_fits(&self, base: usize, len: usize, pointer_key: &'static str) -> Result<()> {
        if self.offset > len {
            return Err(Error::invalid(
                "offset",
                format!("{} is past the end of the {len}-byte buffer", self.offset),
            ));
        }
        let Some((low, end)) = self.extent() else {
            return Ok(());
        };
        let (offset, len) = (self.offset as i128, len as i128);
        // Both within 2^64 of an extent i128 holds with room to spare.
        let (first, last) = (offset.saturating_add(low), offset.saturating_add(end));
        if first < 0 || last > len {
            return Err(Error::invalid(
                "strides",
                format!(
                    "shape {:?} with byte strides {:?} from offset {} reaches bytes {first}..{last}, \
                     outside the {len}-byte buffer",
                    self.shape, self.strides, self.offset
                ),
            ));
        }
        self.check_alignment(base, pointer_key)
    }

    /// Checks that element 0 (at `base` plus the offset) and the strides are aligned for the
    /// element type: the part of [`Layout::check_fits`] an import needs when the span it wraps is
    /// the elements' own extent, which they fit by construction.
    pub(crate) fn check_alignment(&self, base: usize, pointer_key: &'static str) -> Result<()> {
        let align = self.dtype.alignment();
        let element0 = base.wrapping_add(self.offset);
        if !element0.is_multiple_of(align) {
            return Err(Error::invalid(
                pointer_key,
                format!(
                    "element 0 at {element0:#x} is not aligned to {align} bytes for {}",
                    self.dtype
                ),
            ));
        }
        for (&n, &stride) in self.shape.iter().zip(&self.strides) {
            if n > 1 && stride.rem_euclid(align as isize) != 0 {
                return Err(Error::invalid(
                    "strides",
                    format!(
                        "byte stride {stride} is not a multiple of {align}, the alignment of {}",
                        self.dtype
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Strides in elements, for SUAI and DLPack. Fails when a byte stride is not a whole number of
    /// elements.
    pub fn element_strides(&self) -> Result<Vec<i64>> {
        let itemsize = self.dtype.itemsize() as isize;
        self.strides
            .iter()
            .zip(&self.shape)
            .map(|(&stride, &n)| {
                let whole = stride
                    .checked_rem(itemsize)
                    .filter(|&rest| rest == 0)
                    .and_then(|_| stride.checked_div(itemsize));
                if let Some(elements) = whole {
                    Ok(elements as i64)
                } else if n <= 1 {
                    // Any stride describes a dimension of extent 0 or 1; pick the natural one.
                    Ok(1)
                } else {
                    Err(Error::unexportable(format!(
                        "strides: byte stride {stride} is not a multiple of the item size {itemsize}"
                    )))
                }
            })
            .collect()
    }
}

/// `(2, 3)`, `(5,)`, `()`: a shape as Python (and NumPy's messages) print it.
pub(crate) fn python_shape(shape: &[usize]) -> String {
    match shape {
        [one] => format!("({one},)"),
        _ => format!(
            "({})",
            shape
                .iter()
                .map(usize::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// C-order byte strides for `shape`.
fn c_strides(shape: &[usize], itemsize: usize) -> Dims<isize> {
    // Pushed from the last dimension and turned around: `smallvec!` of zeros first is a call.
    let mut strides = Dims::<isize>::new();
    let mut step = itemsize as isize;
    for &n in shape.iter().rev() {
        strides.push(step);
        // Layout::new checked that the product of the non-zero extents fits: this never saturates.
        step = step.saturating_mul(n.max(1) as isize);
    }
    strides.reverse();
    strides
}

fn is_packed<'a>(dims: impl Iterator<Item = (&'a usize, &'a isize)>, itemsize: usize) -> bool {
    let mut expected = itemsize as isize;
    for (&n, &stride) in dims {
        if n != 1 {
            if stride != expected {
                return false;
            }
            let Some(next) = expected.checked_mul(n as isize) else {
                return false;
            };
            expected = next;
        }
    }
    true
}

/// A buffer seen through a layout: what every exchange protocol exports and imports.
#[derive(Debug, Clone)]
pub struct Array {
    buffer: Buffer,
    layout: Layout,
}

impl Array {
    /// Views `buffer` through `layout`, checking that every element is inside the buffer and aligned.
    pub fn new(buffer: Buffer, layout: Layout) -> Result<Array> {
        layout.check_fits(buffer.ptr() as usize, buffer.len(), "offset")?;
        Ok(Array { buffer, layout })
    }

    /// Views `buffer` through `layout`, which an import already checked against exactly this
    /// buffer's bytes (see [`Array::from_foreign`]).
    pub(crate) fn fitting(buffer: Buffer, layout: Layout) -> Array {
        debug_assert!(
            layout
                .check_fits(buffer.ptr() as usize, buffer.len(), "offset")
                .is_ok()
        );
        Array { buffer, layout }
    }

    /// The whole buffer as a one-dimensional array of bytes.
    #[inline]
    pub fn bytes(buffer: Buffer) -> Array {
        let layout = Layout {
            dtype: DType::UINT8,
            shape: smallvec::smallvec![buffer.len()],
            strides: smallvec::smallvec![1],
            offset: 0,
            readonly: false,
        };
        Array { buffer, layout }
    }

    /// The buffer viewed (its owner keeps the memory alive).
    pub fn buffer(&self) -> &Buffer {
        &self.buffer
    }

    /// How the buffer's bytes are seen: dtype, shape, strides, offset, read-only flag.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// Address of element 0.
    #[inline]
    #[allow(
        clippy::arithmetic_side_effects,
        reason = "Array::new checked that element 0 lies inside the buffer"
    )]
    pub fn data_ptr(&self) -> usize {
        self.buffer.ptr() as usize + self.layout.offset
    }

    /// Whether writes through this view are refused: the view says so, or its memory may only be
    /// read ([`Buffer::is_read_only`]).
    #[inline]
    pub fn readonly(&self) -> bool {
        self.layout.readonly || self.buffer.is_read_only()
    }

    /// The same view, with its read-only flag set to `readonly`.
    pub fn into_readonly(self, readonly: bool) -> Array {
        Array {
            buffer: self.buffer,
            layout: self.layout.into_readonly(readonly),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout(shape: &[usize], strides: Option<&[isize]>, offset: usize) -> Result<Layout> {
        Layout::new(DType::FLOAT32, shape, strides, offset, false)
    }

    #[test]
    fn contiguous_strides_and_flags() {
        let l = layout(&[2, 3, 4], None, 0).unwrap();
        assert_eq!(l.strides(), &[48, 16, 4]);
        assert!(l.is_c_contiguous() && !l.is_f_contiguous());
        assert_eq!((l.size(), l.nbytes()), (24, 96));
        let f = layout(&[2, 3], Some(&[4, 8]), 0).unwrap();
        assert!(f.is_f_contiguous() && !f.is_c_contiguous());
        let unit = layout(&[1, 5], Some(&[999, 4]), 0).unwrap();
        assert!(unit.is_c_contiguous());
        assert!(
            layout(&[0, 7], Some(&[-12345, 3]), 0)
                .unwrap()
                .is_c_contiguous()
        );
    }

    #[test]
    fn negative_strides_fit_when_element_zero_is_at_the_end() {
        // 4 floats reversed: element 0 is the last one in the 16-byte buffer.
        let reversed = layout(&[4], Some(&[-4]), 12).unwrap();
        assert_eq!(reversed.extent(), Some((-12, 4)));
        reversed.check_fits(0x1000, 16, "data").unwrap();
        let err = layout(&[4], Some(&[-4]), 8)
            .unwrap()
            .check_fits(0x1000, 16, "data")
            .unwrap_err();
        assert!(err.to_string().starts_with("strides: "), "{err}");
    }

    #[test]
    fn out_of_bounds_overflow_and_misalignment_name_their_key() {
        let err = layout(&[5], None, 0)
            .unwrap()
            .check_fits(0x1000, 16, "data")
            .unwrap_err();
        assert!(
            err.to_string().contains("outside the 16-byte buffer"),
            "{err}"
        );
        let err = layout(&[usize::MAX / 2, 3], None, 0).unwrap_err();
        assert!(err.to_string().starts_with("shape: "), "{err}");
        let err = layout(&[2], Some(&[4, 4]), 0).unwrap_err();
        assert!(
            err.to_string().starts_with("strides: has 2 entries"),
            "{err}"
        );
        let err = layout(&[2], None, 2)
            .unwrap()
            .check_fits(0x1000, 64, "offset")
            .unwrap_err();
        assert!(err.to_string().starts_with("offset: "), "{err}");
        let err = layout(&[2], Some(&[6]), 0)
            .unwrap()
            .check_fits(0x1000, 64, "data")
            .unwrap_err();
        assert!(
            err.to_string().starts_with("strides: byte stride 6"),
            "{err}"
        );
        let err = layout(&[2], None, 0)
            .unwrap()
            .check_fits(0x1001, 64, "data")
            .unwrap_err();
        assert!(err.to_string().starts_with("data: "), "{err}");
        let huge = layout(&[3], Some(&[isize::MAX]), 0).unwrap();
        assert!(huge.check_fits(0, usize::MAX, "data").is_err());
    }

    #[test]
    fn copies_of_strided_views_hold_only_their_elements() {
        let queue = crate::HostQueue::shared();
        let buffer = Buffer::alloc(&queue, crate::MemKind::Device, 64).unwrap();
        buffer
            .copy_from_host(&(0..64).collect::<Vec<u8>>())
            .unwrap();
        // Every other float32, backwards, starting at byte 40.
        let layout = Layout::new(DType::FLOAT32, &[3], Some(&[-8]), 40, true).unwrap();
        let view = Array::new(buffer, layout).unwrap();
        let copy = view.copy_to(&queue, crate::MemKind::Host).unwrap();
        assert_eq!(copy.buffer().len(), 12);
        assert_eq!(
            (copy.layout().offset(), copy.layout().strides()),
            (0, &[4][..])
        );
        assert!(!copy.readonly());
        let bytes = copy.buffer().to_vec().unwrap();
        assert_eq!(bytes, [40, 41, 42, 43, 32, 33, 34, 35, 24, 25, 26, 27]);
    }

    #[test]
    fn element_strides_require_whole_elements() {
        let l = layout(&[3, 2], Some(&[-24, 4]), 48).unwrap();
        assert_eq!(l.element_strides().unwrap(), vec![-6, 1]);
        let odd = Layout::new(DType::COMPLEX128, &[2], Some(&[24]), 0, false).unwrap();
        assert!(
            odd.element_strides()
                .unwrap_err()
                .to_string()
                .starts_with("strides: ")
        );
    }
}
