//! DLPack managed tensors: exporting an [`Array`] (versioned or legacy) and taking ownership of
//! one a producer handed us.
//!
//! An exported tensor owns a clone of the array's [`Buffer`], so the memory outlives the producer's
//! Python object. Its deleter needs no GIL and never unwinds into the C caller.

// Caller numbers become addresses here: every size, count, offset and alignment is checked
// (docs/architecture.md, "Untrusted numbers").
#![deny(clippy::arithmetic_side_effects)]

use std::alloc::Layout;
use std::cell::UnsafeCell;
use std::ffi::c_void;
use std::mem::ManuallyDrop;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU8, Ordering};

use dlpark::DlpackFlags;
use dlpark::ffi::{
    DLDataType, DLDevice, DLDeviceType, DLManagedTensor, DLManagedTensorVersioned,
    DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION, DLPackVersion, DLTensor,
};
use smallvec::SmallVec;

use crate::spare::{self, Spare};
use crate::{Array, Buffer, Error, Owner, Result};

pub mod export_plan;

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
        let mut values = SmallVec::with_capacity(layout.ndim().saturating_mul(2));
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
/// capsule object, whose destructor always runs. The consumer's deleter releases the memory; a
/// capsule that dies unconsumed releases it only if no consumer did (so a consumer that calls the
/// deleter without renaming the capsule, seen in torch for unsupported devices, cannot cause a
/// double free). Each party records in `left` that it is done; the last one frees the block.
#[repr(C)]
struct Export<T> {
    tensor: T,
    template: DlpackTemplate,
    buffer: UnsafeCell<ManuallyDrop<Buffer>>,
    /// The parties done with the block ([`CONSUMER`], [`CAPSULE`]).
    left: AtomicU8,
}

thread_local! {
    /// The memory of the export block last freed on this thread, for the next export made here,
    /// so that an export does not pay glibc's `malloc` and `free` (~130 instructions, where
    /// NumPy's `__dlpack__` pays `PyMem_Malloc`'s ~50, which needs the GIL a deleter may not
    /// hold).
    static SPARE_EXPORT: Spare = const { Spare::new(EXPORT_LAYOUT) };
}

/// The layout of every export block, of either ABI (checked below), so that any spare serves
/// any export without a check at run time.
const EXPORT_LAYOUT: Layout = Layout::new::<[u128; 16]>();

/// Whether an `Export<T>` fits [`EXPORT_LAYOUT`].
const fn fits_export_layout<T>() -> bool {
    size_of::<Export<T>>() <= EXPORT_LAYOUT.size()
        && align_of::<Export<T>>() <= EXPORT_LAYOUT.align()
}

const _: () = assert!(
    fits_export_layout::<DLManagedTensorVersioned>() && fits_export_layout::<DLManagedTensor>()
);

/// Memory for an export block: this thread's spare, or fresh.
fn allocate_export<T>() -> NonNull<Export<T>> {
    spare::allocate(&SPARE_EXPORT, EXPORT_LAYOUT).cast()
}

/// Drops the export block and keeps its memory as this thread's spare, unless the thread keeps
/// one already (or is exiting).
///
/// # Safety
/// `export` came from [`allocate_export`], holds a live `Export<T>`, and nobody uses it again.
unsafe fn free_export<T>(export: *mut Export<T>) {
    // SAFETY: the caller gives up the live block (non-null: it came from `allocate_export`); it
    // is dropped once, here; its memory came from `spare::allocate` with this spare and layout.
    unsafe {
        std::ptr::drop_in_place(export);
        spare::free(
            &SPARE_EXPORT,
            NonNull::new_unchecked(export.cast()),
            EXPORT_LAYOUT,
        );
    }
}

/// The consumer called the deleter: the memory is released and the consumer is done.
const CONSUMER: u8 = 1;
/// The capsule died, or there never was one.
const CAPSULE: u8 = 2;

#[cfg(test)]
thread_local! {
    /// Export blocks alive on this thread (tests create and free theirs on one thread).
    static LIVE_EXPORTS: std::cell::Cell<isize> = const { std::cell::Cell::new(0) };
}

#[cfg(test)]
impl<T> Drop for Export<T> {
    fn drop(&mut self) {
        LIVE_EXPORTS.with(|live| live.set(live.get().saturating_sub(1)));
    }
}

/// Records that `party` is done with the export and frees the block if the other party was
/// already. A load comes first: once the other party has left, nobody else can reach the block
/// and no read-modify-write is needed (the common case: NumPy drops the capsule before the array
/// that consumed it), so each export pays one atomic read-modify-write, not one per party.
///
/// # Safety
/// `export` is a live block from [`export`], the caller is `party`, has not left before, and
/// does not touch the block afterwards.
unsafe fn leave<T>(export: *mut Export<T>, party: u8) {
    let other = (CONSUMER | CAPSULE) & !party;
    // SAFETY: the caller has not left, so the block is alive.
    let left = unsafe { &(*export).left };
    // The other party's bit, seen by either read, means it left before this one did and saw
    // this one's bit clear: it did not free the block, and will not.
    let last = left.load(Ordering::Acquire) & other != 0
        || left.fetch_or(party, Ordering::AcqRel) & other != 0;
    if last {
        // SAFETY: both parties are done; the block came from `allocate_export` in `export`.
        unsafe { free_export(export) };
    }
}

unsafe extern "C" fn delete_export<T>(tensor: *mut T) {
    if !tensor.is_null() {
        // Unwinding must not cross into the C caller.
        let _ = catch_unwind(AssertUnwindSafe(|| {
            let export = tensor.cast::<Export<T>>();
            // SAFETY: DLPack gives the consumer's tensor back through the deleter, once; the
            // consumer releases the memory (a capsule that dies unconsumed after this sees
            // CONSUMER and does not), then leaves.
            unsafe {
                ManuallyDrop::drop(&mut *(*export).buffer.get());
                leave(export, CONSUMER);
            }
        }));
    }
}

/// Exports `array`, described by its `template`, as a managed tensor of ABI `T` (versioned or
/// legacy). The result is the consumer's, released through its deleter, and, when `in_capsule`,
/// also the capsule's that will carry it (released with [`release_capsule`]).
pub fn export<T: ManagedTensorAbi>(
    array: &Array,
    template: DlpackTemplate,
    mut flags: DlpackFlags,
    in_capsule: bool,
) -> NonNull<T> {
    if array.readonly() {
        flags |= DlpackFlags::READ_ONLY;
    }
    let raw = allocate_export::<T>();
    // SAFETY: the memory fits an `Export<T>` (checked at `EXPORT_LAYOUT`) and holds nothing.
    unsafe {
        raw.as_ptr().write(Export {
            tensor: T::new(empty_tensor(template.device), delete_export::<T>, flags),
            template,
            buffer: UnsafeCell::new(ManuallyDrop::new(array.buffer().clone())),
            left: AtomicU8::new(if in_capsule { 0 } else { CAPSULE }),
        })
    };
    #[cfg(test)]
    LIVE_EXPORTS.with(|live| live.set(live.get().saturating_add(1)));
    // SAFETY: the block was just written; nobody else has seen it yet.
    let export = unsafe { &mut *raw.as_ptr() };
    // The tensor points into the block's template, which stays put until the export is freed.
    let Export {
        tensor, template, ..
    } = export;
    template.fill(tensor.dl_tensor_mut());
    tensor.set_manager_ctx(raw.as_ptr().cast());
    raw.cast()
}

/// The capsule's side of an export from [`export`] with `in_capsule`: call it from the capsule
/// destructor. `consumed` is whether a consumer renamed the capsule (and so owns the tensor).
/// An unconsumed capsule had no consumer: it releases the memory and frees the export, unless a
/// consumer already called the deleter without renaming the capsule.
///
/// # Safety
/// `tensor` came from [`export::<T>`] with `in_capsule`, and this is called once, by its capsule.
pub unsafe fn release_capsule<T: ManagedTensorAbi>(tensor: NonNull<T>, consumed: bool) {
    let _ = catch_unwind(AssertUnwindSafe(|| {
        let export = tensor.as_ptr().cast::<Export<T>>();
        if consumed {
            // SAFETY: the capsule has not left (this is called once); the consumer owns the
            // memory's release.
            unsafe { leave(export, CAPSULE) };
            return;
        }
        // Unconsumed: no consumer received the tensor, or one called the deleter without
        // renaming the capsule (then it has left, and the memory is released); either way
        // nobody else can reach the block any more, which is the capsule's alone to free.
        // SAFETY: the capsule has not left, so the block is alive.
        let block = unsafe { &mut *export };
        // Acquire: a consumer that left released the memory on its own thread.
        if block.left.load(Ordering::Acquire) & CONSUMER == 0 {
            // SAFETY: no consumer released the buffer, and none will: it is dropped here once.
            unsafe { ManuallyDrop::drop(block.buffer.get_mut()) };
        }
        // SAFETY: the block came from `allocate_export` in `export`; nobody reaches it now.
        unsafe { free_export(export) };
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
