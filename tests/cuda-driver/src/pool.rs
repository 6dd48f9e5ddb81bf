//! Memory pools: each device's default pool of device memory, the default managed pools, pools
//! from `cuMemPoolCreate`, and the current pool of each device and location. What a pool says
//! about itself is [`crate::pool_attributes`]'s; the stream-ordered allocations it serves are
//! [`crate::stream_ordered`]'s.
//!
//! Managed pools (CUDA 13) as documented for `cuMemPoolCreate`: "To create a managed memory pool,
//! applications must set CUmemPoolProps::CUmemAllocationType to CU_MEM_ALLOCATION_TYPE_MANAGED.
//! CUmemPoolProps::CUmemAllocationHandleType must also be set to CU_MEM_HANDLE_TYPE_NONE since IPC
//! is not supported. For managed memory pools, CUmemPoolProps::CUmemLocation will be treated as
//! the preferred location for all allocations created from the pool. An application can also set
//! CU_MEM_LOCATION_TYPE_NONE to indicate no preferred location. CUmemPoolProps::maxSize must be
//! set to zero for managed memory pools. [...] For managed memory pools, all devices on the system
//! must have non-zero concurrentManagedAccess. If not, this call returns CUDA_ERROR_NOT_SUPPORTED".
//! Host pools (`CU_MEM_LOCATION_TYPE_HOST`/`_HOST_NUMA` with pinned memory) are not modelled:
//! CUDA_ERROR_NOT_SUPPORTED, as on a device whose `CU_DEVICE_ATTRIBUTE_HOST_MEMORY_POOLS_SUPPORTED`
//! reads 0 (the double's).

use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use cudarc::driver::sys::{CUdevice, CUmemoryPool, CUresult};
use parking_lot::Mutex;

use crate::config::{config, device_count};
use crate::device::{entry, ordinal};
use crate::errors::{DriverResult, write_out};
use crate::location::{
    LOCATION_DEVICE, LOCATION_HOST, LOCATION_HOST_NUMA, LOCATION_NONE, Location,
};
use crate::memory::{self, Record};
use crate::stream::Dependency;

/// `CU_MEM_ALLOCATION_TYPE_PINNED` (device memory, for a pool on a device), `_MANAGED`.
pub(crate) const ALLOCATION_TYPE_PINNED: i32 = 1;
pub(crate) const ALLOCATION_TYPE_MANAGED: i32 = 2;

pub(crate) struct Pool {
    /// `CU_MEM_ALLOCATION_TYPE_PINNED` or `_MANAGED`.
    pub allocation_type: i32,
    /// A pinned pool's device; a managed pool's preferred location (none, a device, the host or
    /// host NUMA node 0).
    pub location: Location,
    /// `None` for a default pool; for a created one, whether `cuMemPoolDestroy` ran.
    destroyed: Option<AtomicBool>,
    /// `CU_MEMPOOL_ATTR_MAX_POOL_SIZE` of a created pool; 0 for no limit.
    pub max_size: u64,
    /// `CU_MEMPOOL_ATTR_REUSE_*` (1–3), all on by default.
    pub reuse: Mutex<[i32; 3]>,
    pub release_threshold: AtomicU64,
    /// `CU_MEMPOOL_ATTR_USED_MEM_HIGH`, `CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH`.
    pub used_high: AtomicU64,
    pub reserved_high: AtomicU64,
    /// The other devices `cuMemPoolSetAccess` gave read-write access to a pool of device memory.
    pub peers: Mutex<Vec<usize>>,
    /// The block freed last and the point of its free (for immediate reuse).
    pub just_freed: Mutex<Option<(Arc<Record>, Dependency)>>,
}

impl Pool {
    fn new(allocation_type: i32, location: Location, created: bool, max_size: u64) -> Pool {
        Pool {
            allocation_type,
            location,
            destroyed: created.then(|| AtomicBool::new(false)),
            max_size,
            reuse: Mutex::new([1; 3]),
            release_threshold: AtomicU64::new(0),
            used_high: AtomicU64::new(0),
            reserved_high: AtomicU64::new(0),
            peers: Mutex::new(Vec::new()),
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

    pub fn is_managed(&self) -> bool {
        self.allocation_type == ALLOCATION_TYPE_MANAGED
    }

    /// The device the pool is on: a pinned pool's, or the one a managed pool prefers.
    pub fn device(&self) -> Option<usize> {
        (self.location.kind == LOCATION_DEVICE).then_some(self.location.id as usize)
    }

    /// Whether device `ordinal` may touch the pool's memory: its own device, a peer given access,
    /// or any device for a managed pool. Programming Guide, "Stream Ordered Memory Allocator",
    /// "Device Accessibility for Multi-GPU Support": "memory pool allocation accessibility does
    /// not follow cudaDeviceEnablePeerAccess or cuCtxEnablePeerAccess. Instead, the API
    /// cudaMemPoolSetAccess modifies what devices can access allocations from a pool."
    pub fn accessible_by(&self, ordinal: usize) -> bool {
        self.is_managed() || self.device() == Some(ordinal) || self.peers.lock().contains(&ordinal)
    }

    /// Bytes of its allocations whose free has not been reached.
    pub fn used(&'static self) -> u64 {
        memory::pool_bytes_in_use(self.id())
    }

    /// Bytes freed (the free reached in stream order) that the pool still holds: reserved but not
    /// used, until a synchronization releases them above the release threshold (see
    /// [`release_over_thresholds`]) or `cuMemPoolTrimTo` trims them; reused by later allocations.
    pub fn kept(&'static self) -> u64 {
        memory::pool_bytes_kept(self.id())
    }

    /// `CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT`: what is used and what the pool keeps.
    pub fn reserved(&'static self) -> u64 {
        self.used() + self.kept()
    }

    /// Keeps at most `limit` bytes reserved: gives back what it keeps above that.
    pub fn release_above(&'static self, limit: u64) {
        let keep = limit.saturating_sub(self.used());
        memory::change_pool_bytes_kept(self.id(), |kept| kept.min(keep));
    }

    /// An allocation of `size` bytes takes what it can of the memory the pool keeps.
    pub fn reuse_kept(&'static self, size: usize) {
        memory::change_pool_bytes_kept(self.id(), |kept| kept.saturating_sub(size as u64));
    }
}

/// `CU_MEMPOOL_ATTR_RELEASE_THRESHOLD`: "Amount of reserved memory in bytes to hold onto before
/// trying to release memory back to the OS. When more than the release threshold bytes of memory
/// are held by the memory pool, the allocator will try to release memory back to the OS on the
/// next call to stream, event or context synchronize. (default 0)". Called by those three.
pub(crate) fn release_over_thresholds() {
    let others: Vec<&'static Pool> = OTHER_POOLS.lock().clone();
    for pool in default_pools().iter().chain(others) {
        pool.release_above(pool.release_threshold.load(Ordering::Acquire));
    }
}

/// Each device's default pool of device memory.
fn default_pools() -> &'static [Pool] {
    static POOLS: OnceLock<Box<[Pool]>> = OnceLock::new();
    POOLS.get_or_init(|| {
        (0..device_count() as usize)
            .map(|ordinal| Pool::new(ALLOCATION_TYPE_PINNED, Location::device(ordinal), false, 0))
            .collect()
    })
}

/// Pools from `cuMemPoolCreate` and the default managed pools (one per location, made when first
/// asked for); a destroyed pool's handle stays recognisable.
static OTHER_POOLS: Mutex<Vec<&'static Pool>> = Mutex::new(Vec::new());

fn leak(pool: Pool) -> &'static Pool {
    let pool: &'static Pool = Box::leak(Box::new(pool));
    OTHER_POOLS.lock().push(pool);
    pool
}

/// The default managed pool for `location`.
fn default_managed_pool(location: Location) -> &'static Pool {
    static DEFAULTS: Mutex<Vec<&'static Pool>> = Mutex::new(Vec::new());
    let mut defaults = DEFAULTS.lock();
    if let Some(pool) = defaults.iter().find(|pool| pool.location == location) {
        return pool;
    }
    let pool = leak(Pool::new(ALLOCATION_TYPE_MANAGED, location, false, 0));
    defaults.push(pool);
    pool
}

/// Each device's current pool of device memory (`cuDeviceSetMemPool`), the one `cuMemAllocAsync`
/// uses.
pub(crate) fn current_pools() -> &'static Mutex<Vec<&'static Pool>> {
    static CURRENT: OnceLock<Mutex<Vec<&'static Pool>>> = OnceLock::new();
    CURRENT.get_or_init(|| Mutex::new(default_pools().iter().collect()))
}

/// The current managed pool of each location that was given one (`cuMemSetMemPool`); the others'
/// is their default one.
static CURRENT_MANAGED: Mutex<Vec<&'static Pool>> = Mutex::new(Vec::new());

/// The pool a handle names; CUDA_ERROR_INVALID_VALUE for anything else, a destroyed pool included.
pub(crate) fn find(handle: CUmemoryPool) -> DriverResult<&'static Pool> {
    let pool = default_pools()
        .iter()
        .find(|pool| pool.handle() == handle)
        .or_else(|| {
            OTHER_POOLS
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
        // SAFETY: a location on the stack.
        unsafe {
            set_current(
                &Location::device(ordinal),
                ALLOCATION_TYPE_PINNED as u32,
                pool,
            )
        }
    })
}

/// What a `CUmemLocation` and allocation type name: a pinned pool's device, or a managed pool's
/// preferred location.
///
/// # Safety
/// `location` is null or valid for reading a CUmemLocation.
unsafe fn pool_place(location: *const Location, allocation_type: u32) -> DriverResult<Location> {
    if location.is_null() {
        return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
    }
    // SAFETY: non-null, valid for reading by the caller's contract.
    let location = unsafe { location.read_unaligned() };
    match (allocation_type as i32, location.kind) {
        (ALLOCATION_TYPE_PINNED | ALLOCATION_TYPE_MANAGED, LOCATION_DEVICE) => {
            ordinal(location.id).map(Location::device)
        }
        (ALLOCATION_TYPE_PINNED, LOCATION_HOST | LOCATION_HOST_NUMA) => {
            Err(CUresult::CUDA_ERROR_NOT_SUPPORTED)
        }
        (ALLOCATION_TYPE_MANAGED, _) if !config().concurrent_managed_access => {
            Err(CUresult::CUDA_ERROR_NOT_SUPPORTED)
        }
        (ALLOCATION_TYPE_MANAGED, LOCATION_NONE) => Ok(Location::NONE),
        (ALLOCATION_TYPE_MANAGED, LOCATION_HOST) => Ok(Location::HOST),
        // The double's host has one NUMA node, 0.
        (ALLOCATION_TYPE_MANAGED, LOCATION_HOST_NUMA) if location.id == 0 => Ok(location),
        _ => Err(CUresult::CUDA_ERROR_INVALID_VALUE),
    }
}

/// The default pool of a location and allocation type.
fn default_pool(place: Location, allocation_type: u32) -> &'static Pool {
    match allocation_type as i32 {
        ALLOCATION_TYPE_PINNED => &default_pools()[place.id as usize],
        _ => default_managed_pool(place),
    }
}

/// The current pool of a location and allocation type.
fn current_pool(place: Location, allocation_type: u32) -> &'static Pool {
    match allocation_type as i32 {
        ALLOCATION_TYPE_PINNED => current_pools().lock()[place.id as usize],
        _ => CURRENT_MANAGED
            .lock()
            .iter()
            .copied()
            .find(|pool| pool.location == place)
            .unwrap_or_else(|| default_managed_pool(place)),
    }
}

/// Makes `pool` the current pool of its location and allocation type: "The location and
/// allocation type specified must match those of the pool otherwise CUDA_ERROR_INVALID_VALUE is
/// returned."
///
/// # Safety
/// `location` is null or valid for reading a CUmemLocation.
unsafe fn set_current(
    location: *const Location,
    allocation_type: u32,
    pool: CUmemoryPool,
) -> DriverResult {
    // SAFETY: the caller's pointer.
    let place = unsafe { pool_place(location, allocation_type) }?;
    let pool = find(pool)?;
    if pool.location != place || pool.allocation_type != allocation_type as i32 {
        return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
    }
    if pool.is_managed() {
        let mut current = CURRENT_MANAGED.lock();
        current.retain(|other| other.location != place);
        current.push(pool);
    } else {
        current_pools().lock()[place.id as usize] = pool;
    }
    Ok(())
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
        // SAFETY: the caller's pointer.
        let place = unsafe { pool_place(location, allocation_type) }?;
        // SAFETY: the caller's out-pointer.
        unsafe { write_out(pool, default_pool(place, allocation_type).handle()) }
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
        // SAFETY: the caller's pointer.
        let place = unsafe { pool_place(location, allocation_type) }?;
        // SAFETY: the caller's out-pointer.
        unsafe { write_out(pool, current_pool(place, allocation_type).handle()) }
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
        unsafe { set_current(location, allocation_type, pool) }
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

/// A pool of device memory, or of managed memory (see the module's documentation). Exportable
/// pools of device memory (`handleTypes` other than none) are not modelled: CUDA_ERROR_NOT_SUPPORTED,
/// as on a device whose `CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES` is 0 (the double's).
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
        let place = unsafe { pool_place(&props.location, props.allocation_type) }?;
        let managed = props.allocation_type as i32 == ALLOCATION_TYPE_MANAGED;
        match (managed, props.handle_types, props.max_size) {
            (true, 0, 0) | (false, 0, _) => {}
            (true, _, _) => return Err(CUresult::CUDA_ERROR_INVALID_VALUE),
            (false, _, _) => return Err(CUresult::CUDA_ERROR_NOT_SUPPORTED),
        }
        let created = leak(Pool::new(
            props.allocation_type as i32,
            place,
            true,
            props.max_size as u64,
        ));
        // SAFETY: the caller's out-pointer, checked non-null.
        unsafe { write_out(pool, created.handle()) }
    })
}

/// "If any pointers obtained from this pool haven't been freed or the pool has free operations
/// that haven't completed when cuMemPoolDestroy is invoked, the function will return immediately
/// and the resources associated with the pool will be released automatically once there are no
/// more outstanding allocations." A default pool cannot be destroyed.
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
        if pool.is_managed() {
            CURRENT_MANAGED
                .lock()
                .retain(|other| !std::ptr::eq(*other, pool));
        } else {
            let mut current = current_pools().lock();
            let ordinal = pool.location.id as usize;
            if std::ptr::eq(current[ordinal], pool) {
                current[ordinal] = &default_pools()[ordinal];
            }
        }
        Ok(())
    })
}
