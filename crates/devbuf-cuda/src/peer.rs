//! Copies between the memory of two CUDA devices that are peers (`cuDeviceCanAccessPeer`), for
//! what a plain `cuMemcpyAsync` cannot reach: another device's stream-ordered (pool) memory.
//! "Memory pool allocation accessibility does not follow cudaDeviceEnablePeerAccess or
//! cuCtxEnablePeerAccess. Instead, the API cudaMemPoolSetAccess modifies what devices can access
//! allocations from a pool" (CUDA Programming Guide, "Stream-Ordered Memory Allocator", multi-GPU
//! access), and the same chapter names `cudaMemcpyPeerAsync` for copying pool memory between
//! devices without that access (the driver stages it). So devbuf copies with
//! `cuMemcpyPeerAsync` on the copying queue's stream and never changes a pool's access: the pool
//! may be another library's, and access once granted holds for every allocation of it. Devices
//! that are not peers keep the host staging of `Buffer::copy_from`.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use cudarc::driver::sys::{self, CUcontext, CUdevice, CUstream};
use devbuf_core::MemKind;
use parking_lot::Mutex;

use crate::context::{PrimaryContext, on_stream, without_context};
use crate::loader::{DriverError, call};
use crate::memory;

/// Whether device `device` can reach `peer`'s memory directly (`cuDeviceCanAccessPeer`), asked
/// once per pair; false where the driver cannot say.
pub(crate) fn can_access(device: u32, peer: u32) -> bool {
    static ANSWERS: OnceLock<Mutex<HashMap<(u32, u32), bool>>> = OnceLock::new();
    let answers = ANSWERS.get_or_init(Default::default);
    if let Some(&answer) = answers.lock().get(&(device, peer)) {
        return answer;
    }
    let ask = || -> Result<bool, DriverError> {
        let (mut from, mut to): (CUdevice, CUdevice) = (0, 0);
        let mut answer = 0;
        // SAFETY: valid out-pointers; bad ordinals are error codes.
        unsafe {
            call("cuDeviceGet", || sys::cuDeviceGet(&mut from, device as i32))?;
            call("cuDeviceGet", || sys::cuDeviceGet(&mut to, peer as i32))?;
            call("cuDeviceCanAccessPeer", || {
                sys::cuDeviceCanAccessPeer(&mut answer, from, to)
            })?;
        }
        Ok(answer == 1)
    };
    let answer = device != peer && ask().unwrap_or(false);
    answers.lock().insert((device, peer), answer);
    answer
}

/// The device `ptr` is device memory of, when that is another device than `ordinal`.
pub(crate) fn other_device(ptr: usize, ordinal: u32) -> Result<Option<u32>, DriverError> {
    Ok(match memory::pointer_info(ptr)? {
        Some((device, MemKind::Device)) if device != ordinal => Some(device),
        _ => None,
    })
}

/// Device `ordinal`'s primary context, retained once for the process: the context argument of
/// `cuMemcpyPeerAsync` for memory of that device.
fn primary(ordinal: u32) -> Result<Arc<PrimaryContext>, DriverError> {
    static CONTEXTS: OnceLock<Mutex<HashMap<u32, Arc<PrimaryContext>>>> = OnceLock::new();
    let mut contexts = CONTEXTS.get_or_init(Default::default).lock();
    if let Some(context) = contexts.get(&ordinal) {
        return Ok(Arc::clone(context));
    }
    let context = Arc::new(PrimaryContext::retain(ordinal)?);
    contexts.insert(ordinal, Arc::clone(&context));
    Ok(context)
}

/// Enqueues a copy of `len` bytes from `src` to `dst` on `stream` (of device `ordinal`'s
/// `context`) with `cuMemcpyPeerAsync` when either side is device memory of another device;
/// `Ok(false)`, enqueuing nothing, when neither is.
///
/// # Safety
/// Both ranges are valid for `len` bytes until the copy completes, and `stream` is alive.
pub(crate) unsafe fn copy(
    context: CUcontext,
    stream: CUstream,
    ordinal: u32,
    dst: usize,
    src: usize,
    len: usize,
) -> Result<bool, DriverError> {
    let (to, from) = without_context(context, || {
        Ok((other_device(dst, ordinal)?, other_device(src, ordinal)?))
    })?;
    if to.is_none() && from.is_none() {
        return Ok(false);
    }
    let (to, from) = (
        primary(to.unwrap_or(ordinal))?,
        primary(from.unwrap_or(ordinal))?,
    );
    on_stream(context, stream, || {
        // SAFETY: the caller's promise for the ranges and the stream; both contexts are retained.
        call("cuMemcpyPeerAsync", || unsafe {
            sys::cuMemcpyPeerAsync(dst as u64, to.raw(), src as u64, from.raw(), len, stream)
        })
    })?;
    Ok(true)
}
