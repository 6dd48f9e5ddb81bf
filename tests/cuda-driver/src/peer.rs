//! Peer access between devices: which devices can reach each other's memory
//! (`cuDeviceCanAccessPeer`), which contexts have enabled it (`cuCtxEnablePeerAccess`,
//! `cuCtxDisablePeerAccess`), and copies between the memory of two contexts (`cuMemcpyPeer`,
//! `cuMemcpyPeerAsync`, in [`crate::transfer`]).
//!
//! Every pair of distinct devices are peers unless `DEVBUF_CUDA_TEST_NO_PEER_ACCESS` names the
//! pair (by the machine's device numbers, which `CUDA_VISIBLE_DEVICES` does not change), as on a
//! machine whose GPUs sit behind different PCIe root complexes. A device is never its own peer:
//! cuDeviceCanAccessPeer answers 0 for `dev == peerDev` (CUDA Runtime API, cudaDeviceCanAccessPeer:
//! "canAccessPeer ... 1 if device is capable of directly accessing memory from peerDevice and 0
//! otherwise", and a device's own memory needs no peer mapping).

use cudarc::driver::sys::{CUcontext, CUdevice, CUdeviceptr, CUresult, CUstream};
use parking_lot::Mutex;

use crate::config::{config, physical};
use crate::context::{self, Context};
use crate::device::{entry, ordinal};
use crate::errors::{DriverResult, write_out};
use crate::memory::{self, Kind};
use crate::transfer::{ASYNC, ASYNC_PTSZ, Call, SYNC, SYNC_PTDS, copy_between};

/// Whether device `device` (a valid ordinal of this process) can map `peer`'s memory.
pub(crate) fn can_access(device: usize, peer: usize) -> bool {
    machine_devices_are_peers(physical(device), physical(peer))
}

/// [`can_access`] by the machine's device numbers, for devices a process may not see (an IPC
/// handle's).
pub(crate) fn machine_devices_are_peers(from: u32, to: u32) -> bool {
    from != to
        && !config()
            .non_peers
            .iter()
            .any(|&pair| pair == (from, to) || pair == (to, from))
}

/// One context's enabled access to another's memory: both by handle and incarnation.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Enabled {
    from: (usize, u64),
    to: (usize, u64),
}

static ENABLED: Mutex<Vec<Enabled>> = Mutex::new(Vec::new());

fn incarnation(context: &'static Context) -> (usize, u64) {
    (context.handle() as usize, context.generation())
}

/// # Safety
/// `can_access` is null or valid for writing an int.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDeviceCanAccessPeer(
    can_access: *mut i32,
    device: CUdevice,
    peer: CUdevice,
) -> CUresult {
    entry("cuDeviceCanAccessPeer", || {
        let answer = self::can_access(ordinal(device)?, ordinal(peer)?);
        // SAFETY: the caller's out-pointer.
        unsafe { write_out(can_access, i32::from(answer)) }
    })
}

/// cuCtxEnablePeerAccess: "Returns CUDA_ERROR_PEER_ACCESS_UNSUPPORTED if cuDeviceCanAccessPeer()
/// indicates that the CUdevice of the current context cannot directly access memory from the
/// CUdevice of peerContext. Returns CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED if direct access of
/// peerContext from the current context has already been enabled. ... Returns
/// CUDA_ERROR_INVALID_CONTEXT if there is no current context, peerContext is not a valid context,
/// or if the current context is peerContext. Returns CUDA_ERROR_INVALID_VALUE if Flags is not 0."
#[unsafe(no_mangle)]
pub extern "C" fn cuCtxEnablePeerAccess(peer_context: CUcontext, flags: u32) -> CUresult {
    entry("cuCtxEnablePeerAccess", || {
        let current = context::current()?;
        let peer = Context::from_handle(peer_context)?;
        peer.usable()
            .map_err(|_| CUresult::CUDA_ERROR_INVALID_CONTEXT)?;
        if std::ptr::eq(current, peer) {
            return Err(CUresult::CUDA_ERROR_INVALID_CONTEXT);
        }
        if flags != 0 {
            return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
        }
        if !can_access(current.ordinal, peer.ordinal) {
            return Err(CUresult::CUDA_ERROR_PEER_ACCESS_UNSUPPORTED);
        }
        let enabled = Enabled {
            from: incarnation(current),
            to: incarnation(peer),
        };
        let mut all = ENABLED.lock();
        if all.contains(&enabled) {
            return Err(CUresult::CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED);
        }
        all.push(enabled);
        Ok(())
    })
}

/// cuCtxDisablePeerAccess: "Returns CUDA_ERROR_PEER_ACCESS_NOT_ENABLED if direct peer access has
/// not yet been enabled from peerContext to the current context. Returns
/// CUDA_ERROR_INVALID_CONTEXT if there is no current context, or if peerContext is not a valid
/// context."
#[unsafe(no_mangle)]
pub extern "C" fn cuCtxDisablePeerAccess(peer_context: CUcontext) -> CUresult {
    entry("cuCtxDisablePeerAccess", || {
        let current = context::current()?;
        let peer = Context::from_handle(peer_context)?;
        peer.usable()
            .map_err(|_| CUresult::CUDA_ERROR_INVALID_CONTEXT)?;
        let enabled = Enabled {
            from: incarnation(current),
            to: incarnation(peer),
        };
        let mut all = ENABLED.lock();
        let before = all.len();
        all.retain(|other| *other != enabled);
        if all.len() == before {
            return Err(CUresult::CUDA_ERROR_PEER_ACCESS_NOT_ENABLED);
        }
        Ok(())
    })
}

/// Checks that `pointer` is memory of `context`'s device, where the driver knows it: "Copies
/// from device memory in one context to device memory in another context. dstDevice is the base
/// device pointer of the destination memory and dstContext is the destination context."
/// Memory of another device than the one named is CUDA_ERROR_INVALID_VALUE (the double's choice).
fn peer_side(pointer: CUdeviceptr, context: CUcontext) -> DriverResult<&'static Context> {
    let context = Context::from_handle(context)?;
    context.usable()?;
    match memory::find(pointer) {
        Some(record) if record.kind == Kind::Device && record.ordinal != context.ordinal => {
            Err(CUresult::CUDA_ERROR_INVALID_VALUE)
        }
        _ => Ok(context),
    }
}

fn copy_peer(
    destination: CUdeviceptr,
    destination_context: CUcontext,
    source: CUdeviceptr,
    source_context: CUcontext,
    len: usize,
    stream: CUstream,
    call: Call,
) -> CUresult {
    let operation = if call.synchronous {
        "cuMemcpyPeer"
    } else {
        "cuMemcpyPeerAsync"
    };
    let contexts = entry(operation, || {
        peer_side(destination, destination_context)?;
        peer_side(source, source_context)?;
        Ok(())
    });
    if contexts != CUresult::CUDA_SUCCESS {
        return contexts;
    }
    let (Ok(to), Ok(from)) = (
        Context::from_handle(destination_context),
        Context::from_handle(source_context),
    ) else {
        return CUresult::CUDA_ERROR_INVALID_CONTEXT;
    };
    copy_between(
        operation,
        destination,
        source,
        len,
        stream,
        call,
        &[to, from],
    )
}

/// cuMemcpyPeer: "Copies from device memory in one context to device memory in another context
/// ... Note that this function is asynchronous with respect to the host, but serialized with
/// respect all pending and future asynchronous work in to the current context, srcContext, and
/// dstContext (use cuMemcpyPeerAsync to avoid this synchronization)." The double returns once the
/// copy is done, as for other synchronous copies between device ranges it may.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemcpyPeer(
    destination: CUdeviceptr,
    destination_context: CUcontext,
    source: CUdeviceptr,
    source_context: CUcontext,
    len: usize,
) -> CUresult {
    let null = std::ptr::null_mut();
    copy_peer(
        destination,
        destination_context,
        source,
        source_context,
        len,
        null,
        SYNC,
    )
}

#[unsafe(no_mangle)]
pub extern "C" fn cuMemcpyPeer_ptds(
    destination: CUdeviceptr,
    destination_context: CUcontext,
    source: CUdeviceptr,
    source_context: CUcontext,
    len: usize,
) -> CUresult {
    let null = std::ptr::null_mut();
    copy_peer(
        destination,
        destination_context,
        source,
        source_context,
        len,
        null,
        SYNC_PTDS,
    )
}

/// cuMemcpyPeerAsync: the same copy, "asynchronous with respect to the host and all work on other
/// streams", ordered on `stream` alone.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemcpyPeerAsync(
    destination: CUdeviceptr,
    destination_context: CUcontext,
    source: CUdeviceptr,
    source_context: CUcontext,
    len: usize,
    stream: CUstream,
) -> CUresult {
    copy_peer(
        destination,
        destination_context,
        source,
        source_context,
        len,
        stream,
        ASYNC,
    )
}

#[unsafe(no_mangle)]
pub extern "C" fn cuMemcpyPeerAsync_ptsz(
    destination: CUdeviceptr,
    destination_context: CUcontext,
    source: CUdeviceptr,
    source_context: CUcontext,
    len: usize,
    stream: CUstream,
) -> CUresult {
    copy_peer(
        destination,
        destination_context,
        source,
        source_context,
        len,
        stream,
        ASYNC_PTSZ,
    )
}
