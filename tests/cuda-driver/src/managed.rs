//! Hints about managed memory: `cuMemPrefetchAsync` and `cuMemAdvise`. The double keeps managed
//! memory in one place, so a prefetch moves nothing; it is still a stream operation on the range
//! (which must be allocated when it runs), and both check what the documentation requires: "The
//! memory range must refer to managed memory allocated via cuMemAllocManaged" (system memory
//! qualifies only with `CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS`, 0 here).

use std::sync::Arc;

use cudarc::driver::sys::{CUdevice, CUdeviceptr, CUresult, CUstream};

use crate::device::{entry, ordinal};
use crate::errors::DriverResult;
use crate::memory::{self, Kind, Record};
use crate::ops::{Op, Place};
use crate::pool::Location;
use crate::stream::{self, NullStream};

/// `CU_DEVICE_CPU`: the host, for the pre-12.2 entry points that take a device.
const DEVICE_CPU: CUdevice = -1;
/// `CU_MEM_LOCATION_TYPE_DEVICE`, `_HOST` .. `_HOST_NUMA_CURRENT`.
const LOCATION_DEVICE: u32 = 1;
const LOCATION_HOST: u32 = 2;
const LOCATION_HOST_NUMA_CURRENT: u32 = 4;
/// `CU_MEM_ADVISE_SET_READ_MOSTLY` .. `CU_MEM_ADVISE_UNSET_ACCESSED_BY`.
const ADVICE: std::ops::RangeInclusive<u32> = 1..=6;

/// The managed allocation `[address, address + len)` lies in, and the offset; CUDA_ERROR_INVALID_VALUE
/// for any other range.
fn managed_range(address: CUdeviceptr, len: usize) -> DriverResult<(Arc<Record>, usize)> {
    let record = memory::find(address)
        .filter(|record| record.kind == Kind::Managed)
        .filter(|record| len > 0 && address + len as u64 <= record.end())
        .ok_or(CUresult::CUDA_ERROR_INVALID_VALUE)?;
    let offset = (address - record.start) as usize;
    Ok((record, offset))
}

/// A location a prefetch or advice may name: a device, or the host (and its NUMA nodes, which the
/// double does not tell apart).
fn check_location(location: Location) -> DriverResult {
    match location.kind {
        LOCATION_DEVICE => ordinal(location.id).map(drop),
        LOCATION_HOST..=LOCATION_HOST_NUMA_CURRENT => Ok(()),
        _ => Err(CUresult::CUDA_ERROR_INVALID_VALUE),
    }
}

/// The location a pre-12.2 device argument names.
fn device_location(device: CUdevice) -> Location {
    match device {
        DEVICE_CPU => Location {
            kind: LOCATION_HOST,
            id: 0,
        },
        device => Location {
            kind: LOCATION_DEVICE,
            id: device,
        },
    }
}

fn prefetch(
    address: CUdeviceptr,
    len: usize,
    location: Location,
    flags: u32,
    stream: CUstream,
    null: NullStream,
) -> CUresult {
    entry("cuMemPrefetchAsync", || {
        let stream = stream::resolve_as(stream, null)?;
        check_location(location)?;
        if flags != 0 {
            return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
        }
        let (record, offset) = managed_range(address, len)?;
        stream.enqueue(
            Op::Touch {
                operation: "cuMemPrefetchAsync",
                place: Place::memory(record, offset, false),
            },
            vec![],
        );
        Ok(())
    })
}

/// CUDA 8.0's ABI: a device ordinal or `CU_DEVICE_CPU`.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemPrefetchAsync(
    address: CUdeviceptr,
    len: usize,
    device: CUdevice,
    stream: CUstream,
) -> CUresult {
    prefetch(
        address,
        len,
        device_location(device),
        0,
        stream,
        NullStream::Legacy,
    )
}

#[unsafe(no_mangle)]
pub extern "C" fn cuMemPrefetchAsync_ptsz(
    address: CUdeviceptr,
    len: usize,
    device: CUdevice,
    stream: CUstream,
) -> CUresult {
    prefetch(
        address,
        len,
        device_location(device),
        0,
        stream,
        NullStream::PerThread,
    )
}

/// CUDA 12.2's ABI (the only one in CUDA 13): a `CUmemLocation` and flags (none defined).
#[unsafe(no_mangle)]
pub extern "C" fn cuMemPrefetchAsync_v2(
    address: CUdeviceptr,
    len: usize,
    location: Location,
    flags: u32,
    stream: CUstream,
) -> CUresult {
    prefetch(address, len, location, flags, stream, NullStream::Legacy)
}

#[unsafe(no_mangle)]
pub extern "C" fn cuMemPrefetchAsync_v2_ptsz(
    address: CUdeviceptr,
    len: usize,
    location: Location,
    flags: u32,
    stream: CUstream,
) -> CUresult {
    prefetch(address, len, location, flags, stream, NullStream::PerThread)
}

fn advise(address: CUdeviceptr, len: usize, advice: u32, location: Location) -> CUresult {
    entry("cuMemAdvise", || {
        if !ADVICE.contains(&advice) {
            return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
        }
        check_location(location)?;
        managed_range(address, len).map(drop)
    })
}

/// CUDA 8.0's ABI: a device ordinal or `CU_DEVICE_CPU`.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemAdvise(
    address: CUdeviceptr,
    len: usize,
    advice: u32,
    device: CUdevice,
) -> CUresult {
    advise(address, len, advice, device_location(device))
}

/// CUDA 12.2's ABI (the only one in CUDA 13): a `CUmemLocation`.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemAdvise_v2(
    address: CUdeviceptr,
    len: usize,
    advice: u32,
    location: Location,
) -> CUresult {
    advise(address, len, advice, location)
}
