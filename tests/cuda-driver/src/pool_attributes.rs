//! What a memory pool says about itself and who may use it: `cuMemPoolGetAttribute`,
//! `cuMemPoolSetAttribute`, `cuMemPoolGetAccess`, `cuMemPoolSetAccess`, `cuMemPoolTrimTo`.

use std::ffi::c_void;
use std::sync::atomic::Ordering;

use cudarc::driver::sys::{CUmemoryPool, CUresult};

use crate::device::{entry, ordinal};
use crate::errors::{DriverResult, write_out};
use crate::location::{LOCATION_DEVICE, Location};
use crate::peer;
use crate::pool::{Pool, find};

/// `CU_MEM_ACCESS_FLAGS_PROT_NONE`, `_PROT_READ`, `_PROT_READWRITE`.
const ACCESS_NONE: u32 = 0;
const ACCESS_READ: u32 = 1;
const ACCESS_READ_WRITE: u32 = 3;

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
                let (mark, now) = match attribute {
                    USED_MEM_HIGH => (&pool.used_high, pool.used()),
                    _ => (&pool.reserved_high, pool.reserved()),
                };
                mark.store(now, Ordering::Release);
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
            RESERVED_MEM_CURRENT => wide(pool.reserved()),
            USED_MEM_CURRENT => wide(pool.used()),
            RESERVED_MEM_HIGH => wide(pool.reserved_high.load(Ordering::Acquire)),
            USED_MEM_HIGH => wide(pool.used_high.load(Ordering::Acquire)),
            ALLOCATION_TYPE => int(pool.allocation_type),
            EXPORT_HANDLE_TYPES | HW_DECOMPRESS_ENABLED => int(0),
            LOCATION_ID => int(pool.location.id),
            LOCATION_TYPE => int(pool.location.kind as i32),
            MAX_POOL_SIZE => wide(pool.max_size),
            _ => Err(CUresult::CUDA_ERROR_INVALID_VALUE),
        }
    })
}

/// The access device `location` has to `pool`'s memory (see [`Pool::accessible_by`]).
fn access(pool: &Pool, location: Location) -> DriverResult<u32> {
    if location.kind != LOCATION_DEVICE {
        return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
    }
    Ok(match pool.accessible_by(ordinal(location.id)?) {
        true => ACCESS_READ_WRITE,
        false => ACCESS_NONE,
    })
}

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
        let access = access(pool, unsafe { location.read_unaligned() })?;
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

/// "Controls visibility of pools between devices": a device that is a peer of a device pool's
/// device (`cuDeviceCanAccessPeer`) is given read-write access or none (the double does not model
/// read-only access: CUDA_ERROR_NOT_SUPPORTED); a device that is no peer cannot be given access
/// (CUDA_ERROR_INVALID_DEVICE, the double's choice: the reference names no code). The pool's own
/// device, and every device of a managed pool, keeps read-write access (CUDA_ERROR_INVALID_VALUE
/// for anything else). The descriptors are checked before any takes effect.
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
        let mut changes = vec![];
        for index in 0..count {
            // SAFETY: `map` holds `count` descriptors (the caller's contract).
            let desc = unsafe { map.add(index).read_unaligned() };
            if desc.location.kind != LOCATION_DEVICE {
                return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
            }
            let device = ordinal(desc.location.id)?;
            let owner = pool.is_managed() || pool.device() == Some(device);
            match desc.flags {
                ACCESS_READ_WRITE if owner => {}
                _ if owner => return Err(CUresult::CUDA_ERROR_INVALID_VALUE),
                ACCESS_READ_WRITE | ACCESS_NONE => {
                    let home = pool.device().expect("a device pool's device");
                    let granted = desc.flags == ACCESS_READ_WRITE;
                    if granted && !peer::can_access(device, home) {
                        return Err(CUresult::CUDA_ERROR_INVALID_DEVICE);
                    }
                    changes.push((device, desc.flags == ACCESS_READ_WRITE));
                }
                ACCESS_READ => return Err(CUresult::CUDA_ERROR_NOT_SUPPORTED),
                _ => return Err(CUresult::CUDA_ERROR_INVALID_VALUE),
            }
        }
        let mut peers = pool.peers.lock();
        for (device, granted) in changes {
            peers.retain(|&other| other != device);
            if granted {
                peers.push(device);
            }
        }
        Ok(())
    })
}

/// "Releases memory back to the OS until the pool contains fewer than minBytesToKeep reserved
/// bytes, or there is no more memory that the allocator can safely release."
// Not exported by the `old-driver` build: a driver older than CUDA 11.2 lacks them.
#[cfg_attr(not(feature = "old-driver"), unsafe(no_mangle))]
pub extern "C" fn cuMemPoolTrimTo(pool: CUmemoryPool, min_bytes_to_keep: usize) -> CUresult {
    entry("cuMemPoolTrimTo", || {
        find(pool)?.release_above(min_bytes_to_keep as u64);
        Ok(())
    })
}
