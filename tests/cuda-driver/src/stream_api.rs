//! The entry points that ask about or wait for one stream, each also as its `_ptsz` variant, in
//! which stream 0 is the calling thread's per-thread default stream (see [`NullStream`]).

use std::ffi::c_void;

use cudarc::driver::sys::{CUcontext, CUdevice, CUresult, CUstream};

use crate::context;
use crate::device::entry;
use crate::errors::{DriverResult, write_out};
use crate::stream::{GREATEST_PRIORITY, LEAST_PRIORITY, NullStream, resolve_as};

/// `CU_STREAM_CAPTURE_STATUS_NONE`: the double has no stream capture.
const CAPTURE_STATUS_NONE: u32 = 0;

/// Declares an entry point whose first argument is a stream, and its `_ptsz` variant; `$body`
/// gets the stream's handle, what 0 means, and the other arguments.
macro_rules! per_stream {
    ($($name:ident / $ptsz:ident ($($arg:ident: $ty:ty),*) => $body:ident;)*) => {$(
        /// # Safety
        /// Each pointer argument is null or valid for writing its type.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(stream: CUstream, $($arg: $ty),*) -> CUresult {
            entry(stringify!($name), || {
                // SAFETY: the caller's contract.
                unsafe { $body(stream, NullStream::Legacy, $($arg),*) }
            })
        }

        /// # Safety
        /// Each pointer argument is null or valid for writing its type.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $ptsz(stream: CUstream, $($arg: $ty),*) -> CUresult {
            entry(stringify!($name), || {
                // SAFETY: the caller's contract.
                unsafe { $body(stream, NullStream::PerThread, $($arg),*) }
            })
        }
    )*};
}

per_stream! {
    cuStreamSynchronize / cuStreamSynchronize_ptsz () => synchronize;
    cuStreamQuery / cuStreamQuery_ptsz () => query;
    cuStreamGetCtx / cuStreamGetCtx_ptsz (context: *mut CUcontext) => get_context;
    cuStreamGetCtx_v2 / cuStreamGetCtx_v2_ptsz (context: *mut CUcontext, green: *mut *mut c_void) => get_contexts;
    cuStreamGetDevice / cuStreamGetDevice_ptsz (device: *mut CUdevice) => get_device;
    cuStreamGetFlags / cuStreamGetFlags_ptsz (flags: *mut u32) => get_flags;
    cuStreamGetPriority / cuStreamGetPriority_ptsz (priority: *mut i32) => get_priority;
    cuStreamGetId / cuStreamGetId_ptsz (id: *mut u64) => get_id;
    cuStreamIsCapturing / cuStreamIsCapturing_ptsz (status: *mut u32) => is_capturing;
}

unsafe fn synchronize(stream: CUstream, null: NullStream) -> DriverResult {
    let stream = resolve_as(stream, null)?;
    stream.drain();
    crate::pool::release_over_thresholds();
    stream.context.sticky_error()
}

unsafe fn query(stream: CUstream, null: NullStream) -> DriverResult {
    let stream = resolve_as(stream, null)?;
    if stream.completed() < stream.enqueued() {
        return Err(CUresult::CUDA_ERROR_NOT_READY);
    }
    stream.context.sticky_error()
}

unsafe fn get_context(stream: CUstream, null: NullStream, context: *mut CUcontext) -> DriverResult {
    let stream = resolve_as(stream, null)?;
    // SAFETY: the caller's out-pointer.
    unsafe { write_out(context, stream.context.handle()) }
}

/// The stream's context, and no green context (the double has none): "If the stream is associated
/// with a regular context, the API returns the regular context in pCtx and NULL in pGreenCtx."
unsafe fn get_contexts(
    stream: CUstream,
    null: NullStream,
    context: *mut CUcontext,
    green: *mut *mut c_void,
) -> DriverResult {
    let stream = resolve_as(stream, null)?;
    // SAFETY: the caller's out-pointers.
    unsafe {
        write_out(context, stream.context.handle())?;
        write_out(green, std::ptr::null_mut())
    }
}

unsafe fn get_device(stream: CUstream, null: NullStream, device: *mut CUdevice) -> DriverResult {
    let stream = resolve_as(stream, null)?;
    // SAFETY: the caller's out-pointer.
    unsafe { write_out(device, stream.context.ordinal as CUdevice) }
}

unsafe fn get_flags(stream: CUstream, null: NullStream, flags: *mut u32) -> DriverResult {
    let stream = resolve_as(stream, null)?;
    // SAFETY: the caller's out-pointer.
    unsafe { write_out(flags, stream.flags) }
}

unsafe fn get_priority(stream: CUstream, null: NullStream, priority: *mut i32) -> DriverResult {
    let stream = resolve_as(stream, null)?;
    // SAFETY: the caller's out-pointer.
    unsafe { write_out(priority, stream.priority) }
}

unsafe fn get_id(stream: CUstream, null: NullStream, id: *mut u64) -> DriverResult {
    let stream = resolve_as(stream, null)?;
    // SAFETY: the caller's out-pointer.
    unsafe { write_out(id, stream.id) }
}

unsafe fn is_capturing(stream: CUstream, null: NullStream, status: *mut u32) -> DriverResult {
    resolve_as(stream, null)?;
    // SAFETY: the caller's out-pointer.
    unsafe { write_out(status, CAPTURE_STATUS_NONE) }
}

/// "A NULL may be passed in for *leastPriority or *greatestPriority if the value is not desired."
///
/// # Safety
/// `least` and `greatest` are each null or valid for writing an int.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuCtxGetStreamPriorityRange(
    least: *mut i32,
    greatest: *mut i32,
) -> CUresult {
    entry("cuCtxGetStreamPriorityRange", || {
        context::current()?;
        // SAFETY: the caller's out-pointers, each written only when non-null.
        unsafe {
            if !least.is_null() {
                write_out(least, LEAST_PRIORITY)?;
            }
            if !greatest.is_null() {
                write_out(greatest, GREATEST_PRIORITY)?;
            }
        }
        Ok(())
    })
}
