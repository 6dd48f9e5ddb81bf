//! What the current (or a named) context says about itself, and waiting for it: its device, id,
//! flags and API version, `cuCtxSynchronize`, and the profiler's switches.

use cudarc::driver::sys::{CUcontext, CUdevice, CUresult};

use crate::context::{Context, current};
use crate::device::entry;
use crate::errors::{DriverResult, write_out};

/// # Safety
/// `device` is null or valid for writing a CUdevice.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuCtxGetDevice(device: *mut CUdevice) -> CUresult {
    entry("cuCtxGetDevice", || {
        let context = current()?;
        // SAFETY: the caller's out-pointer.
        unsafe { write_out(device, context.ordinal as CUdevice) }
    })
}

/// The context `handle` names, usable; "If the specified context is NULL, the API will operate
/// on the current context." (cuCtxGetDevice_v2, cuCtxSynchronize_v2; cuCtxGetId alike).
fn given_or_current(handle: CUcontext) -> DriverResult<&'static Context> {
    if handle.is_null() {
        return current();
    }
    let context = Context::from_handle(handle)?;
    context.usable()?;
    Ok(context)
}

/// # Safety
/// `device` is null or valid for writing a CUdevice.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuCtxGetDevice_v2(device: *mut CUdevice, context: CUcontext) -> CUresult {
    entry("cuCtxGetDevice", || {
        let context = given_or_current(context)?;
        // SAFETY: the caller's out-pointer.
        unsafe { write_out(device, context.ordinal as CUdevice) }
    })
}

/// # Safety
/// `id` is null or valid for writing an unsigned long long.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuCtxGetId(context: CUcontext, id: *mut u64) -> CUresult {
    entry("cuCtxGetId", || {
        let context = given_or_current(context)?;
        // SAFETY: the caller's out-pointer.
        unsafe { write_out(id, context.id()) }
    })
}

/// # Safety
/// `flags` is null or valid for writing an unsigned int.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuCtxGetFlags(flags: *mut u32) -> CUresult {
    entry("cuCtxGetFlags", || {
        let value = current()?.flags();
        // SAFETY: the caller's out-pointer.
        unsafe { write_out(flags, value) }
    })
}

/// # Safety
/// `version` is null or valid for writing an unsigned int.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuCtxGetApiVersion(context: CUcontext, version: *mut u32) -> CUresult {
    entry("cuCtxGetApiVersion", || {
        let context = if context.is_null() {
            current()?
        } else {
            Context::from_handle(context)?
        };
        context.usable()?;
        // The API version of contexts made by CUDA 3.2 and later.
        // SAFETY: the caller's out-pointer.
        unsafe { write_out(version, 3020) }
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn cuCtxSynchronize() -> CUresult {
    cuCtxSynchronize_v2(std::ptr::null_mut())
}

#[unsafe(no_mangle)]
pub extern "C" fn cuCtxSynchronize_v2(context: CUcontext) -> CUresult {
    entry("cuCtxSynchronize", || {
        let context = given_or_current(context)?;
        crate::stream::synchronize_context(context);
        crate::pool::release_over_thresholds();
        context.sticky_error()
    })
}

/// "Enables profile collection by the active profiling tool for the current context": no tool is
/// ever attached to the double, so there is nothing to enable, but a context must be current.
#[unsafe(no_mangle)]
pub extern "C" fn cuProfilerStart() -> CUresult {
    entry("cuProfilerStart", || current().map(drop))
}

/// The counterpart of [`cuProfilerStart`].
#[unsafe(no_mangle)]
pub extern "C" fn cuProfilerStop() -> CUresult {
    entry("cuProfilerStop", || current().map(drop))
}
