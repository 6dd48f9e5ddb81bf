//! Copies, fills and host functions, and the host synchronization the driver documents for each
//! ("API synchronization behavior"):
//!
//! - asynchronous copies from pageable host memory snapshot the source before returning; to
//!   pageable host memory they return only once the copy is done; between two pageable ranges
//!   they are synchronous; pinned, managed and device memory is touched when the stream runs;
//! - synchronous copies (on the legacy default stream) return at once between device ranges and
//!   after staging from pageable memory, and wait in every other case;
//! - fills are asynchronous, except synchronous fills of pinned or managed memory, which wait;
//!   the device cannot reach pageable memory, so a fill of it is CUDA_ERROR_INVALID_VALUE.

use std::ffi::c_void;
use std::sync::Arc;

use cudarc::driver::sys::{CUdeviceptr, CUresult, CUstream};

use crate::device::entry;
use crate::errors::DriverResult;
use crate::memory::{self, Kind};
use crate::ops::{Callback, HostFunction, Op, Place};
use crate::stream::{self, Stream};

/// What one side of a copy is, when it is enqueued.
enum Side {
    Memory(Place),
    Pageable(u64),
}

/// Classifies `[address, address + len)`: memory the driver allocated (all of it inside one
/// allocation), or pageable host memory. A device address the driver does not know (freed, or
/// never allocated) is CUDA_ERROR_INVALID_VALUE.
fn side(address: u64, len: usize) -> DriverResult<Side> {
    if address == 0 {
        return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
    }
    match memory::find(address) {
        Some(record) => {
            if address + len as u64 > record.end() {
                return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
            }
            let offset = (address - record.start) as usize;
            Ok(Side::Memory(Place::memory(record, offset)))
        }
        None if memory::is_device_address(address) => Err(CUresult::CUDA_ERROR_INVALID_VALUE),
        None => Ok(Side::Pageable(address)),
    }
}

fn is_kind(place: &Place, kind: Kind) -> bool {
    place.record().is_some_and(|record| record.kind == kind)
}

/// Whether `place` is host memory (pinned or pageable) rather than device or managed memory.
fn is_host(side: &Side) -> bool {
    match side {
        Side::Memory(place) => is_kind(place, Kind::PinnedHost),
        Side::Pageable(_) => true,
    }
}

fn copy(
    operation: &'static str,
    destination: CUdeviceptr,
    source: CUdeviceptr,
    len: usize,
    stream: CUstream,
    synchronous: bool,
) -> CUresult {
    entry(operation, || {
        let stream = stream::resolve(stream)?;
        if len == 0 {
            return Ok(());
        }
        let (to, from) = (side(destination, len)?, side(source, len)?);
        let host_source = is_host(&from);
        let host_destination = is_host(&to);
        // When the calling thread must wait for the copy to complete.
        let wait = match (&to, &from) {
            (Side::Pageable(_), _) => true,
            (_, Side::Pageable(_)) => synchronous && host_destination,
            _ => synchronous && (host_source || host_destination),
        };
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
        let destination = match to {
            Side::Memory(place) => place,
            Side::Pageable(address) => Place::Pageable(address as usize),
        };
        let op = Op::Copy {
            operation,
            destination,
            source,
            len,
        };
        finish(&stream, op, wait)
    })
}

/// Enqueues `op`, and with `wait` blocks until it has run; the context's sticky error then
/// surfaces at once.
fn finish(stream: &Arc<Stream>, op: Op, wait: bool) -> DriverResult {
    let sequence = stream.enqueue(op, vec![]);
    if wait {
        stream.wait_for(sequence);
        stream.context.sticky_error()?;
    }
    Ok(())
}

macro_rules! copies {
    ($($name:ident($destination:ident: $dt:ty, $source:ident: $st:ty) $synchronous:literal;)*) => {$(
        /// # Safety
        /// Both ranges are `len` bytes the caller may access as the copy's kind says, and stay
        /// valid until the copy has completed.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name($destination: $dt, $source: $st, len: usize, stream: CUstream) -> CUresult {
            copy(stringify!($name), $destination as CUdeviceptr, $source as CUdeviceptr, len, stream, $synchronous)
        }
    )*};
}

copies! {
    cuMemcpyAsync(destination: CUdeviceptr, source: CUdeviceptr) false;
    cuMemcpyHtoDAsync_v2(destination: CUdeviceptr, source: *const c_void) false;
    cuMemcpyDtoHAsync_v2(destination: *mut c_void, source: CUdeviceptr) false;
    cuMemcpyDtoDAsync_v2(destination: CUdeviceptr, source: CUdeviceptr) false;
}

macro_rules! synchronous_copies {
    ($($name:ident($destination:ident: $dt:ty, $source:ident: $st:ty);)*) => {$(
        /// # Safety
        /// Both ranges are `len` bytes the caller may access as the copy's kind says.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name($destination: $dt, $source: $st, len: usize) -> CUresult {
            copy(stringify!($name), $destination as CUdeviceptr, $source as CUdeviceptr, len, std::ptr::null_mut(), true)
        }
    )*};
}

synchronous_copies! {
    cuMemcpy(destination: CUdeviceptr, source: CUdeviceptr);
    cuMemcpyHtoD_v2(destination: CUdeviceptr, source: *const c_void);
    cuMemcpyDtoH_v2(destination: *mut c_void, source: CUdeviceptr);
    cuMemcpyDtoD_v2(destination: CUdeviceptr, source: CUdeviceptr);
}

fn fill(
    operation: &'static str,
    destination: CUdeviceptr,
    value: u32,
    width: usize,
    count: usize,
    stream: CUstream,
    synchronous: bool,
) -> CUresult {
    entry(operation, || {
        let stream = stream::resolve(stream)?;
        if !destination.is_multiple_of(width as u64) {
            return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
        }
        if count == 0 {
            return Ok(());
        }
        let len = count
            .checked_mul(width)
            .ok_or(CUresult::CUDA_ERROR_INVALID_VALUE)?;
        let Side::Memory(place) = side(destination, len)? else {
            return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
        };
        let wait = synchronous && !is_kind(&place, Kind::Device);
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
    ($($name:ident($value:ty, $width:literal) $synchronous:literal;)*) => {$(
        #[unsafe(no_mangle)]
        pub extern "C" fn $name(destination: CUdeviceptr, value: $value, count: usize, stream: CUstream) -> CUresult {
            fill(stringify!($name), destination, value as u32, $width, count, stream, $synchronous)
        }
    )*};
}

fills! {
    cuMemsetD8Async(u8, 1) false;
    cuMemsetD16Async(u16, 2) false;
    cuMemsetD32Async(u32, 4) false;
}

macro_rules! synchronous_fills {
    ($($name:ident($value:ty, $width:literal);)*) => {$(
        #[unsafe(no_mangle)]
        pub extern "C" fn $name(destination: CUdeviceptr, value: $value, count: usize) -> CUresult {
            fill(stringify!($name), destination, value as u32, $width, count, std::ptr::null_mut(), true)
        }
    )*};
}

synchronous_fills! {
    cuMemsetD8_v2(u8, 1);
    cuMemsetD16_v2(u16, 2);
    cuMemsetD32_v2(u32, 4);
}

/// # Safety
/// `function` may be called with `data` on another thread once the stream reaches it; it must
/// not call the driver (as documented).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuLaunchHostFunc(
    stream: CUstream,
    function: Option<unsafe extern "C" fn(*mut c_void)>,
    data: *mut c_void,
) -> CUresult {
    entry("cuLaunchHostFunc", || {
        let stream = stream::resolve(stream)?;
        let function = function.ok_or(CUresult::CUDA_ERROR_INVALID_VALUE)?;
        let op = Op::HostFunction(HostFunction {
            function,
            data: data as usize,
        });
        finish(&stream, op, false)
    })
}

/// # Safety
/// `callback` may be called with the stream, a status and `data` on another thread once the
/// stream reaches it; it must not call the driver (as documented).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuStreamAddCallback(
    stream: CUstream,
    callback: Option<unsafe extern "C" fn(CUstream, CUresult, *mut c_void)>,
    data: *mut c_void,
    flags: u32,
) -> CUresult {
    entry("cuStreamAddCallback", || {
        let resolved = stream::resolve(stream)?;
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
