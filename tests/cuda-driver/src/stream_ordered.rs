//! Stream-ordered allocation from memory pools: `cuMemAllocAsync` (the device's current pool),
//! `cuMemAllocFromPoolAsync` and `cuMemFreeAsync`, and their `_ptsz` variants.
//!
//! An allocation is usable by work ordered after it on its stream (or after an event recorded
//! there); its free happens when its stream reaches it. Pool memory belongs to the pool's device,
//! not to a context (see [`crate::memory`]). With `DEVBUF_CUDA_TEST_POOL_REUSE=immediate` a pool
//! hands the block freed last to the next allocation that fits, on any stream, at once, ordering
//! the new allocation after the free as the real pool's internal dependencies do: a consumer that
//! touches the new allocation without waiting on its stream races the previous owner's work, and
//! is caught.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use cudarc::driver::sys::{CUdeviceptr, CUmemoryPool, CUresult, CUstream};

use crate::config::config;
use crate::context;
use crate::device::entry;
use crate::errors::{DriverResult, write_out};
use crate::managed_hints::RangeHints;
use crate::memory::{self, Kind, NewAllocation, Origin, State};
use crate::ops::Op;
use crate::pool::{Pool, current_pools, find, supported};
use crate::stream::{self, Dependency};

/// Allocates `size` bytes from `pool`, ordered on `stream`: device memory, or managed memory from a
/// managed pool, whose pages prefer the pool's location. A size of 0 allocates nothing and
/// returns a NULL pointer: the driver documents no error for it (unlike `cuMemAlloc`'s "If
/// bytesize is 0, cuMemAlloc() returns CUDA_ERROR_INVALID_VALUE"), and cuda.core allocates
/// zero-size buffers from its pools.
///
/// # Safety
/// `pointer` is null or valid for writing a CUdeviceptr.
unsafe fn allocate_from(
    pointer: *mut CUdeviceptr,
    size: usize,
    pool: &'static Pool,
    stream: &Arc<stream::Stream>,
) -> DriverResult {
    if pointer.is_null() {
        return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
    }
    if size == 0 {
        // SAFETY: the caller's out-pointer, checked non-null.
        return unsafe { write_out(pointer, 0) };
    }
    memory::count_allocation_call()?;
    if pool.max_size != 0 && pool.used() + size as u64 > pool.max_size {
        return Err(CUresult::CUDA_ERROR_OUT_OF_MEMORY);
    }
    let reused = config()
        .immediate_pool_reuse
        .then(|| {
            let mut just_freed = pool.just_freed.lock();
            let fits = just_freed
                .as_ref()
                .is_some_and(|(block, _)| block.size >= size);
            if fits { just_freed.take() } else { None }
        })
        .flatten();
    let reusing = reused.is_some();
    let (record, after) = match reused {
        Some((block, freed)) => (memory::reassign(&block, size), vec![freed]),
        None => (
            memory::allocate(NewAllocation {
                size,
                kind: match pool.is_managed() {
                    true => Kind::Managed,
                    false => Kind::Device,
                },
                // A context of the pool's device (the primary one, whatever is current); for a
                // managed pool that prefers no device, of the stream's.
                context: context::primary(pool.device().unwrap_or(stream.context.ordinal)),
                host_flags: 0,
                origin: Origin::Pooled(pool.id()),
                state: State::AllocationPending,
            })?,
            vec![],
        ),
    };
    if pool.is_managed() {
        *record.hints.lock() = RangeHints::new(pool.location);
    }
    if !reusing {
        // Memory the pool keeps serves the allocation first.
        pool.reuse_kept(size);
    }
    pool.used_high.fetch_max(pool.used(), Ordering::AcqRel);
    pool.reserved_high
        .fetch_max(pool.reserved(), Ordering::AcqRel);
    stream.enqueue(Op::Allocate(Arc::clone(&record)), after);
    // SAFETY: the caller's out-pointer, checked non-null.
    unsafe { write_out(pointer, record.start) }
}

/// # Safety
/// `pointer` is null or valid for writing a CUdeviceptr.
// Not exported by the `old-driver` build: a driver older than CUDA 11.2 lacks them.
#[cfg_attr(not(feature = "old-driver"), unsafe(no_mangle))]
pub unsafe extern "C" fn cuMemAllocAsync(
    pointer: *mut CUdeviceptr,
    size: usize,
    stream: CUstream,
) -> CUresult {
    // SAFETY: the same contract.
    unsafe { alloc_async(pointer, size, stream, stream::NullStream::Legacy) }
}

/// # Safety
/// As for [`cuMemAllocAsync`].
#[cfg_attr(not(feature = "old-driver"), unsafe(no_mangle))]
pub unsafe extern "C" fn cuMemAllocAsync_ptsz(
    pointer: *mut CUdeviceptr,
    size: usize,
    stream: CUstream,
) -> CUresult {
    // SAFETY: the same contract.
    unsafe { alloc_async(pointer, size, stream, stream::NullStream::PerThread) }
}

/// # Safety
/// As for [`cuMemAllocAsync`].
unsafe fn alloc_async(
    pointer: *mut CUdeviceptr,
    size: usize,
    stream: CUstream,
    null: stream::NullStream,
) -> CUresult {
    entry("cuMemAllocAsync", || {
        let stream = stream::resolve_as(stream, null)?;
        supported()?;
        // "The allocation comes from the memory pool current to the stream's device."
        let pool = current_pools().lock()[stream.context.ordinal];
        // SAFETY: the caller's out-pointer.
        unsafe { allocate_from(pointer, size, pool, &stream) }
    })
}

/// # Safety
/// `pointer` is null or valid for writing a CUdeviceptr.
#[cfg_attr(not(feature = "old-driver"), unsafe(no_mangle))]
pub unsafe extern "C" fn cuMemAllocFromPoolAsync(
    pointer: *mut CUdeviceptr,
    size: usize,
    pool: CUmemoryPool,
    stream: CUstream,
) -> CUresult {
    // SAFETY: the same contract.
    unsafe { alloc_from_pool_async(pointer, size, pool, stream, stream::NullStream::Legacy) }
}

/// # Safety
/// As for [`cuMemAllocFromPoolAsync`].
#[cfg_attr(not(feature = "old-driver"), unsafe(no_mangle))]
pub unsafe extern "C" fn cuMemAllocFromPoolAsync_ptsz(
    pointer: *mut CUdeviceptr,
    size: usize,
    pool: CUmemoryPool,
    stream: CUstream,
) -> CUresult {
    // SAFETY: the same contract.
    unsafe { alloc_from_pool_async(pointer, size, pool, stream, stream::NullStream::PerThread) }
}

/// # Safety
/// As for [`cuMemAllocFromPoolAsync`].
unsafe fn alloc_from_pool_async(
    pointer: *mut CUdeviceptr,
    size: usize,
    pool: CUmemoryPool,
    stream: CUstream,
    null: stream::NullStream,
) -> CUresult {
    entry("cuMemAllocFromPoolAsync", || {
        let stream = stream::resolve_as(stream, null)?;
        supported()?;
        let pool = find(pool)?;
        // SAFETY: the caller's out-pointer.
        unsafe { allocate_from(pointer, size, pool, &stream) }
    })
}

fn free_async(pointer: CUdeviceptr, stream: CUstream, null: stream::NullStream) -> CUresult {
    entry("cuMemFreeAsync", || {
        let stream = stream::resolve_as(stream, null)?;
        // The NULL pointer of a zero-size allocation: nothing to free.
        if pointer == 0 {
            return Ok(());
        }
        let record = crate::alloc::allocation_at(pointer, &[Kind::Device, Kind::Managed])
            .ok()
            .filter(|record| record.kind == Kind::Device || record.origin != Origin::Allocated)
            .ok_or(CUresult::CUDA_ERROR_INVALID_VALUE)?;
        if record.free_requested.swap(true, Ordering::AcqRel) {
            return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
        }
        let sequence = stream.enqueue(Op::Free(Arc::clone(&record)), vec![]);
        if let Origin::Pooled(pool) = record.origin
            && config().immediate_pool_reuse
        {
            let pool = find(pool as CUmemoryPool)?;
            *pool.just_freed.lock() = Some((record, Dependency { stream, sequence }));
        }
        Ok(())
    })
}

// Not exported by the `old-driver` build: a driver older than CUDA 11.2 lacks them.
#[cfg_attr(not(feature = "old-driver"), unsafe(no_mangle))]
pub extern "C" fn cuMemFreeAsync(pointer: CUdeviceptr, stream: CUstream) -> CUresult {
    free_async(pointer, stream, stream::NullStream::Legacy)
}

#[cfg_attr(not(feature = "old-driver"), unsafe(no_mangle))]
pub extern "C" fn cuMemFreeAsync_ptsz(pointer: CUdeviceptr, stream: CUstream) -> CUresult {
    free_async(pointer, stream, stream::NullStream::PerThread)
}
