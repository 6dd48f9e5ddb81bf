//! Stream-ordered allocation: each device's default memory pool, `cuMemAllocAsync` and
//! `cuMemFreeAsync`.
//!
//! An allocation is usable by work ordered after it on its stream (or after an event recorded
//! there); its free happens when its stream reaches it. With `DEVBUF_CUDA_TEST_POOL_REUSE=immediate`
//! the pool hands the block freed last to the next allocation that fits, on any stream, at once,
//! ordering the new allocation after the free as the real pool's internal dependencies do: a
//! consumer that touches the new allocation without waiting on its stream races the previous
//! owner's work, and is caught.

use std::ffi::c_void;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use cudarc::driver::sys::{CUdevice, CUdeviceptr, CUmemoryPool, CUresult, CUstream};
use parking_lot::Mutex;

use crate::config::config;
use crate::device::{entry, ordinal};
use crate::errors::{DriverResult, write_out};
use crate::memory::{self, Kind, NewAllocation, Origin, Record, State};
use crate::ops::Op;
use crate::stream::{self, Dependency};

pub(crate) struct Pool {
    ordinal: usize,
    /// `CU_MEMPOOL_ATTR_REUSE_*` (1–3), all on by default.
    reuse: Mutex<[i32; 3]>,
    release_threshold: AtomicU64,
    /// The block freed last and the point of its free (for immediate reuse).
    just_freed: Mutex<Option<(Arc<Record>, Dependency)>>,
}

fn pools() -> &'static [Pool] {
    static POOLS: OnceLock<Box<[Pool]>> = OnceLock::new();
    POOLS.get_or_init(|| {
        (0..config().devices as usize)
            .map(|ordinal| Pool {
                ordinal,
                reuse: Mutex::new([1; 3]),
                release_threshold: AtomicU64::new(0),
                just_freed: Mutex::new(None),
            })
            .collect()
    })
}

impl Pool {
    pub fn handle(&'static self) -> CUmemoryPool {
        (self as *const Pool).cast_mut().cast()
    }
}

/// The default pool of device `ordinal`, the one every stream-ordered allocation comes from.
pub(crate) fn default_pool(ordinal: usize) -> &'static Pool {
    &pools()[ordinal]
}

fn find(handle: CUmemoryPool) -> DriverResult<&'static Pool> {
    pools()
        .iter()
        .find(|pool| pool.handle() == handle)
        .ok_or(CUresult::CUDA_ERROR_INVALID_VALUE)
}

/// The entry points of the stream-ordered allocator (CUDA 11.2), which the `old-driver` build
/// lacks.
pub(crate) const STREAM_ORDERED_ALLOCATOR: &[&str] = &[
    "cuMemAllocAsync",
    "cuMemFreeAsync",
    "cuDeviceGetDefaultMemPool",
    "cuDeviceGetMemPool",
    "cuMemPoolSetAttribute",
    "cuMemPoolGetAttribute",
    "cuMemPoolTrimTo",
];

fn supported() -> DriverResult {
    if config().memory_pools {
        Ok(())
    } else {
        Err(CUresult::CUDA_ERROR_NOT_SUPPORTED)
    }
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
    entry("cuMemAllocAsync", || {
        let stream = stream::resolve(stream)?;
        supported()?;
        if size == 0 || pointer.is_null() {
            return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
        }
        memory::count_allocation_call()?;
        let context = stream.context;
        let pool = default_pool(context.ordinal);
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
        let (record, after) = match reused {
            Some((block, freed)) => (memory::reassign(&block, size, context), vec![freed]),
            None => (
                memory::allocate(NewAllocation {
                    size,
                    kind: Kind::Device,
                    context,
                    host_flags: 0,
                    origin: Origin::Pooled,
                    state: State::AllocationPending,
                })?,
                vec![],
            ),
        };
        stream.enqueue(Op::Allocate(Arc::clone(&record)), after);
        // SAFETY: the caller's out-pointer, checked non-null.
        unsafe { write_out(pointer, record.start) }
    })
}

// Not exported by the `old-driver` build: a driver older than CUDA 11.2 lacks them.
#[cfg_attr(not(feature = "old-driver"), unsafe(no_mangle))]
pub extern "C" fn cuMemFreeAsync(pointer: CUdeviceptr, stream: CUstream) -> CUresult {
    entry("cuMemFreeAsync", || {
        let stream = stream::resolve(stream)?;
        let record = crate::alloc::allocation_at(pointer, &[Kind::Device])?;
        if record.free_requested.swap(true, Ordering::AcqRel) {
            return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
        }
        let sequence = stream.enqueue(Op::Free(Arc::clone(&record)), vec![]);
        if config().immediate_pool_reuse && record.origin == Origin::Pooled {
            let pool = default_pool(record.context.ordinal);
            *pool.just_freed.lock() = Some((record, Dependency { stream, sequence }));
        }
        Ok(())
    })
}

/// # Safety
/// `pool` is null or valid for writing a CUmemoryPool.
// Not exported by the `old-driver` build: a driver older than CUDA 11.2 lacks them.
#[cfg_attr(not(feature = "old-driver"), unsafe(no_mangle))]
pub unsafe extern "C" fn cuDeviceGetDefaultMemPool(
    pool: *mut CUmemoryPool,
    device: CUdevice,
) -> CUresult {
    entry("cuDeviceGetDefaultMemPool", || {
        let ordinal = ordinal(device)?;
        supported()?;
        // SAFETY: the caller's out-pointer.
        unsafe { write_out(pool, default_pool(ordinal).handle()) }
    })
}

/// The current pool is always the default one: the double has no `cuMemPoolCreate`.
///
/// # Safety
/// `pool` is null or valid for writing a CUmemoryPool.
// Not exported by the `old-driver` build: a driver older than CUDA 11.2 lacks them.
#[cfg_attr(not(feature = "old-driver"), unsafe(no_mangle))]
pub unsafe extern "C" fn cuDeviceGetMemPool(pool: *mut CUmemoryPool, device: CUdevice) -> CUresult {
    // SAFETY: the same contract.
    unsafe { cuDeviceGetDefaultMemPool(pool, device) }
}

const REUSE_FOLLOW_EVENT_DEPENDENCIES: u32 = 1;
const REUSE_ALLOW_INTERNAL_DEPENDENCIES: u32 = 3;
const RELEASE_THRESHOLD: u32 = 4;
const RESERVED_MEM_CURRENT: u32 = 5;
const RESERVED_MEM_HIGH: u32 = 6;
const USED_MEM_HIGH: u32 = 8;

/// # Safety
/// `value` points at an int (attributes 1–3) or a cuuint64_t (4–8), as the attribute says.
// Not exported by the `old-driver` build: a driver older than CUDA 11.2 lacks them.
#[cfg_attr(not(feature = "old-driver"), unsafe(no_mangle))]
pub unsafe extern "C" fn cuMemPoolSetAttribute(
    pool: CUmemoryPool,
    attribute: u32,
    value: *mut c_void,
) -> CUresult {
    entry("cuMemPoolSetAttribute", || {
        let pool = find(pool)?;
        if value.is_null() {
            return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
        }
        match attribute {
            REUSE_FOLLOW_EVENT_DEPENDENCIES..=REUSE_ALLOW_INTERNAL_DEPENDENCIES => {
                // SAFETY: the attribute's value is an int (the caller's contract).
                let flag = unsafe { value.cast::<i32>().read_unaligned() };
                pool.reuse.lock()[attribute as usize - 1] = flag;
            }
            RELEASE_THRESHOLD => {
                // SAFETY: the attribute's value is a cuuint64_t (the caller's contract).
                let threshold = unsafe { value.cast::<u64>().read_unaligned() };
                pool.release_threshold.store(threshold, Ordering::Release);
            }
            // The high-water marks may only be reset to 0.
            RESERVED_MEM_HIGH | USED_MEM_HIGH => {
                // SAFETY: the attribute's value is a cuuint64_t (the caller's contract).
                if unsafe { value.cast::<u64>().read_unaligned() } != 0 {
                    return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
                }
            }
            _ => return Err(CUresult::CUDA_ERROR_INVALID_VALUE),
        }
        Ok(())
    })
}

/// The reserved and used figures are the device's memory in use: the double keeps no cache.
///
/// # Safety
/// `value` points at an int (attributes 1–3) or a cuuint64_t (4–8), as the attribute says.
// Not exported by the `old-driver` build: a driver older than CUDA 11.2 lacks them.
#[cfg_attr(not(feature = "old-driver"), unsafe(no_mangle))]
pub unsafe extern "C" fn cuMemPoolGetAttribute(
    pool: CUmemoryPool,
    attribute: u32,
    value: *mut c_void,
) -> CUresult {
    entry("cuMemPoolGetAttribute", || {
        let pool = find(pool)?;
        match attribute {
            REUSE_FOLLOW_EVENT_DEPENDENCIES..=REUSE_ALLOW_INTERNAL_DEPENDENCIES => {
                let flag = pool.reuse.lock()[attribute as usize - 1];
                // SAFETY: the caller's out-pointer for an int.
                unsafe { write_out(value.cast::<i32>(), flag) }
            }
            RELEASE_THRESHOLD => {
                let threshold = pool.release_threshold.load(Ordering::Acquire);
                // SAFETY: the caller's out-pointer for a cuuint64_t.
                unsafe { write_out(value.cast::<u64>(), threshold) }
            }
            RESERVED_MEM_CURRENT..=USED_MEM_HIGH => {
                let used = memory::used(pool.ordinal) as u64;
                // SAFETY: the caller's out-pointer for a cuuint64_t.
                unsafe { write_out(value.cast::<u64>(), used) }
            }
            _ => Err(CUresult::CUDA_ERROR_INVALID_VALUE),
        }
    })
}

/// Nothing is cached, so there is nothing to trim.
// Not exported by the `old-driver` build: a driver older than CUDA 11.2 lacks them.
#[cfg_attr(not(feature = "old-driver"), unsafe(no_mangle))]
pub extern "C" fn cuMemPoolTrimTo(pool: CUmemoryPool, _min_bytes_to_keep: usize) -> CUresult {
    entry("cuMemPoolTrimTo", || find(pool).map(drop))
}
