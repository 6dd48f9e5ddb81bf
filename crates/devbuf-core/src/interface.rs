//! The three descriptor forms, parsed and produced in one place:
//!
//! | protocol | strides | offset |
//! |---|---|---|
//! | `__cuda_array_interface__` (CAI v3) | bytes, `None` = C order | none: `data` is element 0 |
//! | `__sycl_usm_array_interface__` (SUAI v1) | elements, `None` = C order | elements from `data` |
//! | DLPack `DLTensor` | elements (always filled since 1.2; `NULL` accepted) | `byte_offset` |
//!
//! Imports produce a [`ForeignLayout`]: the exact span of bytes the elements occupy (what a foreign
//! [`crate::Buffer`] should wrap) and the layout of the elements inside it. Exports derive each
//! protocol's fields from an [`Array`].

// Caller numbers become addresses here: every size, count, offset and alignment is checked
// (docs/architecture.md, "Untrusted numbers").
#![deny(clippy::arithmetic_side_effects)]

use dlpark::ffi::DLTensor;
use smallvec::SmallVec;

use std::sync::Arc;

use crate::{
    Array, Buffer, DType, Error, ForeignQueue, Layout, MemKind, Owner, Queue, Result, check_ndim,
};

/// The keys of a CAI or SUAI dictionary, after the caller converted each Python value to its Rust
/// type (a wrong Python type is the caller's error to report, naming the key). The sequences and
/// the typestr are borrowed: an import reads them where the caller keeps them (its stack, the
/// producer's str) and copies nothing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct InterfaceDict<'a> {
    /// The protocol version (CAI 2 or 3, SUAI 1).
    pub version: i64,
    /// `(address, read-only)`.
    pub data: (usize, bool),
    /// The extent of each dimension.
    pub shape: &'a [i64],
    /// The element type, as NumPy's array-interface typestr (`<f4`, `|b1`...).
    pub typestr: &'a str,
    /// CAI's `descr` or SUAI's `typedescr`: `(name, typestr)` pairs.
    pub descr: Option<&'a [(String, String)]>,
    /// The step between elements of each dimension (CAI: bytes; SUAI: elements); `None` when
    /// C-contiguous.
    pub strides: Option<&'a [i64]>,
    /// SUAI's `offset`, in elements. Always 0 for CAI.
    pub offset: i64,
    /// Whether CAI's `mask` was given and not `None`.
    pub has_mask: bool,
}

/// Where an imported array's elements are, as this module's imports checked them: every element
/// lies inside the `len` bytes at `base`, aligned for its type. Only this crate makes or changes
/// one, so [`Array::from_foreign`] need not check the fit again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForeignLayout {
    /// Address of the lowest byte any element occupies (element 0's address for empty arrays).
    pub(crate) base: usize,
    /// Bytes from `base` to the end of the highest element (0 for empty arrays).
    pub(crate) len: usize,
    /// The elements' layout relative to `base`.
    pub(crate) layout: Layout,
}

impl ForeignLayout {
    /// Address of the lowest byte any element occupies (element 0's address for empty arrays).
    pub fn base(&self) -> usize {
        self.base
    }

    /// Bytes from [`ForeignLayout::base`] to the end of the highest element (0 for empty arrays).
    pub fn byte_len(&self) -> usize {
        self.len
    }

    /// The elements' layout relative to [`ForeignLayout::base`].
    pub fn layout(&self) -> &Layout {
        &self.layout
    }
}

/// The CAI versions devbuf reads.
pub const CAI_VERSIONS: std::ops::RangeInclusive<i64> = 0..=3;
/// The SUAI version devbuf reads and writes.
pub const SUAI_VERSION: i64 = 1;

/// Validates a `__cuda_array_interface__` dictionary.
pub fn import_cai(dict: &InterfaceDict) -> Result<ForeignLayout> {
    if !CAI_VERSIONS.contains(&dict.version) {
        return Err(Error::invalid(
            "version",
            format!(
                "CAI version {} is not supported (devbuf reads versions 0 to 3)",
                dict.version
            ),
        ));
    }
    if dict.has_mask {
        return Err(Error::invalid(
            "mask",
            "masked arrays are not supported; pass mask=None",
        ));
    }
    let dtype = parse_dtype(dict, "descr")?;
    import_strided(
        dtype,
        dict.shape,
        dict.strides,
        dict.data.0,
        dict.data.1,
        "data",
    )
}

/// Validates a `__sycl_usm_array_interface__` dictionary (the `syclobj` key is the SYCL
/// backend's business).
pub fn import_suai(dict: &InterfaceDict) -> Result<ForeignLayout> {
    if dict.version != SUAI_VERSION {
        return Err(Error::invalid(
            "version",
            format!(
                "SUAI version {} is not supported (expected 1)",
                dict.version
            ),
        ));
    }
    let dtype = parse_dtype(dict, "typedescr")?;
    let itemsize = dtype.itemsize() as i64;
    if dict.offset < 0 {
        return Err(Error::invalid(
            "offset",
            format!("{} is negative", dict.offset),
        ));
    }
    let offset_bytes = dict
        .offset
        .checked_mul(itemsize)
        .and_then(|bytes| usize::try_from(bytes).ok())
        .ok_or_else(|| Error::invalid("offset", format!("{} elements overflows", dict.offset)))?;
    let element0 = dict.data.0.checked_add(offset_bytes).ok_or_else(|| {
        Error::invalid(
            "offset",
            format!("{} elements past data overflows", dict.offset),
        )
    })?;
    let strides = dict
        .strides
        .map(|strides| byte_strides(strides, itemsize))
        .transpose()?;
    let key = if dict.offset == 0 { "data" } else { "offset" };
    import_strided(
        dtype,
        dict.shape,
        strides.as_deref(),
        element0,
        dict.data.1,
        key,
    )
}

/// Validates a DLTensor: its shape, strides (in elements; `NULL` means C order), dtype and
/// `byte_offset`.
///
/// # Safety
/// When `tensor.ndim` is in `0..=MAX_NDIM`, `tensor.shape` and (when not null) `tensor.strides`
/// point to `tensor.ndim` readable values.
pub unsafe fn import_dltensor(tensor: &DLTensor, readonly: bool) -> Result<ForeignLayout> {
    let dtype = DType::from_dlpack(tensor.dtype)?;
    // Bounded before it sizes any read: the producer's arrays may hold fewer values than it says.
    let ndim = check_ndim(tensor.ndim.into(), "ndim")?;
    if ndim > 0 && tensor.shape.is_null() {
        return Err(Error::invalid(
            "shape",
            format!("is NULL for {ndim} dimensions"),
        ));
    }
    let read = |ptr: *const i64| -> &[i64] {
        if ndim == 0 {
            &[]
        } else {
            // SAFETY: the caller guarantees `ndim` readable values behind non-null pointers.
            unsafe { std::slice::from_raw_parts(ptr, ndim) }
        }
    };
    let shape = read(tensor.shape);
    let itemsize = dtype.itemsize() as i64;
    let strides = if tensor.strides.is_null() {
        None
    } else {
        Some(byte_strides(read(tensor.strides), itemsize)?)
    };
    let element0 = (tensor.data as usize)
        .checked_add(tensor.byte_offset as usize)
        .ok_or_else(|| {
            Error::invalid("byte_offset", format!("{} overflows", tensor.byte_offset))
        })?;
    let element0 = if tensor.data.is_null() { 0 } else { element0 };
    import_strided(dtype, shape, strides.as_deref(), element0, readonly, "data")
}

/// Strides given in elements (SUAI, DLPack) as byte strides, for [`import_strided`].
fn byte_strides(strides: &[i64], itemsize: i64) -> Result<SmallVec<[i64; 4]>> {
    strides
        .iter()
        .map(|&s| {
            s.checked_mul(itemsize)
                .ok_or_else(|| Error::invalid("strides", format!("{s} elements overflows")))
        })
        .collect()
}

/// The element type from `typestr`, checked against `descr` (CAI) / `typedescr` (SUAI).
fn parse_dtype(dict: &InterfaceDict, descr_key: &'static str) -> Result<DType> {
    let dtype = DType::from_typestr(dict.typestr)?;
    if let Some(descr) = dict.descr {
        let plain = match descr {
            [(name, typestr)] => {
                name.is_empty() && DType::from_typestr(typestr).ok() == Some(dtype)
            }
            _ => false,
        };
        if !plain {
            return Err(Error::invalid(
                descr_key,
                format!(
                    "{descr:?} describes a structured type; only plain {:?} is supported",
                    dict.typestr
                ),
            ));
        }
    }
    Ok(dtype)
}

/// The foreign span of elements whose element 0 is at `element0`, with byte strides (`None` = C
/// order): what the buffer protocol gives, and what the other imports reduce to.
pub fn import_strided(
    dtype: DType,
    shape: &[i64],
    strides: Option<&[i64]>,
    element0: usize,
    readonly: bool,
    pointer_key: &'static str,
) -> Result<ForeignLayout> {
    let mut extents = SmallVec::<[usize; 4]>::new();
    for &n in shape {
        extents.push(usize::try_from(n).map_err(|_| negative_extent(n))?);
    }
    let strides = strides
        .map(|strides| {
            strides
                .iter()
                .map(|&s| isize::try_from(s).map_err(|_| overflowing_stride(s)))
                .collect::<Result<SmallVec<[isize; 4]>>>()
        })
        .transpose()?;
    let at_element0 = Layout::new(dtype, &extents, strides.as_deref(), 0, readonly)?;
    let Some((low, end)) = at_element0.extent() else {
        return Ok(ForeignLayout {
            base: element0,
            len: 0,
            layout: at_element0,
        });
    };
    if element0 == 0 {
        return Err(null_pointer(pointer_key));
    }
    // A layout's extent is far inside i128 (see `Layout::extent`): these sums are exact.
    let base = (element0 as i128).saturating_add(low);
    let len = end.saturating_sub(low);
    // No allocation is larger than isize::MAX bytes (Rust's and C's object size limit).
    if base < 0 || base.saturating_add(len) > usize::MAX as i128 || len > isize::MAX as i128 {
        return Err(outside_address_space(&at_element0, element0));
    }
    let (base, len, offset) = (base as usize, len as usize, low.unsigned_abs() as usize);
    let layout = at_element0.with_offset(offset);
    // The span is the elements' own extent: they fit it (`check_fits`' range test) by
    // construction, and only their alignment is left to check.
    layout.check_alignment(base, pointer_key)?;
    Ok(ForeignLayout { base, len, layout })
}

// `import_strided`'s errors, out of its hot code.

#[cold]
#[inline(never)]
fn negative_extent(n: i64) -> Error {
    Error::invalid("shape", format!("extent {n} is negative"))
}

#[cold]
#[inline(never)]
fn overflowing_stride(stride: i64) -> Error {
    Error::invalid("strides", format!("{stride} overflows"))
}

#[cold]
#[inline(never)]
fn null_pointer(pointer_key: &'static str) -> Error {
    Error::invalid(pointer_key, "is a null pointer for a non-empty array")
}

#[cold]
#[inline(never)]
fn outside_address_space(at_element0: &Layout, element0: usize) -> Error {
    // What reaches: the extents of a C-contiguous array (`nbytes` for a raw pointer), else the
    // strides.
    let key = if at_element0.is_c_contiguous() {
        "shape"
    } else {
        "strides"
    };
    Error::invalid(
        key,
        format!(
            "shape {:?} with byte strides {:?} reaches outside the address space from \
             {element0:#x}",
            at_element0.shape(),
            at_element0.strides()
        ),
    )
}

/// SUAI's view of an array: `data` (a USM pointer into the allocation), `offset` and `strides`
/// in elements (`None` when C-contiguous).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SuaiFields {
    /// The address of the allocation's start as SUAI's `data` carries it.
    pub data: usize,
    /// Element 0's distance from `data`, in elements.
    pub offset: usize,
    /// The step of each dimension in elements; `None` when C-contiguous.
    pub strides: Option<Vec<i64>>,
}

impl Array {
    /// Foreign memory viewed through the layout an import checked against it: the buffer spans
    /// exactly `foreign`'s bytes, so the fit [`Array::new`] would check again holds already.
    /// With `producer`, the producer's queue, which may still have work on the memory: later work
    /// is ordered after it ([`Buffer::record_producer`]).
    ///
    /// # Safety
    /// As for [`crate::Buffer::from_foreign`], for `foreign.byte_len()` bytes at `foreign.base()`.
    pub unsafe fn from_foreign(
        queue: Arc<dyn Queue>,
        foreign: ForeignLayout,
        kind: MemKind,
        owner: Owner,
        producer: Option<Arc<dyn ForeignQueue>>,
    ) -> Array {
        let (ptr, len) = (foreign.base as *mut u8, foreign.len);
        // SAFETY: the caller's contract.
        let buffer = unsafe {
            match producer {
                Some(producer) => {
                    Buffer::from_foreign_produced_by(queue, ptr, len, kind, owner, producer)
                }
                None => Buffer::from_foreign(queue, ptr, len, kind, owner),
            }
        };
        Array::fitting(buffer, foreign.layout)
    }

    /// CAI's `data[0]`: element 0's address, or 0 for an empty array (CAI v3's rule).
    pub fn cai_data(&self) -> usize {
        if self.layout().size() == 0 {
            0
        } else {
            self.data_ptr()
        }
    }

    /// CAI's `strides`: byte strides, or `None` when C-contiguous.
    pub fn cai_strides(&self) -> Option<&[isize]> {
        (!self.layout().is_c_contiguous()).then(|| self.layout().strides())
    }

    /// SUAI's `data`, `offset` and `strides`. When the byte offset is not a whole number of
    /// elements, `data` absorbs the remainder (it stays a pointer into the same allocation).
    pub fn suai_fields(&self) -> Result<SuaiFields> {
        let layout = self.layout();
        let itemsize = layout.dtype().itemsize();
        let strides = if layout.is_c_contiguous() {
            None
        } else {
            Some(layout.element_strides()?)
        };
        // An item size is never 0; a remainder of the offset keeps `data` inside the buffer.
        let (whole, rest) = (
            layout.offset().checked_div(itemsize).unwrap_or_default(),
            layout.offset().checked_rem(itemsize).unwrap_or_default(),
        );
        Ok(SuaiFields {
            data: (self.buffer().ptr() as usize).saturating_add(rest),
            offset: whole,
            strides,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dlpark::ffi::{DLDataType, DLDataTypeCode, DLDevice, DLDeviceType};

    fn cai<'a>(shape: &'a [i64], strides: Option<&'a [i64]>, data: usize) -> InterfaceDict<'a> {
        InterfaceDict {
            version: 3,
            data: (data, false),
            shape,
            typestr: "<f4",
            strides,
            ..Default::default()
        }
    }

    #[test]
    fn cai_with_negative_strides_covers_the_whole_span() {
        // A 3x2 float32 array whose rows run backwards: element 0 is 16 bytes above the base.
        let f = import_cai(&cai(&[3, 2], Some(&[-8, 4]), 0x1010)).unwrap();
        assert_eq!((f.base, f.len, f.layout.offset()), (0x1000, 24, 16));
        assert_eq!(f.layout.strides(), &[-8, 4]);
    }

    #[test]
    fn suai_offsets_and_strides_are_in_elements() {
        let dict = InterfaceDict {
            version: 1,
            data: (0x2000, true),
            shape: &[4],
            typestr: "<f8",
            strides: Some(&[-2]),
            offset: 6,
            ..Default::default()
        };
        let f = import_suai(&dict).unwrap();
        assert_eq!((f.base, f.len, f.layout.offset()), (0x2000, 56, 48));
        assert!(f.layout.readonly());
        let err = import_suai(&InterfaceDict {
            version: 2,
            ..dict.clone()
        })
        .unwrap_err();
        assert!(err.to_string().starts_with("version: "), "{err}");
        let err = import_suai(&InterfaceDict { offset: -1, ..dict }).unwrap_err();
        assert!(err.to_string().starts_with("offset: "), "{err}");
    }

    #[test]
    fn malformed_dicts_name_their_key() {
        let bad = |dict: InterfaceDict, key: &str| {
            let err = import_cai(&dict).unwrap_err();
            assert!(
                err.to_string().starts_with(&format!("{key}: ")),
                "{key}: {err}"
            );
        };
        bad(
            InterfaceDict {
                version: 4,
                ..cai(&[2], None, 0x1000)
            },
            "version",
        );
        bad(
            InterfaceDict {
                has_mask: true,
                ..cai(&[2], None, 0x1000)
            },
            "mask",
        );
        bad(
            InterfaceDict {
                typestr: "<q8",
                ..cai(&[2], None, 0x1000)
            },
            "typestr",
        );
        bad(cai(&[-2], None, 0x1000), "shape");
        bad(cai(&[2], None, 0), "data");
        bad(cai(&[2], None, 0x1002), "data");
        bad(cai(&[2, 2], Some(&[4]), 0x1000), "strides");
        bad(cai(&[2], Some(&[i64::MAX]), 0x1000), "strides");
        bad(cai(&[3], Some(&[-4]), 0x4), "strides");
        bad(
            InterfaceDict {
                descr: Some(&[("x".into(), "<f4".into()), ("y".into(), "<f4".into())]),
                ..cai(&[2], None, 0x1000)
            },
            "descr",
        );
        // A plain descr and an empty array with a null pointer are fine.
        import_cai(&InterfaceDict {
            descr: Some(&[(String::new(), "<f4".into())]),
            ..cai(&[2], None, 0x1000)
        })
        .unwrap();
        assert_eq!(import_cai(&cai(&[0, 3], None, 0)).unwrap().len, 0);
    }

    #[test]
    fn dltensor_null_strides_mean_c_order_and_byte_offset_counts() {
        let mut shape = [2i64, 3];
        let tensor = DLTensor {
            data: 0x3000 as *mut _,
            device: DLDevice {
                device_type: DLDeviceType::CPU,
                device_id: 0,
            },
            ndim: 2,
            dtype: DLDataType {
                code: DLDataTypeCode::INT,
                bits: 16,
                lanes: 1,
            },
            shape: shape.as_mut_ptr(),
            strides: std::ptr::null_mut(),
            byte_offset: 64,
        };
        // SAFETY: shape points to 2 values; strides is null.
        let f = unsafe { import_dltensor(&tensor, false) }.unwrap();
        assert_eq!((f.base, f.len), (0x3040, 12));
        assert_eq!(f.layout.strides(), &[6, 2]);
        let negative = DLTensor { ndim: -1, ..tensor };
        // SAFETY: ndim is rejected before any read.
        let err = unsafe { import_dltensor(&negative, false) }.unwrap_err();
        assert!(err.to_string().starts_with("ndim: "), "{err}");
        // An `ndim` larger than the producer's arrays must be refused before it sizes a read:
        // `shape` holds 2 values, and reading 2^31 - 1 of them leaves mapped memory.
        for ndim in [i32::MAX, crate::MAX_NDIM as i32 + 1] {
            // SAFETY: an ndim past MAX_NDIM is rejected before any read.
            let err = unsafe { import_dltensor(&DLTensor { ndim, ..tensor }, false) }.unwrap_err();
            assert_eq!(
                err.to_string(),
                format!("ndim: {ndim} dimensions is outside the supported range [0, 64]")
            );
        }
        let layout = Layout::contiguous(DType::UINT8, &[1; crate::MAX_NDIM + 1], 0).unwrap_err();
        assert!(
            layout.to_string().starts_with("shape: 65 dimensions"),
            "{layout}"
        );
    }
}
