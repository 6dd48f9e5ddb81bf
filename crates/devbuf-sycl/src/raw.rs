//! Owned handles to SYCL objects (devices, contexts, queues, events, kernels), each freed through the C
//! API on drop, and the context queries devbuf needs (the device queries are in
//! [`crate::device`]).
//!
//! dpctl's C API catches most C++ exceptions, but not all (see the crate docs): the few calls here
//! that do not catch them are only made after checking that they cannot throw.

use std::ffi::{CStr, c_void};
use std::ptr::NonNull;

use devbuf_core::{Error, ExportedHandle, Result};
use devbuf_sycl_sys as sys;

use crate::loader::Runtime;
use crate::loader::SYCL;

macro_rules! owned_handle {
    ($(#[$doc:meta])* $name:ident, $ptr:ty, $delete:ident) => {
        $(#[$doc])*
        pub(crate) struct $name {
            pub(crate) rt: &'static Runtime,
            ptr: $ptr,
        }

        impl $name {
            /// Takes ownership of `ptr`, which the C API gave (`__dpctl_give`); `None` when null.
            ///
            /// # Safety
            /// `ptr` is null or a live handle of this type from `rt`, owned by nobody else.
            pub(crate) unsafe fn from_raw(rt: &'static Runtime, ptr: $ptr) -> Option<Self> {
                (!ptr.is_null()).then_some($name { rt, ptr })
            }

            /// The handle, still owned by `self`.
            pub(crate) fn as_ptr(&self) -> $ptr {
                self.ptr
            }
        }

        impl std::fmt::Debug for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, "{}({:p})", stringify!($name), self.ptr)
            }
        }

        impl Drop for $name {
            fn drop(&mut self) {
                // SAFETY: the handle is owned (from_raw) and released once, here.
                unsafe { self.rt.api().$delete(self.ptr) }
            }
        }

        // SAFETY: SYCL's runtime classes are thread-safe reference-counted objects.
        unsafe impl Send for $name {}
        // SAFETY: as above; the C API takes them as `__dpctl_keep` from any thread.
        unsafe impl Sync for $name {}
    };
}

owned_handle!(
    /// A `sycl::device`.
    Device, sys::DPCTLSyclDeviceRef, DPCTLDevice_Delete
);
owned_handle!(
    /// A `sycl::context`.
    Context, sys::DPCTLSyclContextRef, DPCTLContext_Delete
);
owned_handle!(
    /// A `sycl::queue`.
    RawQueue, sys::DPCTLSyclQueueRef, DPCTLQueue_Delete
);
owned_handle!(
    /// A `sycl::event`.
    RawEvent, sys::DPCTLSyclEventRef, DPCTLEvent_Delete
);
owned_handle!(
    /// A `sycl::kernel_bundle` in the executable state.
    KernelBundle, sys::DPCTLSyclKernelBundleRef, DPCTLKernelBundle_Delete
);
owned_handle!(
    /// A `sycl::kernel`.
    Kernel, sys::DPCTLSyclKernelRef, DPCTLKernel_Delete
);

impl Context {
    /// A second owned handle to a context someone else owns.
    ///
    /// # Safety
    /// `ptr` is a live `DPCTLSyclContextRef` from the library `rt` loaded.
    pub(crate) unsafe fn copy_from(
        rt: &'static Runtime,
        ptr: sys::DPCTLSyclContextRef,
    ) -> Result<Context> {
        // SAFETY: the caller guarantees `ptr`; Copy returns a new handle we own, or null.
        unsafe { Context::from_raw(rt, rt.api().DPCTLContext_Copy(ptr)) }
            .ok_or_else(|| Error::runtime(SYCL, "DPCTLContext_Copy", "returned null"))
    }

    /// The default context dpctl uses for a root device (the platform's default context), in which
    /// dpctl's own queues allocate and which DLPack consumers require.
    pub(crate) fn default_for(device: &Device) -> Result<Context> {
        // SAFETY: `device` is live; the call returns a new handle we own, or null for a device
        // dpctl has no default context for (a sub-device).
        unsafe {
            Context::from_raw(
                device.rt,
                device.rt.api().DPCTLDeviceMgr_GetCachedContext(device.ptr),
            )
        }
        .ok_or_else(|| {
            Error::runtime(
                SYCL,
                "DPCTLDeviceMgr_GetCachedContext",
                "the device has no default context (is it a sub-device?)",
            )
        })
    }

    pub(crate) fn devices(&self) -> Vec<Device> {
        // SAFETY: `self` is live; we own the vector the call returns.
        unsafe { take_devices(self.rt, self.rt.api().DPCTLContext_GetDevices(self.ptr)) }
    }

    /// Whether the runtime can classify pointers in this context. Asking a context whose devices
    /// have no USM makes the SYCL runtime throw through the C API (an abort), so this is checked
    /// before every `DPCTLUSM_GetPointerType`.
    pub(crate) fn knows_usm(&self) -> bool {
        self.devices()
            .iter()
            .any(|device| !device.usm_kinds().is_empty())
    }

    pub(crate) fn same_as(&self, other: &Context) -> bool {
        // SAFETY: both are live; the call compares them.
        unsafe { self.rt.api().DPCTLContext_AreEq(self.ptr, other.ptr) }
    }
}

/// Takes the elements out of a device vector the C API gave, and frees the vector.
///
/// # Safety
/// `vector` is null or a device vector from `rt` that the caller owns.
pub(crate) unsafe fn take_devices(
    rt: &'static Runtime,
    vector: sys::DPCTLDeviceVectorRef,
) -> Vec<Device> {
    if vector.is_null() {
        return Vec::new();
    }
    let api = rt.api();
    // SAFETY: `vector` is a live device vector.
    let len = unsafe { api.DPCTLDeviceVector_Size(vector) };
    let devices = (0..len)
        // SAFETY: in range; GetAt returns a new copy of the element, which we own.
        .filter_map(|i| unsafe { Device::from_raw(rt, api.DPCTLDeviceVector_GetAt(vector, i)) })
        .collect();
    // SAFETY: owned by the caller, released once; our copies stay valid.
    unsafe { api.DPCTLDeviceVector_Delete(vector) };
    devices
}

/// A handle we own (a fresh copy, or null when the copy failed) given away as `name`, released
/// with the C API's `delete` for its type.
pub(crate) fn owned_handle<T>(
    name: &'static CStr,
    handle: *mut T,
    delete: unsafe extern "C" fn(*mut T),
) -> Option<ExportedHandle> {
    Some(ExportedHandle {
        name,
        ptr: NonNull::new(handle)?.cast(),
        // SAFETY: same ABI (one pointer argument, no result); the library is never unloaded.
        destroy: unsafe {
            std::mem::transmute::<unsafe extern "C" fn(*mut T), unsafe extern "C" fn(*mut c_void)>(
                delete,
            )
        },
    })
}
