//! CUDA 13's batched managed-memory operations: `cuMemPrefetchBatchAsync`,
//! `cuMemDiscardBatchAsync` and `cuMemDiscardAndPrefetchBatchAsync` (and their `_ptsz`
//! variants). "The semantics of the individual prefetch operations are as described in
//! cuMemPrefetchAsync" (see [`crate::managed`]). A discard "informs the driver that the contents
//! of that range are no longer useful [...] Reading from a discarded range, without a subsequent
//! write or prefetch to that part of the range, will return an indeterminate value": the double
//! fills it with the poison pattern of fresh memory (0xFF bytes) when the stream reaches it, so a
//! program that reads discarded memory sees garbage, never its old contents.

use std::ops::Range;
use std::sync::Arc;

use cudarc::driver::sys::{CUdeviceptr, CUresult, CUstream};

use crate::config::config;
use crate::device::entry;
use crate::errors::DriverResult;
use crate::location::Location;
use crate::managed::{change_pages, managed_range, place};
use crate::memory::Record;
use crate::ops::{Op, Place};
use crate::stream::{self, Flavor, NullStream, Stream};

/// The byte fresh memory holds (see [`crate::storage`]).
const POISON: u32 = 0xFF;

/// One range of a batch.
struct Operand {
    record: Arc<Record>,
    pages: Range<usize>,
    offset: usize,
    len: usize,
}

/// The checks every batch makes: "All devices in the system must have a non-zero value for the
/// device attribute CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS otherwise the API will return
/// an error" (the double's: CUDA_ERROR_NOT_SUPPORTED); "Flags reserved for future use. Must be
/// zero."; the stream "Must not be legacy NULL stream."
fn batch_stream(flags: u64, stream: CUstream, null: NullStream) -> DriverResult<Arc<Stream>> {
    let stream = stream::resolve_as(stream, null)?;
    if !config().concurrent_managed_access {
        return Err(CUresult::CUDA_ERROR_NOT_SUPPORTED);
    }
    if flags != 0 || stream.flavor == Flavor::Legacy {
        return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
    }
    Ok(stream)
}

/// The ranges `dptrs` and `sizes` name: "Both arrays must be of the same length as specified by
/// count. Each memory range specified must refer to managed memory".
///
/// # Safety
/// `dptrs` and `sizes` are null or hold `count` entries each.
unsafe fn operands(
    dptrs: *const CUdeviceptr,
    sizes: *const usize,
    count: usize,
) -> DriverResult<Vec<Operand>> {
    if dptrs.is_null() || sizes.is_null() || count == 0 {
        return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
    }
    (0..count)
        .map(|index| {
            // SAFETY: both arrays hold `count` entries (the caller's contract).
            let (address, len) = unsafe { (*dptrs.add(index), *sizes.add(index)) };
            let (record, pages) = managed_range(address, len)?;
            let offset = (address - record.start) as usize;
            Ok(Operand {
                record,
                pages,
                offset,
                len,
            })
        })
        .collect()
}

/// Each operation's prefetch location: "prefetchLocs[k] will be applied to copies starting from
/// prefetchLocIdxs[k] through prefetchLocIdxs[k+1] - 1 [...] the first entry in prefetchLocIdxs
/// must always be 0. Also, each entry must be greater than the previous entry and the last entry
/// should be less than count. Furthermore, numPrefetchLocs must be lesser than or equal to count."
///
/// # Safety
/// `locations` and `starts` are null or hold `number` entries each.
unsafe fn destinations(
    locations: *const Location,
    starts: *const usize,
    number: usize,
    count: usize,
) -> DriverResult<Vec<Location>> {
    if locations.is_null() || starts.is_null() || number == 0 || number > count {
        return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
    }
    // SAFETY: both arrays hold `number` entries (the caller's contract).
    let (locations, starts) = unsafe {
        (
            std::slice::from_raw_parts(locations, number),
            std::slice::from_raw_parts(starts, number),
        )
    };
    let ordered = starts.windows(2).all(|pair| pair[0] < pair[1]);
    if starts[0] != 0 || !ordered || starts[number - 1] >= count {
        return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
    }
    let mut each = Vec::with_capacity(count);
    for (index, &location) in locations.iter().enumerate() {
        let end = starts.get(index + 1).copied().unwrap_or(count);
        let location = place(location)?;
        each.resize(end, location);
    }
    Ok(each)
}

fn discard(stream: &Arc<Stream>, operand: &Operand) {
    stream.enqueue(
        Op::Fill {
            operation: "cuMemDiscardBatchAsync",
            destination: Place::memory(Arc::clone(&operand.record), operand.offset, false),
            value: POISON,
            width: 1,
            count: operand.len,
        },
        vec![],
    );
}

fn prefetch(stream: &Arc<Stream>, operand: &Operand, location: Location) {
    change_pages(&operand.record, operand.pages.clone(), |page| {
        page.last_prefetch = Some(location)
    });
    stream.enqueue(
        Op::Touch {
            operation: "cuMemPrefetchBatchAsync",
            place: Place::memory(Arc::clone(&operand.record), operand.offset, false),
        },
        vec![],
    );
}

/// A batch of discards (when `discarding`) and prefetches, checked whole before any is enqueued.
///
/// # Safety
/// The arrays hold the entries their counts say (the entry points' contract).
#[allow(clippy::too_many_arguments)]
unsafe fn batch(
    operation: &'static str,
    discarding: bool,
    dptrs: *const CUdeviceptr,
    sizes: *const usize,
    count: usize,
    locations: *const Location,
    starts: *const usize,
    number: usize,
    flags: u64,
    stream: CUstream,
    null: NullStream,
) -> CUresult {
    entry(operation, || {
        let stream = batch_stream(flags, stream, null)?;
        // SAFETY: the caller's arrays.
        let (operands, destinations) = unsafe {
            (
                operands(dptrs, sizes, count)?,
                destinations(locations, starts, number, count)?,
            )
        };
        for (operand, location) in operands.iter().zip(destinations) {
            if discarding {
                discard(&stream, operand);
            }
            prefetch(&stream, operand, location);
        }
        Ok(())
    })
}

macro_rules! prefetch_batches {
    ($($name:ident, $null:ident, $discarding:literal;)*) => {$(
        /// # Safety
        /// `dptrs` and `sizes` hold `count` entries, `prefetchLocs` and `prefetchLocIdxs`
        /// `numPrefetchLocs`.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(
            dptrs: *const CUdeviceptr,
            sizes: *const usize,
            count: usize,
            prefetch_locations: *const Location,
            prefetch_location_starts: *const usize,
            prefetch_locations_count: usize,
            flags: u64,
            stream: CUstream,
        ) -> CUresult {
            // SAFETY: the same contract.
            unsafe {
                batch(
                    stringify!($name),
                    $discarding,
                    dptrs,
                    sizes,
                    count,
                    prefetch_locations,
                    prefetch_location_starts,
                    prefetch_locations_count,
                    flags,
                    stream,
                    NullStream::$null,
                )
            }
        }
    )*};
}

prefetch_batches! {
    cuMemPrefetchBatchAsync, Legacy, false;
    cuMemPrefetchBatchAsync_ptsz, PerThread, false;
    cuMemDiscardAndPrefetchBatchAsync, Legacy, true;
    cuMemDiscardAndPrefetchBatchAsync_ptsz, PerThread, true;
}

/// # Safety
/// `dptrs` and `sizes` hold `count` entries.
unsafe fn discard_batch(
    dptrs: *const CUdeviceptr,
    sizes: *const usize,
    count: usize,
    flags: u64,
    stream: CUstream,
    null: NullStream,
) -> CUresult {
    entry("cuMemDiscardBatchAsync", || {
        let stream = batch_stream(flags, stream, null)?;
        // SAFETY: the caller's arrays.
        for operand in unsafe { operands(dptrs, sizes, count) }? {
            discard(&stream, &operand);
        }
        Ok(())
    })
}

/// # Safety
/// `dptrs` and `sizes` hold `count` entries.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemDiscardBatchAsync(
    dptrs: *const CUdeviceptr,
    sizes: *const usize,
    count: usize,
    flags: u64,
    stream: CUstream,
) -> CUresult {
    // SAFETY: the same contract.
    unsafe { discard_batch(dptrs, sizes, count, flags, stream, NullStream::Legacy) }
}

/// # Safety
/// `dptrs` and `sizes` hold `count` entries.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemDiscardBatchAsync_ptsz(
    dptrs: *const CUdeviceptr,
    sizes: *const usize,
    count: usize,
    flags: u64,
    stream: CUstream,
) -> CUresult {
    // SAFETY: the same contract.
    unsafe { discard_batch(dptrs, sizes, count, flags, stream, NullStream::PerThread) }
}
