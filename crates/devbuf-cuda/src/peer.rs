//! Copies between the memory of two CUDA devices that are peers (`cuDeviceCanAccessPeer`):
//! `cuMemcpyPeerAsync` on the copying queue's stream, device to device, without a detour through
//! host memory. Stream-ordered (pool) memory of the other device is made accessible to the
//! copying device first, as the CUDA Programming Guide describes ("Stream Ordered Memory
//! Allocator", "Device Accessibility for Multi-GPU Support": pool allocations do not follow
//! `cuCtxEnablePeerAccess`; `cuMemPoolSetAccess` decides which devices reach them). That changes
//! the pool's access for every allocation of it, another library's pool included: once granted,
//! the copying device may reach all of that pool's memory, which is what peer copies need.
//! Devices that are not peers keep the host staging of `Buffer::copy_from`.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use cudarc::driver::sys::{
    self, CUdevice, CUmemAccess_flags, CUmemAccessDesc, CUmemLocation, CUmemLocationType,
    CUmemoryPool, CUpointer_attribute, CUstream,
};
use devbuf_core::MemKind;
use parking_lot::Mutex;

use crate::context::PrimaryContext;
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

/// Gives device `ordinal` read-write access to the pool `ptr` was allocated from, if it is pool
/// memory and the device lacks it.
fn grant_pool_access(ptr: usize, ordinal: u32) -> Result<(), DriverError> {
    let mut pool: CUmemoryPool = std::ptr::null_mut();
    // SAFETY: `pool` is a valid out-pointer of the attribute's type; `ptr` is never dereferenced.
    let found = call("cuPointerGetAttribute", || unsafe {
        sys::cuPointerGetAttribute(
            (&raw mut pool).cast(),
            CUpointer_attribute::CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE,
            ptr as u64,
        )
    });
    // Memory of no pool (cuMemAlloc's, IPC mappings), or a driver without pools.
    if found.is_err() || pool.is_null() {
        return Ok(());
    }
    let location = CUmemLocation {
        type_: CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE,
        id: ordinal as i32,
    };
    let mut flags = CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_NONE;
    // SAFETY: valid pointers to live locals; `pool` is the driver's handle.
    call("cuMemPoolGetAccess", || unsafe {
        sys::cuMemPoolGetAccess(&mut flags, pool, (&raw const location).cast_mut())
    })?;
    if flags == CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE {
        return Ok(());
    }
    let access = CUmemAccessDesc {
        location,
        flags: CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
    };
    // SAFETY: one valid descriptor.
    call("cuMemPoolSetAccess", || unsafe {
        sys::cuMemPoolSetAccess(pool, &access, 1)
    })
}

/// Enqueues a copy of `len` bytes from `src` to `dst` on `stream` (of device `ordinal`, whose
/// context is current) with `cuMemcpyPeerAsync` when either side is device memory of another
/// device; `Ok(false)`, enqueuing nothing, when neither is.
///
/// # Safety
/// Both ranges are valid for `len` bytes until the copy completes, and `stream` is alive.
pub(crate) unsafe fn copy(
    stream: CUstream,
    ordinal: u32,
    dst: usize,
    src: usize,
    len: usize,
) -> Result<bool, DriverError> {
    let (to, from) = (other_device(dst, ordinal)?, other_device(src, ordinal)?);
    if to.is_none() && from.is_none() {
        return Ok(false);
    }
    for (ptr, device) in [(dst, to), (src, from)] {
        if device.is_some() {
            grant_pool_access(ptr, ordinal)?;
        }
    }
    let (to, from) = (
        primary(to.unwrap_or(ordinal))?,
        primary(from.unwrap_or(ordinal))?,
    );
    // SAFETY: the caller's promise for the ranges and the stream; both contexts are retained.
    call("cuMemcpyPeerAsync", || unsafe {
        sys::cuMemcpyPeerAsync(dst as u64, to.raw(), src as u64, from.raw(), len, stream)
    })?;
    Ok(true)
}
