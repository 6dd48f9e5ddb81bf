//! Copies, fills and host functions, and the host synchronization the driver documents for each
//! ("API synchronization behavior"):
//!
//! - asynchronous copies from pageable host memory snapshot the source before returning; to
//!   pageable host memory they return only once the copy is done; pinned, managed and device
//!   memory is touched when the stream runs;
//! - synchronous copies (on the legacy default stream, or the per-thread one for the `_ptds`
//!   variants) return at once between device ranges; from pageable memory to the device they
//!   synchronize the stream first ("a stream sync is performed before the copy is initiated") and
//!   return once the source is staged ("the DMA to final destination may not have completed");
//!   they wait in every other case;
//! - copies between host memory (pinned or pageable) at both ends "are fully synchronous with
//!   respect to the host", asynchronous or not;
//! - fills are asynchronous, except synchronous fills of pinned or managed memory, which wait;
//!   the device cannot reach pageable memory, so a fill of it is CUDA_ERROR_INVALID_VALUE;
//! - in a context created with `CU_CTX_SYNC_MEMOPS`, synchronous copies and fills "will always
//!   synchronize", and so do those on memory with `CU_POINTER_ATTRIBUTE_SYNC_MEMOPS` set.
//!
//! `cuMemFree` waits for what synchronous calls left running on the memory it frees (see
//! [`crate::alloc`]).
//!
//! Between devices: a copy on a stream of one device that touches pool memory of another device
//! needs the pool's access for the stream's device (`cuMemPoolSetAccess`), else
//! CUDA_ERROR_INVALID_VALUE (NVIDIA's cuda.core `test_peer_access_basic` expects exactly that of
//! `cuMemcpyAsync`); a synchronous copy touching another device's memory is serialized with that
//! device's legacy default stream as well as its own (`cuMemcpyPeer(Async)`, in
//! [`crate::peer`], copy through [`copy_between`] too).

use std::ffi::c_void;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use cudarc::driver::sys::{CUdeviceptr, CUmemoryPool, CUresult, CUstream};

use crate::context::SYNC_MEMOPS;
use crate::context::{self, Context};
use crate::device::entry;
use crate::errors::DriverResult;
use crate::memory::{self, Kind, Origin};
use crate::ops::{Callback, HostFunction, Op, Place};
use crate::pool;
use crate::stream::Dependency;
use crate::stream::{self, NullStream, Stream};

/// What one side of a copy is, when it is enqueued.
pub(crate) enum Side {
    Memory(Place),
    Pageable(u64),
}

/// Classifies `[address, address + len)`: memory the driver allocated (all of it inside one
/// allocation), or pageable host memory. A device address the driver does not know (freed, or
/// never allocated) is CUDA_ERROR_INVALID_VALUE.
pub(crate) fn side(address: u64, len: usize, synchronous: bool) -> DriverResult<Side> {
    if address == 0 {
        return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
    }
    match memory::find(address) {
        Some(record) => {
            if address + len as u64 > record.end() {
                return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
            }
            let offset = (address - record.start) as usize;
            Ok(Side::Memory(Place::memory(record, offset, synchronous)))
        }
        None if memory::is_device_address(address) => Err(CUresult::CUDA_ERROR_INVALID_VALUE),
        None => Ok(Side::Pageable(address)),
    }
}

fn is_kind(place: &Place, kind: Kind) -> bool {
    place.record().is_some_and(|record| record.kind == kind)
}

/// Whether `side` is memory with `CU_POINTER_ATTRIBUTE_SYNC_MEMOPS` set: "the region of memory that
/// ptr points to is guaranteed to always synchronize memory operations that are synchronous".
fn sync_memops(side: &Side) -> bool {
    match side {
        Side::Memory(place) => place
            .record()
            .is_some_and(|record| record.sync_memops.load(Ordering::Acquire)),
        Side::Pageable(_) => false,
    }
}

/// Whether `place` is host memory (pinned or pageable) rather than device or managed memory.
fn is_host(side: &Side) -> bool {
    match side {
        Side::Memory(place) => is_kind(place, Kind::PinnedHost),
        Side::Pageable(_) => true,
    }
}

/// How a copy or fill was called: asynchronously on a stream, or synchronously; and what
/// stream 0 means.
#[derive(Clone, Copy)]
pub(crate) struct Call {
    pub synchronous: bool,
    pub null: NullStream,
}

pub(crate) const ASYNC: Call = Call {
    synchronous: false,
    null: NullStream::Legacy,
};
pub(crate) const ASYNC_PTSZ: Call = Call {
    synchronous: false,
    null: NullStream::PerThread,
};
pub(crate) const SYNC: Call = Call {
    synchronous: true,
    null: NullStream::Legacy,
};
pub(crate) const SYNC_PTDS: Call = Call {
    synchronous: true,
    null: NullStream::PerThread,
};

fn copy(
    operation: &'static str,
    destination: CUdeviceptr,
    source: CUdeviceptr,
    len: usize,
    stream: CUstream,
    call: Call,
) -> CUresult {
    copy_between(operation, destination, source, len, stream, call, &[])
}

/// [`copy`], also serialized, when synchronous, with the legacy streams of `peer_contexts`: a
/// peer copy (`cuMemcpyPeer`, `cuMemcpyPeerAsync`) when there are any, which reaches another
/// device's pool memory without the pool's access (see [`reachable`]).
pub(crate) fn copy_between(
    operation: &'static str,
    destination: CUdeviceptr,
    source: CUdeviceptr,
    len: usize,
    stream: CUstream,
    call: Call,
    peer_contexts: &[&'static Context],
) -> CUresult {
    entry(operation, || {
        let stream = stream::resolve_as(stream, call.null)?;
        if len == 0 {
            return Ok(());
        }
        let synchronous = call.synchronous;
        let (to, from) = (
            side(destination, len, synchronous)?,
            side(source, len, synchronous)?,
        );
        let plain_copy = peer_contexts.is_empty();
        let ordinal = stream.context.ordinal;
        if plain_copy && !(reachable(&to, ordinal) && reachable(&from, ordinal)) {
            return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
        }
        let wait = host_waits(&stream, call, &to, &from)?;
        let source = match from {
            Side::Memory(place) => place,
            // Pageable to pageable: the enqueuing thread waits, so the source stays valid.
            Side::Pageable(address) if matches!(to, Side::Pageable(_)) => {
                Place::Pageable(address as usize)
            }
            Side::Pageable(address) => {
                // SAFETY: the caller promises `len` readable bytes at `source`; we read them now,
                // as the driver stages pageable memory before the call returns.
                let bytes = unsafe { std::slice::from_raw_parts(address as *const u8, len) };
                Place::Staged(bytes.into())
            }
        };
        let destination = destination_place(to);
        // cuMemcpyPeer: "serialized with respect [to] all pending and future asynchronous work in
        // to the current context, srcContext, and dstContext"; the double holds a synchronous copy
        // between devices through unified addressing (cuMemcpy) to the same rule.
        let mut others: Vec<&'static Context> = vec![];
        if synchronous {
            let contexts = [&destination, &source]
                .into_iter()
                .filter_map(|place| place.record())
                .filter(|record| record.kind == Kind::Device)
                .map(|record| record.context.unwrap_or(context::primary(record.ordinal)));
            for other in contexts.chain(peer_contexts.iter().copied()) {
                if other.ordinal != stream.context.ordinal
                    && !others.iter().any(|seen| std::ptr::eq(*seen, other))
                {
                    others.push(other);
                }
            }
        }
        let others: Vec<Arc<Stream>> = others.into_iter().filter_map(stream::legacy_of).collect();
        let op = Op::Copy {
            operation,
            destination,
            source,
            len,
        };
        finish_joined(&stream, op, wait, &others)
    })
}

/// Whether a plain copy (`cuMemcpy*`) on a stream of device `ordinal` may copy to or from `side`:
/// all but another device's pool memory the pool has not given it access to (Programming Guide,
/// "Stream Ordered Memory Allocator": "memory pool allocation accessibility does not follow
/// cudaDeviceEnablePeerAccess or cuCtxEnablePeerAccess. Instead, the API cudaMemPoolSetAccess
/// modifies what devices can access allocations from a pool"; NVIDIA's cuda.core
/// `test_peer_access_basic` expects CUDA_ERROR_INVALID_VALUE). A peer copy is not held to it: the
/// same chapter names `cudaMemcpyPeerAsync` for copies of pool memory between devices without
/// that access, which the driver stages through the host ("p2h2p"); the double copies directly,
/// with the same result (the staging's bandwidth is not modelled).
pub(crate) fn reachable(side: &Side, ordinal: usize) -> bool {
    let Side::Memory(place) = side else {
        return true;
    };
    match place.record() {
        Some(record) if record.kind == Kind::Device && record.ordinal != ordinal => {
            match record.origin {
                Origin::Pooled(id) => {
                    pool::find(id as CUmemoryPool).is_ok_and(|pool| pool.accessible_by(ordinal))
                }
                _ => true,
            }
        }
        _ => true,
    }
}

/// [`finish`], with `op` also ordered after what is queued on the `others` streams so far and
/// their later work after it.
fn finish_joined(stream: &Arc<Stream>, op: Op, wait: bool, others: &[Arc<Stream>]) -> DriverResult {
    if others.is_empty() {
        return finish(stream, op, wait);
    }
    let before: Vec<Dependency> = others
        .iter()
        .map(|other| Dependency {
            stream: Arc::clone(other),
            sequence: other.enqueue(Op::Wait, vec![]),
        })
        .collect();
    let sequence = stream.enqueue(op, before);
    for other in others {
        let after = Dependency {
            stream: Arc::clone(stream),
            sequence,
        };
        other.enqueue(Op::Wait, vec![after]);
    }
    if wait {
        stream.wait_for(sequence);
        stream.context.sticky_error()?;
    }
    Ok(())
}

/// Enqueues `op`, and with `wait` blocks until it has run; the context's sticky error then
/// surfaces at once.
pub(crate) fn finish(stream: &Arc<Stream>, op: Op, wait: bool) -> DriverResult {
    let sequence = stream.enqueue(op, vec![]);
    if wait {
        stream.wait_for(sequence);
        stream.context.sticky_error()?;
    }
    Ok(())
}

/// Whether the calling thread waits for a copy from `from` to `to` to complete, by the rules in
/// this module's documentation; a synchronous copy from pageable memory first drains its stream.
pub(crate) fn host_waits(
    stream: &Arc<Stream>,
    call: Call,
    to: &Side,
    from: &Side,
) -> DriverResult<bool> {
    let synchronous = call.synchronous;
    let (host_source, host_destination) = (is_host(from), is_host(to));
    let always = synchronous
        && (stream.context.flags() & SYNC_MEMOPS != 0 || sync_memops(to) || sync_memops(from));
    let wait = match (to, from) {
        _ if always || (host_source && host_destination) => true,
        (Side::Pageable(_), _) => true,
        (_, Side::Pageable(_)) => false,
        _ => synchronous && (host_source || host_destination),
    };
    if synchronous && matches!(from, Side::Pageable(_)) {
        stream.drain();
        stream.context.sticky_error()?;
    }
    Ok(wait)
}

/// Where a copy writes: driver memory, or pageable memory the enqueuing thread waits for.
pub(crate) fn destination_place(to: Side) -> Place {
    match to {
        Side::Memory(place) => place,
        Side::Pageable(address) => Place::Pageable(address as usize),
    }
}

macro_rules! copies {
    ($($name:ident / $ptsz:ident ($destination:ident: $dt:ty, $source:ident: $st:ty);)*) => {$(
        /// # Safety
        /// Both ranges are `len` bytes the caller may access as the copy's kind says, and stay
        /// valid until the copy has completed.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name($destination: $dt, $source: $st, len: usize, stream: CUstream) -> CUresult {
            copy(stringify!($name), $destination as CUdeviceptr, $source as CUdeviceptr, len, stream, ASYNC)
        }

        /// # Safety
        /// As for the variant without `_ptsz`.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $ptsz($destination: $dt, $source: $st, len: usize, stream: CUstream) -> CUresult {
            copy(stringify!($name), $destination as CUdeviceptr, $source as CUdeviceptr, len, stream, ASYNC_PTSZ)
        }
    )*};
}

copies! {
    cuMemcpyAsync / cuMemcpyAsync_ptsz(destination: CUdeviceptr, source: CUdeviceptr);
    cuMemcpyHtoDAsync_v2 / cuMemcpyHtoDAsync_v2_ptsz(destination: CUdeviceptr, source: *const c_void);
    cuMemcpyDtoHAsync_v2 / cuMemcpyDtoHAsync_v2_ptsz(destination: *mut c_void, source: CUdeviceptr);
    cuMemcpyDtoDAsync_v2 / cuMemcpyDtoDAsync_v2_ptsz(destination: CUdeviceptr, source: CUdeviceptr);
}

macro_rules! synchronous_copies {
    ($($name:ident / $ptds:ident ($destination:ident: $dt:ty, $source:ident: $st:ty);)*) => {$(
        /// # Safety
        /// Both ranges are `len` bytes the caller may access as the copy's kind says.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name($destination: $dt, $source: $st, len: usize) -> CUresult {
            copy(stringify!($name), $destination as CUdeviceptr, $source as CUdeviceptr, len, std::ptr::null_mut(), SYNC)
        }

        /// # Safety
        /// As for the variant without `_ptds`.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $ptds($destination: $dt, $source: $st, len: usize) -> CUresult {
            copy(stringify!($name), $destination as CUdeviceptr, $source as CUdeviceptr, len, std::ptr::null_mut(), SYNC_PTDS)
        }
    )*};
}

synchronous_copies! {
    cuMemcpy / cuMemcpy_ptds(destination: CUdeviceptr, source: CUdeviceptr);
    cuMemcpyHtoD_v2 / cuMemcpyHtoD_v2_ptds(destination: CUdeviceptr, source: *const c_void);
    cuMemcpyDtoH_v2 / cuMemcpyDtoH_v2_ptds(destination: *mut c_void, source: CUdeviceptr);
    cuMemcpyDtoD_v2 / cuMemcpyDtoD_v2_ptds(destination: CUdeviceptr, source: CUdeviceptr);
}

fn fill(
    operation: &'static str,
    destination: CUdeviceptr,
    value: u32,
    width: usize,
    count: usize,
    stream: CUstream,
    call: Call,
) -> CUresult {
    entry(operation, || {
        let stream = stream::resolve_as(stream, call.null)?;
        let synchronous = call.synchronous;
        if !destination.is_multiple_of(width as u64) {
            return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
        }
        if count == 0 {
            return Ok(());
        }
        let len = count
            .checked_mul(width)
            .ok_or(CUresult::CUDA_ERROR_INVALID_VALUE)?;
        let Side::Memory(place) = side(destination, len, synchronous)? else {
            return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
        };
        let always = stream.context.flags() & SYNC_MEMOPS != 0
            || place
                .record()
                .is_some_and(|record| record.sync_memops.load(Ordering::Acquire));
        let wait = synchronous && (always || !is_kind(&place, Kind::Device));
        let op = Op::Fill {
            operation,
            destination: place,
            value,
            width,
            count,
        };
        finish(&stream, op, wait)
    })
}

macro_rules! fills {
    ($($name:ident / $ptsz:ident ($value:ty, $width:literal);)*) => {$(
        #[unsafe(no_mangle)]
        pub extern "C" fn $name(destination: CUdeviceptr, value: $value, count: usize, stream: CUstream) -> CUresult {
            fill(stringify!($name), destination, value as u32, $width, count, stream, ASYNC)
        }

        #[unsafe(no_mangle)]
        pub extern "C" fn $ptsz(destination: CUdeviceptr, value: $value, count: usize, stream: CUstream) -> CUresult {
            fill(stringify!($name), destination, value as u32, $width, count, stream, ASYNC_PTSZ)
        }
    )*};
}

fills! {
    cuMemsetD8Async / cuMemsetD8Async_ptsz(u8, 1);
    cuMemsetD16Async / cuMemsetD16Async_ptsz(u16, 2);
    cuMemsetD32Async / cuMemsetD32Async_ptsz(u32, 4);
}

macro_rules! synchronous_fills {
    ($($name:ident / $ptds:ident ($value:ty, $width:literal);)*) => {$(
        #[unsafe(no_mangle)]
        pub extern "C" fn $name(destination: CUdeviceptr, value: $value, count: usize) -> CUresult {
            fill(stringify!($name), destination, value as u32, $width, count, std::ptr::null_mut(), SYNC)
        }

        #[unsafe(no_mangle)]
        pub extern "C" fn $ptds(destination: CUdeviceptr, value: $value, count: usize) -> CUresult {
            fill(stringify!($name), destination, value as u32, $width, count, std::ptr::null_mut(), SYNC_PTDS)
        }
    )*};
}

synchronous_fills! {
    cuMemsetD8_v2 / cuMemsetD8_v2_ptds(u8, 1);
    cuMemsetD16_v2 / cuMemsetD16_v2_ptds(u16, 2);
    cuMemsetD32_v2 / cuMemsetD32_v2_ptds(u32, 4);
}

type HostFn = Option<unsafe extern "C" fn(*mut c_void)>;

/// # Safety
/// `function` may be called with `data` on another thread once the stream reaches it; it must
/// not call the driver (as documented).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuLaunchHostFunc(
    stream: CUstream,
    function: HostFn,
    data: *mut c_void,
) -> CUresult {
    launch_host_func(stream, function, data, NullStream::Legacy)
}

/// # Safety
/// As for [`cuLaunchHostFunc`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuLaunchHostFunc_ptsz(
    stream: CUstream,
    function: HostFn,
    data: *mut c_void,
) -> CUresult {
    launch_host_func(stream, function, data, NullStream::PerThread)
}

fn launch_host_func(
    stream: CUstream,
    function: HostFn,
    data: *mut c_void,
    null: NullStream,
) -> CUresult {
    entry("cuLaunchHostFunc", || {
        let stream = stream::resolve_as(stream, null)?;
        let function = function.ok_or(CUresult::CUDA_ERROR_INVALID_VALUE)?;
        let op = Op::HostFunction(HostFunction {
            function,
            data: data as usize,
        });
        finish(&stream, op, false)
    })
}

type StreamCallback = Option<unsafe extern "C" fn(CUstream, CUresult, *mut c_void)>;

/// # Safety
/// `callback` may be called with the stream, a status and `data` on another thread once the
/// stream reaches it; it must not call the driver (as documented).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuStreamAddCallback(
    stream: CUstream,
    callback: StreamCallback,
    data: *mut c_void,
    flags: u32,
) -> CUresult {
    add_callback(stream, callback, data, flags, NullStream::Legacy)
}

/// # Safety
/// As for [`cuStreamAddCallback`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuStreamAddCallback_ptsz(
    stream: CUstream,
    callback: StreamCallback,
    data: *mut c_void,
    flags: u32,
) -> CUresult {
    add_callback(stream, callback, data, flags, NullStream::PerThread)
}

fn add_callback(
    stream: CUstream,
    callback: StreamCallback,
    data: *mut c_void,
    flags: u32,
    null: NullStream,
) -> CUresult {
    entry("cuStreamAddCallback", || {
        let resolved = stream::resolve_as(stream, null)?;
        let function = callback.ok_or(CUresult::CUDA_ERROR_INVALID_VALUE)?;
        if flags != 0 {
            return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
        }
        // The callback hears the handle it was given, 0 included.
        let op = Op::Callback(Callback {
            function,
            stream: stream as usize,
            data: data as usize,
        });
        finish(&resolved, op, false)
    })
}
