//! DLPack managed tensors: exporting an [`Array`] (versioned or legacy) and taking ownership of
//! one a producer handed us.
//!
//! An exported tensor owns a clone of the array's [`Buffer`], so the memory outlives the producer's
//! Python object. Its deleter needs no GIL and never unwinds into the C caller.

use std::cell::UnsafeCell;
use std::ffi::c_void;
use std::mem::ManuallyDrop;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use dlpark::DlpackFlags;
use dlpark::ffi::{
    DLDataType, DLDevice, DLDeviceType, DLManagedTensor, DLManagedTensorVersioned,
    DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION, DLPackVersion, DLTensor,
};
use smallvec::SmallVec;

use crate::{Array, Buffer, Error, Owner, Result};

/// The DLPack version devbuf produces.
pub const VERSION: DLPackVersion = DLPackVersion {
    major: DLPACK_MAJOR_VERSION,
    minor: DLPACK_MINOR_VERSION,
};

/// An array described as DLPack describes it, prepared once: element-0 address, device, dtype,
/// shape and element strides (inline up to four dimensions). A DLTensor filled from it points
/// into it: it must not move while the DLTensor is used.
#[derive(Debug, PartialEq, Eq)]
pub struct DlpackTemplate {
    /// Element 0's address; 0 (`NULL`) for an empty array.
    data: usize,
    device: DLDevice,
    dtype: DLDataType,
    /// `shape` followed by `strides`.
    values: SmallVec<[i64; 8]>,
}

impl Clone for DlpackTemplate {
    /// Copies the values as one slice (the derived clone goes element by element), since every
    /// `__dlpack__` call clones a template.
    fn clone(&self) -> Self {
        DlpackTemplate {
            values: SmallVec::from_slice(&self.values),
            ..*self
        }
    }
}

/// Why a pointer cannot be exported on `device`, if it cannot: DLPack defines `data` as a plain
/// address on every device type but OpenCL, whose `data` is a `cl_mem` handle; a USM or SVM
/// pointer labelled kDLOpenCL would be misread by its consumer.
pub fn pointer_refusal(device: DLDevice) -> Option<&'static str> {
    (device.device_type == DLDeviceType::OPENCL).then_some(
        "DLPack's OpenCL tensors hold a cl_mem handle, not the USM/SVM pointer devbuf allocates; \
         host-accessible memory can go to the CPU (dl_device=(1, 0))",
    )
}

impl DlpackTemplate {
    /// The template of `array` on `device`; fails when DLPack cannot describe the array (a
    /// stride that is not a whole number of elements, a non-native byte order).
    pub fn new(array: &Array, device: DLDevice) -> Result<Self> {
        let layout = array.layout();
        let mut values = SmallVec::with_capacity(2 * layout.ndim());
        values.extend(layout.shape().iter().map(|&n| n as i64));
        values.extend(layout.element_strides()?);
        Ok(DlpackTemplate {
            data: if layout.size() == 0 {
                0
            } else {
                array.data_ptr()
            },
            device,
            dtype: layout.dtype().to_dlpack()?,
            values,
        })
    }

    /// The DLPack device.
    pub fn device(&self) -> DLDevice {
        self.device
    }

    /// The same description on another device (host-accessible memory exported to the CPU).
    pub fn on_device(mut self, device: DLDevice) -> Self {
        self.device = device;
        self
    }

    /// Fills `out`, pointing into `self`. `byte_offset` is 0 and `data` is element 0, which is
    /// what consumers that ignore `byte_offset` need.
    pub fn fill(&self, out: &mut DLTensor) {
        let ndim = self.values.len() / 2;
        // DLTensor's pointers are mutable in C, but consumers only read through them.
        let base = self.values.as_ptr().cast_mut();
        *out = DLTensor {
            data: self.data as *mut c_void,
            device: self.device,
            ndim: ndim as i32,
            dtype: self.dtype,
            shape: base,
            // SAFETY: `values` holds 2 * ndim entries; the strides start at ndim.
            strides: unsafe { base.add(ndim) },
            byte_offset: 0,
        };
    }
}

/// The two DLPack managed-tensor ABIs devbuf produces.
pub trait ManagedTensorAbi: Sized {
    /// The capsule name of an unconsumed tensor of this ABI.
    const CAPSULE_NAME: &'static std::ffi::CStr;
    /// The capsule name a consumer gives it once it took ownership.
    const USED_CAPSULE_NAME: &'static std::ffi::CStr;
    /// A tensor with no manager context yet.
    fn new(
        dl_tensor: DLTensor,
        deleter: unsafe extern "C" fn(*mut Self),
        flags: DlpackFlags,
    ) -> Self;
    /// Sets the manager context.
    fn set_manager_ctx(&mut self, ctx: *mut c_void);
    /// The tensor described.
    fn dl_tensor_mut(&mut self) -> &mut DLTensor;
}

impl ManagedTensorAbi for DLManagedTensorVersioned {
    const CAPSULE_NAME: &'static std::ffi::CStr = c"dltensor_versioned";
    const USED_CAPSULE_NAME: &'static std::ffi::CStr = c"used_dltensor_versioned";
    fn new(
        dl_tensor: DLTensor,
        deleter: unsafe extern "C" fn(*mut Self),
        flags: DlpackFlags,
    ) -> Self {
        DLManagedTensorVersioned {
            version: VERSION,
            manager_ctx: std::ptr::null_mut(),
            deleter: Some(deleter),
            flags,
            dl_tensor,
        }
    }
    fn set_manager_ctx(&mut self, ctx: *mut c_void) {
        self.manager_ctx = ctx;
    }
    fn dl_tensor_mut(&mut self) -> &mut DLTensor {
        &mut self.dl_tensor
    }
}

impl ManagedTensorAbi for DLManagedTensor {
    const CAPSULE_NAME: &'static std::ffi::CStr = c"dltensor";
    const USED_CAPSULE_NAME: &'static std::ffi::CStr = c"used_dltensor";
    /// The legacy ABI has no flags: a read-only export is the consumer's to respect unannounced.
    fn new(
        dl_tensor: DLTensor,
        deleter: unsafe extern "C" fn(*mut Self),
        _flags: DlpackFlags,
    ) -> Self {
        DLManagedTensor {
            dl_tensor,
            manager_ctx: std::ptr::null_mut(),
            deleter: Some(deleter),
        }
    }
    fn set_manager_ctx(&mut self, ctx: *mut c_void) {
        self.manager_ctx = ctx;
    }
    fn dl_tensor_mut(&mut self) -> &mut DLTensor {
        &mut self.dl_tensor
    }
}

/// What an export owns; `tensor` comes first so the tensor pointer is the context pointer.
///
/// Two parties may hold it: the consumer (through the deleter) and, for `__dlpack__`, the
/// capsule object, whose destructor always runs. Each holds one of `refs`; the memory is released
/// once (`released`), by whichever of "the deleter ran" or "the capsule died unconsumed" comes
/// first, and the block is freed with the last reference. So a consumer that calls the deleter
/// without renaming the capsule (seen in torch for unsupported devices) cannot cause a double free.
#[repr(C)]
struct Export<T> {
    tensor: T,
    template: DlpackTemplate,
    buffer: UnsafeCell<ManuallyDrop<Buffer>>,
    released: AtomicBool,
    refs: AtomicUsize,
}

#[cfg(test)]
thread_local! {
    /// Export blocks alive on this thread (tests create and free theirs on one thread).
    static LIVE_EXPORTS: std::cell::Cell<isize> = const { std::cell::Cell::new(0) };
}

#[cfg(test)]
impl<T> Drop for Export<T> {
    fn drop(&mut self) {
        LIVE_EXPORTS.with(|live| live.set(live.get() - 1));
    }
}

impl<T> Export<T> {
    /// Drops the exported buffer, once.
    fn release_memory(&self) {
        if !self.released.swap(true, Ordering::AcqRel) {
            // SAFETY: the swap makes this the only access to the buffer, ever.
            unsafe { ManuallyDrop::drop(&mut *self.buffer.get()) }
        }
    }
}

/// Drops one reference to an export, freeing it with the last; `release` also releases the memory.
///
/// # Safety
/// `tensor` is the tensor of a live `Export<T>` and the caller owns one of its references.
unsafe fn drop_reference<T>(tensor: *mut T, release: bool) {
    let export = tensor.cast::<Export<T>>();
    // SAFETY: the caller owns a reference, so the export is alive.
    let last = unsafe {
        if release {
            (*export).release_memory();
        }
        (*export).refs.fetch_sub(1, Ordering::AcqRel) == 1
    };
    if last {
        // SAFETY: that was the last reference; the export was leaked from a Box in `export`.
        drop(unsafe { Box::from_raw(export) });
    }
}

unsafe extern "C" fn delete_export<T>(tensor: *mut T) {
    if !tensor.is_null() {
        // Unwinding must not cross into the C caller.
        let _ = catch_unwind(AssertUnwindSafe(|| {
            // SAFETY: DLPack gives the consumer's reference back through the deleter, once.
            unsafe { drop_reference(tensor, true) }
        }));
    }
}

/// Exports `array`, described by its `template`, as a managed tensor of ABI `T` (versioned or
/// legacy). The result holds one reference for the consumer (released through its deleter) and,
/// when `in_capsule`, one for the capsule that will carry it (released with [`release_capsule`]).
pub fn export<T: ManagedTensorAbi>(
    array: &Array,
    template: DlpackTemplate,
    mut flags: DlpackFlags,
    in_capsule: bool,
) -> NonNull<T> {
    if array.readonly() {
        flags |= DlpackFlags::READ_ONLY;
    }
    let mut export = Box::new(Export {
        tensor: T::new(empty_tensor(template.device), delete_export::<T>, flags),
        template,
        buffer: UnsafeCell::new(ManuallyDrop::new(array.buffer().clone())),
        released: AtomicBool::new(false),
        refs: AtomicUsize::new(if in_capsule { 2 } else { 1 }),
    });
    #[cfg(test)]
    LIVE_EXPORTS.with(|live| live.set(live.get() + 1));
    // The tensor points into the boxed template, which stays put until the export is freed.
    let Export {
        tensor, template, ..
    } = &mut *export;
    template.fill(tensor.dl_tensor_mut());
    let raw = Box::into_raw(export);
    // SAFETY: `raw` is a live box; nobody else has seen it yet.
    unsafe { (*raw).tensor.set_manager_ctx(raw.cast()) };
    // SAFETY: Box::into_raw never returns null.
    unsafe { NonNull::new_unchecked(raw.cast()) }
}

/// The capsule's side of an export from [`export`] with `in_capsule`: call it from the capsule
/// destructor. `consumed` is whether a consumer renamed the capsule (and so owns the tensor).
/// An unconsumed capsule had no consumer: it releases the memory and the consumer's reference
/// too, unless a consumer already called the deleter without renaming the capsule.
///
/// # Safety
/// `tensor` came from [`export::<T>`] with `in_capsule`, and this is called once, by its capsule.
pub unsafe fn release_capsule<T: ManagedTensorAbi>(tensor: NonNull<T>, consumed: bool) {
    let _ = catch_unwind(AssertUnwindSafe(|| {
        let export = tensor.as_ptr().cast::<Export<T>>();
        // SAFETY: the capsule still holds its reference, so the export is alive.
        let orphaned = !consumed && !unsafe { &*export }.released.load(Ordering::Acquire);
        if orphaned {
            // No consumer ever received the tensor: the capsule holds the only two references,
            // so the block and its buffer are ours alone to free, without the atomic swap that
            // guards the release against a concurrent deleter (an export per `__dlpack__` call).
            // SAFETY: the export was leaked from a Box in `export` and nobody else can reach it;
            // its buffer was not released (`released` is false), so it is dropped here once.
            let mut export = unsafe { Box::from_raw(export) };
            // SAFETY: as above.
            unsafe { ManuallyDrop::drop(export.buffer.get_mut()) };
        } else {
            // SAFETY: the capsule's reference, given back here once.
            unsafe { drop_reference(tensor.as_ptr(), !consumed) };
        }
    }));
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

/// A managed tensor handed to devbuf by a producer, versioned or legacy.
#[derive(Debug, Clone, Copy)]
pub enum ManagedTensor {
    /// A `DLManagedTensorVersioned` (capsule "dltensor_versioned", DLPack 1.0 and later).
    Versioned(NonNull<DLManagedTensorVersioned>),
    /// A `DLManagedTensor` (capsule "dltensor", before DLPack 1.0).
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
mod tests;
