//! Memory pools: each device's default pool and pools from `cuMemPoolCreate`, each device's
//! current pool, and what a pool says about itself (attributes, access). The stream-ordered
//! allocations they serve are [`crate::stream_ordered`]'s.

use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use cudarc::driver::sys::{CUdevice, CUmemoryPool, CUresult};
use parking_lot::Mutex;

use crate::config::{config, device_count};
use crate::device::{entry, ordinal};
use crate::errors::{DriverResult, write_out};
use crate::memory::{self, Record};
use crate::stream::Dependency;

/// `CU_MEM_ALLOCATION_TYPE_PINNED` (the only one the double's pools have), `_MANAGED`.
const ALLOCATION_TYPE_PINNED: i32 = 1;
const ALLOCATION_TYPE_MANAGED: i32 = 2;
/// `CU_MEM_LOCATION_TYPE_DEVICE`.
const LOCATION_DEVICE: u32 = 1;
/// `CU_MEM_ACCESS_FLAGS_PROT_NONE`, `CU_MEM_ACCESS_FLAGS_PROT_READWRITE`.
const ACCESS_NONE: u32 = 0;
const ACCESS_READ_WRITE: u32 = 3;

pub(crate) struct Pool {
    pub ordinal: usize,
    /// `None` for a device's default pool; for a created one, whether `cuMemPoolDestroy` ran.
    destroyed: Option<AtomicBool>,
    /// `CU_MEMPOOL_ATTR_MAX_POOL_SIZE` of a created pool; 0 for no limit.
    pub max_size: u64,
    /// `CU_MEMPOOL_ATTR_REUSE_*` (1–3), all on by default.
    reuse: Mutex<[i32; 3]>,
    release_threshold: AtomicU64,
    /// `CU_MEMPOOL_ATTR_USED_MEM_HIGH`; the reserved figures equal the used ones (the double
    /// releases freed memory at once, as a release threshold of 0 does at the next
    /// synchronization).
    pub used_high: AtomicU64,
    pub reserved_high: AtomicU64,
    /// The block freed last and the point of its free (for immediate reuse).
    pub just_freed: Mutex<Option<(Arc<Record>, Dependency)>>,
}

impl Pool {
    fn new(ordinal: usize, created: bool, max_size: u64) -> Pool {
        Pool {
            ordinal,
            destroyed: created.then(|| AtomicBool::new(false)),
            max_size,
            reuse: Mutex::new([1; 3]),
            release_threshold: AtomicU64::new(0),
            used_high: AtomicU64::new(0),
            reserved_high: AtomicU64::new(0),
            just_freed: Mutex::new(None),
        }
    }

    pub fn handle(&'static self) -> CUmemoryPool {
        (self as *const Pool).cast_mut().cast()
    }

    /// The pool's handle as a number (what `memory::Origin::Pooled` holds).
    pub fn id(&'static self) -> usize {
        self.handle() as usize
    }

    /// Bytes of its allocations whose free has not been reached.
    pub fn used(&'static self) -> u64 {
        memory::pool_bytes_in_use(self.id())
    }
}

fn default_pools() -> &'static [Pool] {
    static POOLS: OnceLock<Box<[Pool]>> = OnceLock::new();
    POOLS.get_or_init(|| {
        (0..device_count() as usize)
            .map(|ordinal| Pool::new(ordinal, false, 0))
            .collect()
    })
}

/// Pools from `cuMemPoolCreate`, destroyed or not (a destroyed one's handle stays recognisable).
static CREATED: Mutex<Vec<&'static Pool>> = Mutex::new(Vec::new());

/// Each device's current pool (`cuDeviceSetMemPool`), the one `cuMemAllocAsync` uses.
pub(crate) fn current_pools() -> &'static Mutex<Vec<&'static Pool>> {
    static CURRENT: OnceLock<Mutex<Vec<&'static Pool>>> = OnceLock::new();
    CURRENT.get_or_init(|| Mutex::new(default_pools().iter().collect()))
}

/// The pool a handle names; CUDA_ERROR_INVALID_VALUE for anything else, a destroyed pool included.
pub(crate) fn find(handle: CUmemoryPool) -> DriverResult<&'static Pool> {
    let pool = default_pools()
        .iter()
        .find(|pool| pool.handle() == handle)
        .or_else(|| {
            CREATED
                .lock()
                .iter()
                .copied()
                .find(|pool| pool.handle() == handle)
        })
        .ok_or(CUresult::CUDA_ERROR_INVALID_VALUE)?;
    match &pool.destroyed {
        Some(destroyed) if destroyed.load(Ordering::Acquire) => {
            Err(CUresult::CUDA_ERROR_INVALID_VALUE)
        }
        _ => Ok(pool),
    }
}

/// The entry points of the stream-ordered allocator (CUDA 11.2), which the `old-driver` build
/// lacks.
pub(crate) const STREAM_ORDERED_ALLOCATOR: &[&str] = &[
    "cuMemAllocAsync",
    "cuMemFreeAsync",
    "cuMemAllocFromPoolAsync",
    "cuDeviceGetDefaultMemPool",
    "cuDeviceGetMemPool",
    "cuDeviceSetMemPool",
    "cuMemGetDefaultMemPool",
    "cuMemGetMemPool",
    "cuMemSetMemPool",
    "cuMemPoolCreate",
    "cuMemPoolDestroy",
    "cuMemPoolSetAttribute",
    "cuMemPoolGetAttribute",
    "cuMemPoolGetAccess",
    "cuMemPoolSetAccess",
    "cuMemPoolTrimTo",
];

pub(crate) fn supported() -> DriverResult {
    if config().memory_pools {
        Ok(())
    } else {
        Err(CUresult::CUDA_ERROR_NOT_SUPPORTED)
    }
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
        unsafe { write_out(pool, default_pools()[ordinal].handle()) }
    })
}

/// # Safety
/// `pool` is null or valid for writing a CUmemoryPool.
#[cfg_attr(not(feature = "old-driver"), unsafe(no_mangle))]
pub unsafe extern "C" fn cuDeviceGetMemPool(pool: *mut CUmemoryPool, device: CUdevice) -> CUresult {
    entry("cuDeviceGetMemPool", || {
        let ordinal = ordinal(device)?;
        supported()?;
        let current = current_pools().lock()[ordinal];
        // SAFETY: the caller's out-pointer.
        unsafe { write_out(pool, current.handle()) }
    })
}

/// "The memory pool must be local to the specified device." (CUDA_ERROR_INVALID_VALUE otherwise,
/// the only failure documented.)
#[cfg_attr(not(feature = "old-driver"), unsafe(no_mangle))]
pub extern "C" fn cuDeviceSetMemPool(device: CUdevice, pool: CUmemoryPool) -> CUresult {
    entry("cuDeviceSetMemPool", || {
        let ordinal = ordinal(device)?;
        supported()?;
        let pool = find(pool)?;
        if pool.ordinal != ordinal {
            return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
        }
        current_pools().lock()[ordinal] = pool;
        Ok(())
    })
}

/// `CUmemLocation`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Location {
    pub kind: u32,
    pub id: i32,
}

/// The device a `CUmemLocation` of a pool names: pinned device memory only (the double has no
/// host or managed pools, CUDA_ERROR_NOT_SUPPORTED, as on a device whose
/// `CU_DEVICE_ATTRIBUTE_HOST_MEMORY_POOLS_SUPPORTED` reads 0).
///
/// # Safety
/// `location` is null or valid for reading a CUmemLocation.
unsafe fn pool_device(location: *const Location, allocation_type: u32) -> DriverResult<usize> {
    if location.is_null() {
        return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
    }
    match allocation_type as i32 {
        ALLOCATION_TYPE_PINNED => {}
        ALLOCATION_TYPE_MANAGED => return Err(CUresult::CUDA_ERROR_NOT_SUPPORTED),
        _ => return Err(CUresult::CUDA_ERROR_INVALID_VALUE),
    }
    // SAFETY: non-null, valid for reading by the caller's contract.
    let location = unsafe { location.read_unaligned() };
    if location.kind != LOCATION_DEVICE {
        return Err(CUresult::CUDA_ERROR_NOT_SUPPORTED);
    }
    ordinal(location.id)
}

/// CUDA 13's `cuMemGetDefaultMemPool(pool, location, type)`.
///
/// # Safety
/// `pool` is null or valid for writing a CUmemoryPool; `location` null or valid for reading.
#[cfg_attr(not(feature = "old-driver"), unsafe(no_mangle))]
pub unsafe extern "C" fn cuMemGetDefaultMemPool(
    pool: *mut CUmemoryPool,
    location: *const Location,
    allocation_type: u32,
) -> CUresult {
    entry("cuMemGetDefaultMemPool", || {
        supported()?;
        // SAFETY: the caller's pointers.
        let ordinal = unsafe { pool_device(location, allocation_type) }?;
        // SAFETY: the caller's out-pointer.
        unsafe { write_out(pool, default_pools()[ordinal].handle()) }
    })
}

/// CUDA 13's `cuMemGetMemPool(pool, location, type)`.
///
/// # Safety
/// `pool` is null or valid for writing a CUmemoryPool; `location` null or valid for reading.
#[cfg_attr(not(feature = "old-driver"), unsafe(no_mangle))]
pub unsafe extern "C" fn cuMemGetMemPool(
    pool: *mut CUmemoryPool,
    location: *const Location,
    allocation_type: u32,
) -> CUresult {
    entry("cuMemGetMemPool", || {
        supported()?;
        // SAFETY: the caller's pointers.
        let ordinal = unsafe { pool_device(location, allocation_type) }?;
        let current = current_pools().lock()[ordinal];
        // SAFETY: the caller's out-pointer.
        unsafe { write_out(pool, current.handle()) }
    })
}

/// CUDA 13's `cuMemSetMemPool(location, type, pool)`.
///
/// # Safety
/// `location` is null or valid for reading a CUmemLocation.
#[cfg_attr(not(feature = "old-driver"), unsafe(no_mangle))]
pub unsafe extern "C" fn cuMemSetMemPool(
    location: *const Location,
    allocation_type: u32,
    pool: CUmemoryPool,
) -> CUresult {
    entry("cuMemSetMemPool", || {
        supported()?;
        // SAFETY: the caller's pointer.
        let ordinal = unsafe { pool_device(location, allocation_type) }?;
        let pool = find(pool)?;
        if pool.ordinal != ordinal {
            return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
        }
        current_pools().lock()[ordinal] = pool;
        Ok(())
    })
}

/// `CUmemPoolProps` (CUDA 12.6 and later; earlier versions reserve the same bytes).
#[repr(C)]
pub struct PoolProps {
    allocation_type: u32,
    handle_types: u32,
    location: Location,
    win32_security_attributes: *mut c_void,
    max_size: usize,
    usage: u16,
    reserved: [u8; 54],
}

/// A pool of device memory. Exportable pools (`handleTypes` other than none) are not modelled:
/// CUDA_ERROR_NOT_SUPPORTED, as on a device whose `CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES`
/// is 0 (the double's).
///
/// # Safety
/// `pool` is null or valid for writing a CUmemoryPool; `props` null or valid for reading a
/// CUmemPoolProps.
#[cfg_attr(not(feature = "old-driver"), unsafe(no_mangle))]
pub unsafe extern "C" fn cuMemPoolCreate(
    pool: *mut CUmemoryPool,
    props: *const PoolProps,
) -> CUresult {
    entry("cuMemPoolCreate", || {
        supported()?;
        if props.is_null() || pool.is_null() {
            return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
        }
        // SAFETY: non-null, valid for reading by the caller's contract.
        let props = unsafe { props.read_unaligned() };
        // SAFETY: a field of the props read above.
        let ordinal = unsafe { pool_device(&props.location, props.allocation_type) }?;
        if props.handle_types != 0 {
            return Err(CUresult::CUDA_ERROR_NOT_SUPPORTED);
        }
        let created: &'static Pool =
            Box::leak(Box::new(Pool::new(ordinal, true, props.max_size as u64)));
        CREATED.lock().push(created);
        // SAFETY: the caller's out-pointer, checked non-null.
        unsafe { write_out(pool, created.handle()) }
    })
}

/// "If any pointers obtained from this pool haven't been freed or the pool has free operations
/// that haven't completed when cuMemPoolDestroy is invoked, the function will return immediately
/// and the resources associated with the pool will be released automatically once there are no
/// more outstanding allocations." A device's default pool cannot be destroyed.
#[cfg_attr(not(feature = "old-driver"), unsafe(no_mangle))]
pub extern "C" fn cuMemPoolDestroy(pool: CUmemoryPool) -> CUresult {
    entry("cuMemPoolDestroy", || {
        let pool = find(pool)?;
        let Some(destroyed) = &pool.destroyed else {
            return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
        };
        destroyed.store(true, Ordering::Release);
        // "Destroying the current mempool of a device sets the default mempool of that device as
        // the current mempool for that device."
        let mut current = current_pools().lock();
        if std::ptr::eq(current[pool.ordinal], pool) {
            current[pool.ordinal] = &default_pools()[pool.ordinal];
        }
        Ok(())
    })
}

const REUSE_FOLLOW_EVENT_DEPENDENCIES: u32 = 1;
const REUSE_ALLOW_INTERNAL_DEPENDENCIES: u32 = 3;
const RELEASE_THRESHOLD: u32 = 4;
const RESERVED_MEM_CURRENT: u32 = 5;
const RESERVED_MEM_HIGH: u32 = 6;
const USED_MEM_CURRENT: u32 = 7;
const USED_MEM_HIGH: u32 = 8;
const ALLOCATION_TYPE: u32 = 9;
const EXPORT_HANDLE_TYPES: u32 = 10;
const LOCATION_ID: u32 = 11;
const LOCATION_TYPE: u32 = 12;
const MAX_POOL_SIZE: u32 = 13;
const HW_DECOMPRESS_ENABLED: u32 = 14;

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
            // The high watermarks are "since the last time it was reset", and only 0 resets them;
            // reset, they start again from what is in use now.
            RESERVED_MEM_HIGH | USED_MEM_HIGH => {
                // SAFETY: the attribute's value is a cuuint64_t (the caller's contract).
                if unsafe { value.cast::<u64>().read_unaligned() } != 0 {
                    return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
                }
                let mark = match attribute {
                    USED_MEM_HIGH => &pool.used_high,
                    _ => &pool.reserved_high,
                };
                mark.store(pool.used(), Ordering::Release);
            }
            _ => return Err(CUresult::CUDA_ERROR_INVALID_VALUE),
        }
        Ok(())
    })
}

/// # Safety
/// `value` points at the attribute's C type: an int for 1–3 and 9–12 and 14, a cuuint64_t for
/// 4–8 and 13.
// Not exported by the `old-driver` build: a driver older than CUDA 11.2 lacks them.
#[cfg_attr(not(feature = "old-driver"), unsafe(no_mangle))]
pub unsafe extern "C" fn cuMemPoolGetAttribute(
    pool: CUmemoryPool,
    attribute: u32,
    value: *mut c_void,
) -> CUresult {
    entry("cuMemPoolGetAttribute", || {
        let pool = find(pool)?;
        let int = |number: i32| {
            // SAFETY: the caller's out-pointer for an int.
            unsafe { write_out(value.cast::<i32>(), number) }
        };
        let wide = |number: u64| {
            // SAFETY: the caller's out-pointer for a cuuint64_t.
            unsafe { write_out(value.cast::<u64>(), number) }
        };
        match attribute {
            REUSE_FOLLOW_EVENT_DEPENDENCIES..=REUSE_ALLOW_INTERNAL_DEPENDENCIES => {
                int(pool.reuse.lock()[attribute as usize - 1])
            }
            RELEASE_THRESHOLD => wide(pool.release_threshold.load(Ordering::Acquire)),
            // Freed memory goes back at once: what is reserved is what is in use.
            RESERVED_MEM_CURRENT | USED_MEM_CURRENT => wide(pool.used()),
            RESERVED_MEM_HIGH => wide(pool.reserved_high.load(Ordering::Acquire)),
            USED_MEM_HIGH => wide(pool.used_high.load(Ordering::Acquire)),
            ALLOCATION_TYPE => int(ALLOCATION_TYPE_PINNED),
            EXPORT_HANDLE_TYPES | HW_DECOMPRESS_ENABLED => int(0),
            LOCATION_ID => int(pool.ordinal as i32),
            LOCATION_TYPE => int(LOCATION_DEVICE as i32),
            MAX_POOL_SIZE => wide(pool.max_size),
            _ => Err(CUresult::CUDA_ERROR_INVALID_VALUE),
        }
    })
}

/// The pool's own device reads and writes its memory; no other device has access (the double has
/// no peer mappings, see [`cuMemPoolSetAccess`]).
///
/// # Safety
/// `flags` is null or valid for writing a CUmemAccess_flags; `location` null or valid for reading.
#[cfg_attr(not(feature = "old-driver"), unsafe(no_mangle))]
pub unsafe extern "C" fn cuMemPoolGetAccess(
    flags: *mut u32,
    pool: CUmemoryPool,
    location: *const Location,
) -> CUresult {
    entry("cuMemPoolGetAccess", || {
        let pool = find(pool)?;
        if location.is_null() {
            return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
        }
        // SAFETY: non-null, valid for reading by the caller's contract.
        let location = unsafe { location.read_unaligned() };
        if location.kind != LOCATION_DEVICE {
            return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
        }
        let access = if ordinal(location.id)? == pool.ordinal {
            ACCESS_READ_WRITE
        } else {
            ACCESS_NONE
        };
        // SAFETY: the caller's out-pointer.
        unsafe { write_out(flags, access) }
    })
}

/// `CUmemAccessDesc`.
#[repr(C)]
pub struct AccessDesc {
    location: Location,
    flags: u32,
}

/// "Controls visibility of pools between devices": the pool's own device keeps read-write access,
/// and no other device can be given any (the double has no peer access: `cuDeviceCanAccessPeer`
/// answers 0), so granting it is CUDA_ERROR_NOT_SUPPORTED and revoking it a no-op.
///
/// # Safety
/// `map` holds `count` descriptors (or is null when `count` is 0).
#[cfg_attr(not(feature = "old-driver"), unsafe(no_mangle))]
pub unsafe extern "C" fn cuMemPoolSetAccess(
    pool: CUmemoryPool,
    map: *const AccessDesc,
    count: usize,
) -> CUresult {
    entry("cuMemPoolSetAccess", || {
        let pool = find(pool)?;
        if map.is_null() && count != 0 {
            return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
        }
        for index in 0..count {
            // SAFETY: `map` holds `count` descriptors (the caller's contract).
            let desc = unsafe { map.add(index).read_unaligned() };
            if desc.location.kind != LOCATION_DEVICE {
                return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
            }
            let own = ordinal(desc.location.id)? == pool.ordinal;
            match (own, desc.flags) {
                (true, ACCESS_READ_WRITE) | (false, ACCESS_NONE) => {}
                (true, _) => return Err(CUresult::CUDA_ERROR_INVALID_VALUE),
                (false, _) => return Err(CUresult::CUDA_ERROR_NOT_SUPPORTED),
            }
        }
        Ok(())
    })
}

/// Nothing is cached, so there is nothing to trim.
// Not exported by the `old-driver` build: a driver older than CUDA 11.2 lacks them.
#[cfg_attr(not(feature = "old-driver"), unsafe(no_mangle))]
pub extern "C" fn cuMemPoolTrimTo(pool: CUmemoryPool, _min_bytes_to_keep: usize) -> CUresult {
    entry("cuMemPoolTrimTo", || find(pool).map(drop))
}
