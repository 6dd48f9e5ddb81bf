//! Hints about managed memory: `cuMemPrefetchAsync`, `cuMemAdvise` and what
//! `cuMemRangeGetAttribute(s)` reads back of them (kept page by page, see
//! [`crate::managed_hints`]). The double keeps managed memory in one place, so a prefetch moves
//! nothing; it is still a stream operation on the range (which must be allocated when it runs),
//! and all of them check what the documentation requires: "The memory range must refer to managed
//! memory allocated via cuMemAllocManaged" (or "via cuMemAllocFromPool from a managed memory
//! pool"; system memory qualifies only with `CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS`, 0 here).

use std::ffi::c_void;
use std::ops::Range;
use std::sync::Arc;

use cudarc::driver::sys::{CUdevice, CUdeviceptr, CUresult, CUstream};

use crate::config::config;
use crate::device::{entry, ordinal};
use crate::errors::DriverResult;
use crate::location::{
    LOCATION_DEVICE, LOCATION_HOST, LOCATION_HOST_NUMA, LOCATION_HOST_NUMA_CURRENT, Location,
};
use crate::managed_hints::{PageHints, pages};
use crate::memory::{self, Kind, Record};
use crate::ops::{Op, Place};
use crate::stream::{self, NullStream};

/// `CU_MEM_ADVISE_SET_READ_MOSTLY` .. `CU_MEM_ADVISE_UNSET_ACCESSED_BY`.
const SET_READ_MOSTLY: u32 = 1;
const UNSET_READ_MOSTLY: u32 = 2;
const SET_PREFERRED_LOCATION: u32 = 3;
const UNSET_PREFERRED_LOCATION: u32 = 4;
const SET_ACCESSED_BY: u32 = 5;
const UNSET_ACCESSED_BY: u32 = 6;

/// The managed allocation `[address, address + len)` lies in, and the pages it covers;
/// CUDA_ERROR_INVALID_VALUE for any other range.
pub(crate) fn managed_range(
    address: CUdeviceptr,
    len: usize,
) -> DriverResult<(Arc<Record>, Range<usize>)> {
    let record = memory::find(address)
        .filter(|record| record.kind == Kind::Managed)
        .filter(|record| len > 0 && address + len as u64 <= record.end())
        .ok_or(CUresult::CUDA_ERROR_INVALID_VALUE)?;
    let pages = pages(record.start, address, len);
    Ok((record, pages))
}

/// Applies `change` to `range`, pages of `record`.
pub(crate) fn change_pages(
    record: &Record,
    range: Range<usize>,
    change: impl FnMut(&mut PageHints),
) {
    let total = pages(record.start, record.start, record.size).end;
    record.hints.lock().update(range, total, change);
}

/// A device managed memory may be prefetched to, preferred at or accessed by: its id "must be a
/// valid device ordinal and the device must have a non-zero value for the device attribute
/// CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS" (CUDA_ERROR_INVALID_DEVICE otherwise, one of the
/// codes cuMemAdvise and cuMemPrefetchAsync document).
fn managed_device(id: i32) -> DriverResult<usize> {
    let ordinal = ordinal(id)?;
    if !config().concurrent_managed_access {
        return Err(CUresult::CUDA_ERROR_INVALID_DEVICE);
    }
    Ok(ordinal)
}

/// A place memory can be prefetched to or preferred at: a device, the host, or a host NUMA node
/// (the double's host has one, node 0; "the host NUMA node closest to the calling thread's CPU"
/// is that one). The host's id "will be ignored".
pub(crate) fn place(location: Location) -> DriverResult<Location> {
    match location.kind {
        LOCATION_DEVICE => managed_device(location.id).map(Location::device),
        LOCATION_HOST => Ok(Location::HOST),
        LOCATION_HOST_NUMA if location.id == 0 => Ok(location),
        LOCATION_HOST_NUMA_CURRENT => Ok(Location {
            kind: LOCATION_HOST_NUMA,
            id: 0,
        }),
        _ => Err(CUresult::CUDA_ERROR_INVALID_VALUE),
    }
}

/// A processor CU_MEM_ADVISE_SET_ACCESSED_BY may name: "either CU_MEM_LOCATION_TYPE_DEVICE with
/// CUmemLocation::id representing a valid device ordinal or CU_MEM_LOCATION_TYPE_HOST and
/// CUmemLocation::id will be ignored. All other location types are invalid."
fn processor(location: Location) -> DriverResult<CUdevice> {
    match location.kind {
        LOCATION_DEVICE => managed_device(location.id).map(|ordinal| ordinal as CUdevice),
        LOCATION_HOST => Ok(Location::HOST.as_device()),
        _ => Err(CUresult::CUDA_ERROR_INVALID_VALUE),
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
        let location = place(location)?;
        if flags != 0 {
            return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
        }
        let (record, range) = managed_range(address, len)?;
        // "this simply returns the last location that the application requested to prefetch the
        // memory range to", whether or not the stream has run the prefetch.
        change_pages(&record, range, |page| page.last_prefetch = Some(location));
        let offset = (address - record.start) as usize;
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
        Location::of_device(device),
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
        Location::of_device(device),
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

/// Records `advice` on the pages of the range. "The location argument is ignored" for the
/// read-mostly advice and for unsetting the preferred location.
fn advise(address: CUdeviceptr, len: usize, advice: u32, location: Location) -> CUresult {
    entry("cuMemAdvise", || {
        let (record, range) = managed_range(address, len)?;
        let change = |change: &dyn Fn(&mut PageHints)| change_pages(&record, range.clone(), change);
        match advice {
            SET_READ_MOSTLY => change(&|page| page.read_mostly = true),
            UNSET_READ_MOSTLY => change(&|page| page.read_mostly = false),
            SET_PREFERRED_LOCATION => {
                let preferred = Some(place(location)?);
                change(&|page| page.preferred = preferred);
            }
            UNSET_PREFERRED_LOCATION => change(&|page| page.preferred = None),
            SET_ACCESSED_BY => {
                let processor = processor(location)?;
                change(&|page| {
                    if !page.accessed_by.contains(&processor) {
                        page.accessed_by.push(processor);
                    }
                });
            }
            UNSET_ACCESSED_BY => {
                let processor = processor(location)?;
                change(&|page| page.accessed_by.retain(|&other| other != processor));
            }
            _ => return Err(CUresult::CUDA_ERROR_INVALID_VALUE),
        }
        Ok(())
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
    advise(address, len, advice, Location::of_device(device))
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

/// # Safety
/// `data` is null or valid for writing `data_size` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemRangeGetAttribute(
    data: *mut c_void,
    data_size: usize,
    attribute: u32,
    address: CUdeviceptr,
    len: usize,
) -> CUresult {
    entry("cuMemRangeGetAttribute", || {
        // SAFETY: the same contract.
        unsafe { range_attribute(data, data_size, attribute, address, len) }
    })
}

/// # Safety
/// `data` is null or valid for writing `data_size` bytes.
unsafe fn range_attribute(
    data: *mut c_void,
    data_size: usize,
    attribute: u32,
    address: CUdeviceptr,
    len: usize,
) -> DriverResult {
    if data.is_null() {
        return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
    }
    let (record, pages) = managed_range(address, len)?;
    let values = record.hints.lock().answer(pages, attribute, data_size)?;
    // SAFETY: `answer` returns `data_size` bytes of ints, which `data` holds (the caller's
    // contract); the destination may be unaligned.
    unsafe {
        std::ptr::copy_nonoverlapping(values.as_ptr().cast::<u8>(), data.cast::<u8>(), data_size);
    }
    Ok(())
}

/// "The attributes array will be interpreted to have numAttributes entries. The dataSizes array
/// will also be interpreted to have numAttributes entries."
///
/// # Safety
/// `data`, `data_sizes` and `attributes` hold `count` entries each, every `data[i]` valid for
/// writing `data_sizes[i]` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemRangeGetAttributes(
    data: *mut *mut c_void,
    data_sizes: *mut usize,
    attributes: *mut u32,
    count: usize,
    address: CUdeviceptr,
    len: usize,
) -> CUresult {
    entry("cuMemRangeGetAttributes", || {
        if data.is_null() || data_sizes.is_null() || attributes.is_null() || count == 0 {
            return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
        }
        for index in 0..count {
            // SAFETY: each array holds `count` entries (the caller's contract).
            let (out, size, attribute) = unsafe {
                (
                    *data.add(index),
                    *data_sizes.add(index),
                    *attributes.add(index),
                )
            };
            // SAFETY: `out` holds `size` bytes (the caller's contract).
            unsafe { range_attribute(out, size, attribute, address, len) }?;
        }
        Ok(())
    })
}
