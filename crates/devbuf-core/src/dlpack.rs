//! DLPack managed tensors: exporting an [`Array`] (versioned or legacy) and taking ownership of
//! one a producer handed us.
//!
//! An exported tensor owns a clone of the array's [`Buffer`], so the memory outlives the producer's
//! Python object. Its deleter needs no GIL and never unwinds into the C caller.

use std::ffi::c_void;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::ptr::NonNull;

use dlpark::DlpackFlags;
use dlpark::ffi::{
    DLDevice, DLManagedTensor, DLManagedTensorVersioned, DLPACK_MAJOR_VERSION,
    DLPACK_MINOR_VERSION, DLPackVersion, DLTensor,
};

use crate::{Array, Buffer, Error, Owner, Result};

/// The DLPack version devbuf produces.
pub const VERSION: DLPackVersion = DLPackVersion {
    major: DLPACK_MAJOR_VERSION,
    minor: DLPACK_MINOR_VERSION,
};

/// Shape and element strides of an array as DLPack wants them, in one block whose pointers stay
/// put while the owner lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DlpackDims {
    /// `shape` followed by `strides`.
    values: Box<[i64]>,
}

impl DlpackDims {
    /// The DLPack dims of `array`; fails when a stride is not a whole number of elements.
    pub fn new(array: &Array) -> Result<Self> {
        let layout = array.layout();
        let mut values = Vec::with_capacity(2 * layout.ndim());
        values.extend(layout.shape().iter().map(|&n| n as i64));
        values.extend(layout.element_strides()?);
        Ok(DlpackDims {
            values: values.into_boxed_slice(),
        })
    }

    fn ndim(&self) -> usize {
        self.values.len() / 2
    }

    /// Fills `out` to describe `array` (whose dims these are) on `device`, pointing into `self`.
    /// `data` is element 0 (`NULL` for an empty array) and `byte_offset` is 0, which is what
    /// consumers that ignore `byte_offset` need.
    pub fn fill(&self, array: &Array, device: DLDevice, out: &mut DLTensor) -> Result<()> {
        let ndim = self.ndim();
        // DLTensor's pointers are mutable in C, but consumers only read through them.
        let base = self.values.as_ptr().cast_mut();
        *out = DLTensor {
            data: if array.layout().size() == 0 {
                std::ptr::null_mut()
            } else {
                array.data_ptr() as *mut c_void
            },
            device,
            ndim: ndim as i32,
            dtype: array.layout().dtype().to_dlpack()?,
            shape: base,
            // SAFETY: `values` holds 2 * ndim entries; the strides start at ndim.
            strides: unsafe { base.add(ndim) },
            byte_offset: 0,
        };
        Ok(())
    }
}

/// What a versioned export owns; `tensor` comes first so the tensor pointer is the context pointer.
#[repr(C)]
struct VersionedExport {
    tensor: DLManagedTensorVersioned,
    dims: DlpackDims,
    buffer: Buffer,
}

/// What a legacy export owns, laid out like [`VersionedExport`].
#[repr(C)]
struct LegacyExport {
    tensor: DLManagedTensor,
    dims: DlpackDims,
    buffer: Buffer,
}

/// Exports `array` as a versioned managed tensor on `device`. The caller owns the result and
/// must call its deleter once (or hand it to a consumer that will).
pub fn export_versioned(
    array: &Array,
    dims: DlpackDims,
    device: DLDevice,
    mut flags: DlpackFlags,
) -> Result<NonNull<DLManagedTensorVersioned>> {
    if array.readonly() {
        flags |= DlpackFlags::READ_ONLY;
    }
    let mut dl_tensor = empty_tensor(device);
    // The tensor points into `dims`' heap block, which moving `dims` into the box keeps in place.
    dims.fill(array, device, &mut dl_tensor)?;
    let raw = Box::into_raw(Box::new(VersionedExport {
        tensor: DLManagedTensorVersioned {
            version: VERSION,
            manager_ctx: std::ptr::null_mut(),
            deleter: Some(delete_versioned),
            flags,
            dl_tensor,
        },
        dims,
        buffer: array.buffer().clone(),
    }));
    // SAFETY: `raw` is a live box we own until the consumer calls the deleter.
    unsafe { (*raw).tensor.manager_ctx = raw.cast() };
    // SAFETY: Box::into_raw never returns null.
    Ok(unsafe { NonNull::new_unchecked(raw.cast()) })
}

/// Exports `array` as a legacy (pre-1.0) managed tensor, for consumers that ask for no version.
pub fn export_legacy(
    array: &Array,
    dims: DlpackDims,
    device: DLDevice,
) -> Result<NonNull<DLManagedTensor>> {
    let mut dl_tensor = empty_tensor(device);
    dims.fill(array, device, &mut dl_tensor)?;
    let raw = Box::into_raw(Box::new(LegacyExport {
        tensor: DLManagedTensor {
            dl_tensor,
            manager_ctx: std::ptr::null_mut(),
            deleter: Some(delete_legacy),
        },
        dims,
        buffer: array.buffer().clone(),
    }));
    // SAFETY: `raw` is a live box we own until the consumer calls the deleter.
    unsafe { (*raw).tensor.manager_ctx = raw.cast() };
    // SAFETY: Box::into_raw never returns null.
    Ok(unsafe { NonNull::new_unchecked(raw.cast()) })
}

fn empty_tensor(device: DLDevice) -> DLTensor {
    DLTensor {
        data: std::ptr::null_mut(),
        device,
        ndim: 0,
        dtype: dlpark::ffi::DLDataType {
            code: dlpark::ffi::DLDataTypeCode::UINT,
            bits: 8,
            lanes: 1,
        },
        shape: std::ptr::null_mut(),
        strides: std::ptr::null_mut(),
        byte_offset: 0,
    }
}

unsafe extern "C" fn delete_versioned(tensor: *mut DLManagedTensorVersioned) {
    if !tensor.is_null() {
        // Unwinding must not cross into the C caller.
        let _ = catch_unwind(AssertUnwindSafe(|| {
            // SAFETY: `tensor` is the first field of a VersionedExport leaked by export_versioned,
            // and DLPack calls the deleter once.
            drop(unsafe { Box::from_raw(tensor.cast::<VersionedExport>()) })
        }));
    }
}

unsafe extern "C" fn delete_legacy(tensor: *mut DLManagedTensor) {
    if !tensor.is_null() {
        let _ = catch_unwind(AssertUnwindSafe(|| {
            // SAFETY: as in delete_versioned, for a LegacyExport.
            drop(unsafe { Box::from_raw(tensor.cast::<LegacyExport>()) })
        }));
    }
}

/// A managed tensor handed to devbuf by a producer, versioned or legacy.
#[derive(Debug, Clone, Copy)]
pub enum ManagedTensor {
    Versioned(NonNull<DLManagedTensorVersioned>),
    Legacy(NonNull<DLManagedTensor>),
}

// SAFETY: a managed tensor is an owned C object; DLPack lets its deleter run on any thread.
unsafe impl Send for ManagedTensor {}

impl ManagedTensor {
    /// The version a versioned tensor declares (legacy tensors predate versions: 0.x).
    ///
    /// # Safety
    /// The tensor is alive.
    pub unsafe fn version(self) -> DLPackVersion {
        match self {
            // SAFETY: the caller guarantees the tensor is alive.
            ManagedTensor::Versioned(t) => unsafe { t.as_ref().version },
            ManagedTensor::Legacy(_) => DLPackVersion { major: 0, minor: 8 },
        }
    }

    /// Checks the version (major 1 for versioned tensors) and returns the tensor and its
    /// read-only flag.
    ///
    /// # Safety
    /// The tensor is alive and stays alive while the returned reference is used.
    pub unsafe fn tensor<'a>(self) -> Result<(&'a DLTensor, bool)> {
        match self {
            ManagedTensor::Versioned(t) => {
                // SAFETY: the caller guarantees the tensor is alive.
                let t = unsafe { t.as_ref() };
                if t.version.major != DLPACK_MAJOR_VERSION {
                    return Err(Error::invalid(
                        "version",
                        format!(
                            "DLPack {}.{} is not supported (devbuf reads major version {DLPACK_MAJOR_VERSION})",
                            t.version.major, t.version.minor
                        ),
                    ));
                }
                Ok((&t.dl_tensor, t.flags.contains(DlpackFlags::READ_ONLY)))
            }
            // SAFETY: the caller guarantees the tensor is alive.
            ManagedTensor::Legacy(t) => Ok((unsafe { &t.as_ref().dl_tensor }, false)),
        }
    }

    /// Calls the producer's deleter (if any).
    ///
    /// # Safety
    /// The tensor is alive and owned by the caller, and is not used again.
    pub unsafe fn delete(self) {
        // SAFETY: the caller owns the tensor; each deleter takes its own tensor type.
        unsafe {
            match self {
                ManagedTensor::Versioned(t) => {
                    if let Some(deleter) = t.as_ref().deleter {
                        deleter(t.as_ptr());
                    }
                }
                ManagedTensor::Legacy(t) => {
                    if let Some(deleter) = t.as_ref().deleter {
                        deleter(t.as_ptr());
                    }
                }
            }
        }
    }

    /// An [`Owner`] that calls the deleter exactly once, after the last view of the memory.
    ///
    /// # Safety
    /// The caller owns the tensor and gives that ownership to the returned owner.
    pub unsafe fn into_owner(self) -> Owner {
        // SAFETY: ownership moves into the deleter closure, which Buffer runs once.
        Owner::deleter(move || unsafe { self.delete() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{DType, Layout, MemKind, Queue, host::HostQueue};
    use dlpark::ffi::DLDeviceType;
    use std::sync::Arc;

    #[test]
    fn export_then_import_round_trips_and_deleter_frees_once() {
        let queue: Arc<dyn Queue> = Arc::new(HostQueue::new());
        let buffer = Buffer::alloc(&queue, MemKind::Host, 6 * 4).unwrap();
        buffer
            .copy_from_host(&(0u8..24).collect::<Vec<_>>())
            .unwrap();
        // A reversed 2x3 int32 view: element 0 is the last row.
        let layout = Layout::new(DType::INT32, vec![2, 3], Some(vec![-12, 4]), 12, true).unwrap();
        let array = Array::new(buffer.clone(), layout).unwrap();
        let dims = DlpackDims::new(&array).unwrap();
        let device = DLDevice {
            device_type: DLDeviceType::CPU,
            device_id: 0,
        };
        let tensor = export_versioned(&array, dims, device, DlpackFlags::empty()).unwrap();
        let managed = ManagedTensor::Versioned(tensor);
        // SAFETY: we own the tensor until delete below.
        let (dl, readonly) = unsafe { managed.tensor() }.unwrap();
        assert!(readonly);
        // SAFETY: the exported tensor's shape/strides point to 2 values each.
        let imported = unsafe { crate::interface::import_dltensor(dl, readonly) }.unwrap();
        assert_eq!(imported.base, buffer.ptr() as usize);
        assert_eq!(imported.len, 24);
        assert_eq!(imported.layout, *array.layout());
        drop(array);
        drop(buffer);
        // The export still owns the memory: reading it must see the bytes written above.
        // SAFETY: the export's buffer is alive until the deleter runs.
        let first = unsafe { *(dl.data as *const u8) };
        assert_eq!(first, 12);
        // SAFETY: we own the tensor and never use it again.
        unsafe { managed.delete() };
    }

    #[test]
    fn unsupported_major_version_is_refused() {
        let queue: Arc<dyn Queue> = Arc::new(HostQueue::new());
        let array = Array::bytes(Buffer::alloc(&queue, MemKind::Host, 8).unwrap());
        let dims = DlpackDims::new(&array).unwrap();
        let device = DLDevice {
            device_type: DLDeviceType::CPU,
            device_id: 0,
        };
        let tensor = export_versioned(&array, dims, device, DlpackFlags::empty()).unwrap();
        // SAFETY: we own the tensor.
        unsafe { (*tensor.as_ptr()).version.major = 2 };
        let managed = ManagedTensor::Versioned(tensor);
        // SAFETY: the tensor is alive.
        let err = unsafe { managed.tensor() }.unwrap_err();
        assert!(err.to_string().starts_with("version: DLPack 2."), "{err}");
        // SAFETY: we own it; the deleter is still ours.
        unsafe { managed.delete() };
    }
}
