//! Allocation entry points that are not stream-ordered: device (`cuMemAlloc`), pinned host
//! (`cuMemHostAlloc`, `cuMemAllocHost`) and managed (`cuMemAllocManaged`) memory, their frees,
//! and what the driver says about memory as a whole.

use std::ffi::c_void;
use std::sync::Arc;

use cudarc::driver::sys::{CUdeviceptr, CUresult};

use crate::config::config;
use crate::context;
use crate::device::entry;
use crate::errors::{DriverResult, write_out};
use crate::memory::{self, Kind, NewAllocation, Origin, Record, State};

/// `CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_WRITECOMBINED`.
const HOST_ALLOC_FLAGS: u32 = 0x1 | 0x2 | 0x4;
/// `CU_MEM_ATTACH_GLOBAL`, `CU_MEM_ATTACH_HOST`.
const ATTACH_GLOBAL: u32 = 0x1;
const ATTACH_HOST: u32 = 0x2;

/// Allocates in the current context.
fn allocate(size: usize, kind: Kind, host_flags: u32) -> DriverResult<Arc<Record>> {
    let context = context::current()?;
    if size == 0 {
        return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
    }
    memory::count_allocation_call()?;
    memory::allocate(NewAllocation {
        size,
        kind,
        context,
        host_flags,
        origin: Origin::Allocated,
        state: State::Live,
    })
}

/// The allocation that starts at `address` and is of one of `kinds`, for a free;
/// CUDA_ERROR_INVALID_VALUE for anything else (an inner pointer, a foreign or freed one, and an
/// IPC mapping, which `cuIpcCloseMemHandle` closes).
pub(crate) fn allocation_at(address: u64, kinds: &[Kind]) -> DriverResult<Arc<Record>> {
    memory::find(address)
        .filter(|record| {
            record.start == address
                && kinds.contains(&record.kind)
                && !matches!(record.origin, Origin::Imported | Origin::Registered)
        })
        .ok_or(CUresult::CUDA_ERROR_INVALID_VALUE)
}

/// # Safety
/// `pointer` is null or valid for writing a CUdeviceptr.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemAlloc_v2(pointer: *mut CUdeviceptr, size: usize) -> CUresult {
    entry("cuMemAlloc", || {
        let record = allocate(size, Kind::Device, 0)?;
        // SAFETY: the caller's out-pointer.
        unsafe { write_out(pointer, record.start) }
    })
}

/// Frees device or managed memory at once; see [`memory::free_now`] for why a free while work
/// on the range is queued is a fault.
///
/// It first waits for what synchronous calls left running on the memory: "For all other pointers
/// [than stream-ordered ones], this API may perform implicit synchronization", and a synchronous
/// copy from pageable memory returns before "the DMA to final destination" has completed, so only
/// that synchronization lets a program free memory right after such a copy (NVIDIA's numba-cuda
/// `cudadrv/test_deallocations.py` does). The stream-ordered allocator's memory gets none: "This
/// API will not perform any implict synchronization when the pointer was allocated with
/// cuMemAllocAsync or cuMemAllocFromPoolAsync."
#[unsafe(no_mangle)]
pub extern "C" fn cuMemFree_v2(pointer: CUdeviceptr) -> CUresult {
    entry("cuMemFree", || {
        let context = context::current()?;
        let record = allocation_at(pointer, &[Kind::Device, Kind::Managed])?;
        if !matches!(record.origin, Origin::Pooled(_)) {
            record.wait_for_synchronous_calls();
        }
        memory::free_now(&record, "cuMemFree", context)
    })
}

/// # Safety
/// `pointer` is null or valid for writing a pointer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemHostAlloc(
    pointer: *mut *mut c_void,
    size: usize,
    flags: u32,
) -> CUresult {
    entry("cuMemHostAlloc", || {
        if flags & !HOST_ALLOC_FLAGS != 0 {
            return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
        }
        let record = allocate(size, Kind::PinnedHost, flags)?;
        // SAFETY: the caller's out-pointer.
        unsafe { write_out(pointer, record.start as *mut c_void) }
    })
}

/// # Safety
/// `pointer` is null or valid for writing a pointer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemAllocHost_v2(pointer: *mut *mut c_void, size: usize) -> CUresult {
    // SAFETY: the same contract; `cuMemAllocHost` is `cuMemHostAlloc` without flags.
    unsafe { cuMemHostAlloc(pointer, size, 0) }
}

#[unsafe(no_mangle)]
pub extern "C" fn cuMemFreeHost(pointer: *mut c_void) -> CUresult {
    entry("cuMemFreeHost", || {
        let context = context::current()?;
        let record = allocation_at(pointer as u64, &[Kind::PinnedHost])?;
        memory::free_now(&record, "cuMemFreeHost", context)
    })
}

/// `CU_MEMHOSTREGISTER_PORTABLE | DEVICEMAP | IOMEMORY | READ_ONLY`.
const HOST_REGISTER_FLAGS: u32 = 0x1 | 0x2 | 0x4 | 0x8;

/// Page-locks the program's own memory: from now on it is pinned host memory to the driver (host
/// and device reach it at its address), until `cuMemHostUnregister`. A range that overlaps memory
/// the driver already knows (registered or allocated by it) is
/// CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED, a code cuMemHostRegister documents.
///
/// # Safety
/// `pointer` is the start of `size` bytes of host memory that stay allocated until unregistered.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemHostRegister_v2(
    pointer: *mut c_void,
    size: usize,
    flags: u32,
) -> CUresult {
    entry("cuMemHostRegister", || {
        let context = context::current()?;
        let address = pointer as u64;
        if flags & !HOST_REGISTER_FLAGS != 0 || address == 0 || size == 0 {
            return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
        }
        if memory::is_device_address(address) {
            return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
        }
        memory::register(address, size, context, flags).map(drop)
    })
}

/// The pre-6.5 name, with the same arguments.
///
/// # Safety
/// As for [`cuMemHostRegister_v2`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemHostRegister(
    pointer: *mut c_void,
    size: usize,
    flags: u32,
) -> CUresult {
    // SAFETY: the same contract.
    unsafe { cuMemHostRegister_v2(pointer, size, flags) }
}

/// "The base address must be the same one specified to cuMemHostRegister()"; anything else is
/// CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemHostUnregister(pointer: *mut c_void) -> CUresult {
    entry("cuMemHostUnregister", || {
        let context = context::current()?;
        let record = memory::find(pointer as u64)
            .filter(|record| record.start == pointer as u64 && record.origin == Origin::Registered)
            .ok_or(CUresult::CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED)?;
        memory::free_now(&record, "cuMemHostUnregister", context)
    })
}

/// # Safety
/// `device_pointer` is null or valid for writing a CUdeviceptr.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemHostGetDevicePointer_v2(
    device_pointer: *mut CUdeviceptr,
    pointer: *mut c_void,
    flags: u32,
) -> CUresult {
    entry("cuMemHostGetDevicePointer", || {
        context::current()?;
        if flags != 0 {
            return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
        }
        let address = pointer as u64;
        memory::find(address)
            .filter(|record| record.kind == Kind::PinnedHost)
            .ok_or(CUresult::CUDA_ERROR_INVALID_VALUE)?;
        // Unified addressing: the device sees pinned memory at its host address.
        // SAFETY: the caller's out-pointer.
        unsafe { write_out(device_pointer, address) }
    })
}

/// # Safety
/// `flags` is null or valid for writing an unsigned int.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemHostGetFlags(flags: *mut u32, pointer: *mut c_void) -> CUresult {
    entry("cuMemHostGetFlags", || {
        context::current()?;
        let record = memory::find(pointer as u64)
            .filter(|record| record.kind == Kind::PinnedHost)
            .ok_or(CUresult::CUDA_ERROR_INVALID_VALUE)?;
        // SAFETY: the caller's out-pointer.
        unsafe { write_out(flags, record.host_flags) }
    })
}

/// # Safety
/// `pointer` is null or valid for writing a CUdeviceptr.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemAllocManaged(
    pointer: *mut CUdeviceptr,
    size: usize,
    flags: u32,
) -> CUresult {
    entry("cuMemAllocManaged", || {
        if flags != ATTACH_GLOBAL && flags != ATTACH_HOST {
            return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
        }
        let record = allocate(size, Kind::Managed, 0)?;
        // SAFETY: the caller's out-pointer.
        unsafe { write_out(pointer, record.start) }
    })
}

/// # Safety
/// `free` and `total` are null or valid for writing a size_t.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemGetInfo_v2(free: *mut usize, total: *mut usize) -> CUresult {
    entry("cuMemGetInfo", || {
        let context = context::current()?;
        let capacity = config().total_memory as usize;
        let used = memory::used(context.ordinal);
        // SAFETY: the caller's out-pointers.
        unsafe {
            write_out(free, capacity.saturating_sub(used))?;
            write_out(total, capacity)
        }
    })
}

/// # Safety
/// `base` and `size` are each null (not wanted) or valid for writing.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemGetAddressRange_v2(
    base: *mut CUdeviceptr,
    size: *mut usize,
    pointer: CUdeviceptr,
) -> CUresult {
    entry("cuMemGetAddressRange", || {
        context::current()?;
        let record = memory::find(pointer).ok_or(CUresult::CUDA_ERROR_NOT_FOUND)?;
        // Either output may be NULL: it is then ignored.
        if !base.is_null() {
            // SAFETY: the caller's out-pointer, non-null.
            unsafe { write_out(base, record.start) }?;
        }
        if !size.is_null() {
            // SAFETY: the caller's out-pointer, non-null.
            unsafe { write_out(size, record.size) }?;
        }
        Ok(())
    })
}
