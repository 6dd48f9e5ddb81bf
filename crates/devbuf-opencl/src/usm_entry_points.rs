//! The `cl_intel_unified_shared_memory` entry points, fetched from the platform.
//!
//! opencl3 0.12.4 / cl3 0.13.2 wrap these, but their wrappers look the functions up in the ICD
//! loader, which does not export extension functions (every call fails with
//! DLOPEN_FUNCTION_NOT_AVAILABLE), and the allocation wrappers drop the returned pointer. The
//! extension's own way is `clGetExtensionFunctionAddressForPlatform`, which is what this does.

use std::ffi::{CStr, c_void};

use opencl3::types::{cl_bool, cl_command_queue, cl_context, cl_device_id, cl_event, cl_int};
use opencl3::types::{cl_platform_id, cl_uint, cl_ulong};

use devbuf_core::MemKind;
use opencl3::context::Context;

/// `cl_mem_info_intel`: the type of a USM allocation.
pub const CL_MEM_ALLOC_TYPE_INTEL: cl_uint = 0x419A;
/// `cl_mem_info_intel`: the first byte of the USM allocation holding a pointer, and its size.
pub const CL_MEM_ALLOC_BASE_PTR_INTEL: cl_uint = 0x419B;
pub const CL_MEM_ALLOC_SIZE_INTEL: cl_uint = 0x419C;
/// Values of [`CL_MEM_ALLOC_TYPE_INTEL`].
pub const CL_MEM_TYPE_HOST_INTEL: cl_uint = 0x4197;
pub const CL_MEM_TYPE_DEVICE_INTEL: cl_uint = 0x4198;
pub const CL_MEM_TYPE_SHARED_INTEL: cl_uint = 0x4199;
/// `cl_device_info`: the device's USM capabilities, one query per kind (0: not supported).
pub const CL_DEVICE_HOST_MEM_CAPABILITIES_INTEL: cl_uint = 0x4190;
pub const CL_DEVICE_DEVICE_MEM_CAPABILITIES_INTEL: cl_uint = 0x4191;
pub const CL_DEVICE_SINGLE_DEVICE_SHARED_MEM_CAPABILITIES_INTEL: cl_uint = 0x4192;

type HostAlloc =
    unsafe extern "C" fn(cl_context, *const cl_ulong, usize, cl_uint, *mut cl_int) -> *mut c_void;
type DeviceAlloc = unsafe extern "C" fn(
    cl_context,
    cl_device_id,
    *const cl_ulong,
    usize,
    cl_uint,
    *mut cl_int,
) -> *mut c_void;
/// `clMemFreeINTEL` and `clMemBlockingFreeINTEL`.
type Free = unsafe extern "C" fn(cl_context, *mut c_void) -> cl_int;
type GetAllocInfo = unsafe extern "C" fn(
    cl_context,
    *const c_void,
    cl_uint,
    usize,
    *mut c_void,
    *mut usize,
) -> cl_int;
type EnqueueFill = unsafe extern "C" fn(
    cl_command_queue,
    *mut c_void,
    *const c_void,
    usize,
    usize,
    cl_uint,
    *const cl_event,
    *mut cl_event,
) -> cl_int;
type EnqueueCopy = unsafe extern "C" fn(
    cl_command_queue,
    cl_bool,
    *mut c_void,
    *const c_void,
    usize,
    cl_uint,
    *const cl_event,
    *mut cl_event,
) -> cl_int;

/// How a platform's USM memory is freed once the queue may still be using it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UsmFree {
    /// `clMemBlockingFreeINTEL`, which waits for the commands that may use the memory.
    Blocking,
    /// `clMemFreeINTEL` once core has waited for the work on the memory (the queue frees at
    /// once: `Queue::frees_in_order` is false): for PoCL, whose blocking free crashes when other
    /// threads enqueue on the context meanwhile (SIGSEGV in its wait on a queue's last event, seen
    /// with PoCL 5.0 and 6.0). Nothing but the queue works on its memory (no handle of it is handed
    /// out), so that wait covers every command that may use the memory.
    AfterCoreWait,
}

impl UsmFree {
    /// The way for a platform, by its `CL_PLATFORM_VERSION` ("OpenCL 3.0 PoCL 6.0+debian ...").
    pub fn for_platform(version: &str) -> UsmFree {
        if version.split_whitespace().any(|word| word == "PoCL") {
            UsmFree::AfterCoreWait
        } else {
            UsmFree::Blocking
        }
    }
}

/// One platform's USM functions.
#[derive(Debug, Clone, Copy)]
pub struct UsmApi {
    pub host_alloc: HostAlloc,
    pub device_alloc: DeviceAlloc,
    pub shared_alloc: DeviceAlloc,
    pub free: Free,
    pub blocking_free: Free,
    pub get_alloc_info: GetAllocInfo,
    pub enqueue_fill: EnqueueFill,
    pub enqueue_copy: EnqueueCopy,
}

impl UsmApi {
    /// The functions of `platform`, or the name of the first one the platform does not give.
    pub fn load(platform: cl_platform_id) -> Result<UsmApi, String> {
        let runtime = cl3::load_library()
            .as_ref()
            .map_err(|err| format!("libOpenCL could not be loaded: {err}"))?;
        let fetch = |name: &CStr| -> Result<*mut c_void, String> {
            runtime
                .clGetExtensionFunctionAddressForPlatform(platform, name.as_ptr())
                .filter(|address| !address.is_null())
                .ok_or_else(|| {
                    format!(
                        "clGetExtensionFunctionAddressForPlatform gave no {}",
                        name.to_string_lossy()
                    )
                })
        };
        // SAFETY: each address is the platform's entry point of that name, whose C signature
        // (from the extension's specification, cl_ext.h) is the one it is cast to.
        unsafe {
            Ok(UsmApi {
                host_alloc: std::mem::transmute::<*mut c_void, HostAlloc>(fetch(
                    c"clHostMemAllocINTEL",
                )?),
                device_alloc: std::mem::transmute::<*mut c_void, DeviceAlloc>(fetch(
                    c"clDeviceMemAllocINTEL",
                )?),
                shared_alloc: std::mem::transmute::<*mut c_void, DeviceAlloc>(fetch(
                    c"clSharedMemAllocINTEL",
                )?),
                free: std::mem::transmute::<*mut c_void, Free>(fetch(c"clMemFreeINTEL")?),
                blocking_free: std::mem::transmute::<*mut c_void, Free>(fetch(
                    c"clMemBlockingFreeINTEL",
                )?),
                get_alloc_info: std::mem::transmute::<*mut c_void, GetAllocInfo>(fetch(
                    c"clGetMemAllocInfoINTEL",
                )?),
                enqueue_fill: std::mem::transmute::<*mut c_void, EnqueueFill>(fetch(
                    c"clEnqueueMemFillINTEL",
                )?),
                enqueue_copy: std::mem::transmute::<*mut c_void, EnqueueCopy>(fetch(
                    c"clEnqueueMemcpyINTEL",
                )?),
            })
        }
    }
}

impl UsmApi {
    /// One `clGetMemAllocInfoINTEL` answer about `ptr` in `context`, as a `T` (the query's
    /// result type); `None` when the runtime refuses the query.
    pub(crate) fn alloc_info<T: Copy + Default>(
        &self,
        context: &Context,
        ptr: *const u8,
        query: cl_uint,
    ) -> Option<T> {
        let mut value = T::default();
        // SAFETY: the context is live and `value` is a `T`, the type of the query's result, of
        // the size passed; the pointer is only looked up, never dereferenced.
        let code = unsafe {
            (self.get_alloc_info)(
                context.get(),
                ptr.cast(),
                query,
                size_of::<T>(),
                (&raw mut value).cast(),
                std::ptr::null_mut(),
            )
        };
        (code == 0).then_some(value)
    }

    /// The USM kind of `ptr` in `context`; Unknown for memory it does not know.
    pub(crate) fn kind_of(&self, context: &Context, ptr: *const u8) -> MemKind {
        match self.alloc_info::<cl_uint>(context, ptr, CL_MEM_ALLOC_TYPE_INTEL) {
            Some(CL_MEM_TYPE_HOST_INTEL) => MemKind::Host,
            Some(CL_MEM_TYPE_DEVICE_INTEL) => MemKind::Device,
            Some(CL_MEM_TYPE_SHARED_INTEL) => MemKind::Shared,
            _ => MemKind::Unknown,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::UsmFree;

    #[test]
    fn pocl_frees_after_the_queue_wait_and_other_platforms_block() {
        for pocl in [
            "OpenCL 3.0 PoCL 5.0+debian  Linux, None+Asserts, RELOC, SPIR-V, LLVM 16.0.6, SLEEF",
            "OpenCL 3.0 PoCL 6.0+debian  Linux, None+Asserts, RELOC, SPIR-V, LLVM 18.1.8, SLEEF",
        ] {
            assert_eq!(
                UsmFree::for_platform(pocl),
                UsmFree::AfterCoreWait,
                "{pocl}"
            );
        }
        for other in ["OpenCL 3.0 LINUX", "OpenCL 3.0 ", "", "OpenCL 3.0 PoCLX"] {
            assert_eq!(UsmFree::for_platform(other), UsmFree::Blocking, "{other}");
        }
    }
}
