//! The three kinds of CUDA memory, and what the driver says any pointer is.
//!
//! | kind | allocation | release |
//! |---|---|---|
//! | Device | `cuMemAllocAsync` on the queue's stream (the device's current pool), else `cuMemAlloc` | `cuMemFreeAsync` / `cuMemFree` |
//! | Host | `cuMemHostAlloc(DEVICEMAP \| PORTABLE)`: pinned, reachable from every context | `cuMemFreeHost` |
//! | Shared | `cuMemAllocManaged(GLOBAL)`: migrates, any stream may touch it | `cuMemFree` |
//!
//! [`allocate`] and [`free`] make the queue's context current where the driver takes it from the
//! thread (not for the stream-ordered allocator, which takes it from the stream); the other
//! functions here but [`pointer_info`] expect the allocating context to be current.

use std::ffi::c_void;
use std::ops::Range;
use std::ptr;

use cudarc::driver::sys::{
    self, CU_MEMHOSTALLOC_DEVICEMAP, CU_MEMHOSTALLOC_PORTABLE, CUcontext, CUipcMem_flags,
    CUipcMemHandle, CUmemAttach_flags, CUmemorytype, CUpointer_attribute, CUresult, CUstream,
};
use devbuf_core::MemKind;

use crate::context::{self, enter};
use crate::loader::{DriverError, call};

/// The alignment every CUDA allocation has at least.
pub(crate) const NATIVE_ALIGNMENT: usize = 256;

/// How many bytes to ask the driver for so that an `align`-aligned block of `size` bytes fits;
/// `None` when that overflows. CUDA's own alignment covers alignments up to [`NATIVE_ALIGNMENT`].
pub(crate) fn request_size(size: usize, align: usize) -> Option<usize> {
    if align > NATIVE_ALIGNMENT {
        size.checked_add(align.saturating_sub(1))
    } else {
        Some(size)
    }
}

/// Where the `align`-aligned block starts in an allocation of [`request_size`] bytes at `base`.
pub(crate) fn aligned_start(base: usize, align: usize) -> usize {
    if align > NATIVE_ALIGNMENT {
        base.next_multiple_of(align)
    } else {
        base
    }
}

/// Where a queue's device memory comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DeviceAllocator {
    /// The device's current memory pool, ordered on the queue's stream.
    StreamOrdered,
    /// `cuMemAlloc`, for devices and drivers without pools.
    Synchronous,
}

/// The kinds a CUDA queue allocates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CudaKind {
    Device,
    Host,
    Shared,
}

impl CudaKind {
    /// The CUDA kind of an allocatable [`MemKind`]; `None` for [`MemKind::Unknown`].
    pub fn of(kind: MemKind) -> Option<Self> {
        match kind {
            MemKind::Device => Some(CudaKind::Device),
            MemKind::Host => Some(CudaKind::Host),
            MemKind::Shared => Some(CudaKind::Shared),
            MemKind::Unknown => None,
        }
    }
}

/// Allocates `size` bytes of `kind` in `context`, returning the address and the allocator that
/// made it (which [`free`] needs). `stream`, of `context`, orders stream-ordered allocations;
/// where the driver refuses those (CUDA_ERROR_NOT_SUPPORTED), the memory comes from `cuMemAlloc`.
pub(crate) fn allocate(
    kind: CudaKind,
    size: usize,
    allocator: DeviceAllocator,
    can_map_host_memory: bool,
    context: CUcontext,
    stream: CUstream,
) -> Result<(usize, DeviceAllocator), DriverError> {
    if kind == CudaKind::Device && allocator == DeviceAllocator::StreamOrdered {
        let allocated = context::on_stream(context, stream, || {
            let mut ptr = 0;
            // SAFETY: `ptr` is a valid out-pointer and `stream` a live stream of `context`.
            call("cuMemAllocAsync", || unsafe {
                sys::cuMemAllocAsync(&mut ptr, size, stream)
            })?;
            Ok(ptr)
        });
        match allocated {
            Ok(ptr) => return Ok((ptr as usize, DeviceAllocator::StreamOrdered)),
            Err(err) if err.is(CUresult::CUDA_ERROR_NOT_SUPPORTED) => {}
            Err(err) => return Err(err),
        }
    }
    let _current = enter(context)?;
    match kind {
        CudaKind::Device => {
            let mut ptr = 0;
            // SAFETY: `ptr` is a valid out-pointer and a context is current.
            call("cuMemAlloc", || unsafe {
                sys::cuMemAlloc_v2(&mut ptr, size)
            })?;
            Ok((ptr as usize, DeviceAllocator::Synchronous))
        }
        CudaKind::Host => {
            let mut ptr: *mut c_void = ptr::null_mut();
            let flags = if can_map_host_memory {
                CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE
            } else {
                CU_MEMHOSTALLOC_PORTABLE
            };
            // SAFETY: `ptr` is a valid out-pointer and a context is current.
            call("cuMemHostAlloc", || unsafe {
                sys::cuMemHostAlloc(&mut ptr, size, flags)
            })?;
            Ok((ptr as usize, allocator))
        }
        CudaKind::Shared => {
            let mut ptr = 0;
            // SAFETY: `ptr` is a valid out-pointer and a context is current.
            call("cuMemAllocManaged", || unsafe {
                sys::cuMemAllocManaged(
                    &mut ptr,
                    size,
                    CUmemAttach_flags::CU_MEM_ATTACH_GLOBAL as u32,
                )
            })?;
            Ok((ptr as usize, allocator))
        }
    }
}

/// Whether [`free`] of `kind` from `allocator` is ordered on the stream; other frees happen at
/// once, so the work before them must have completed.
pub(crate) fn frees_in_order(kind: CudaKind, allocator: DeviceAllocator) -> bool {
    kind == CudaKind::Device && allocator == DeviceAllocator::StreamOrdered
}

/// Releases memory from [`allocate`] with the same `kind`, the allocator it returned, and the same
/// `context` and `stream`.
///
/// # Safety
/// `ptr` came from `allocate(kind, ..)` with that allocator, is released once, and no work on it
/// is pending (stream-ordered frees are ordered on `stream`, see [`frees_in_order`]).
pub(crate) unsafe fn free(
    kind: CudaKind,
    ptr: usize,
    allocator: DeviceAllocator,
    context: CUcontext,
    stream: CUstream,
) -> Result<(), DriverError> {
    if frees_in_order(kind, allocator) {
        return context::on_stream(context, stream, || {
            // SAFETY: the caller's contract; the free is ordered after earlier work on `stream`.
            call("cuMemFreeAsync", || unsafe {
                sys::cuMemFreeAsync(ptr as u64, stream)
            })
        });
    }
    let _current = enter(context)?;
    match (kind, allocator) {
        (CudaKind::Device | CudaKind::Shared, _) => {
            // SAFETY: the caller's contract; managed memory is released like device memory.
            call("cuMemFree", || unsafe { sys::cuMemFree_v2(ptr as u64) })
        }
        // SAFETY: the caller's contract.
        (CudaKind::Host, _) => call("cuMemFreeHost", || unsafe {
            sys::cuMemFreeHost(ptr as *mut c_void)
        }),
    }
}

/// Device memory for sharing with other processes: `cuMemAlloc`'s, since memory from the default
/// stream-ordered pool cannot be exported through `cuIpcGetMemHandle`. The context is current.
pub(crate) fn allocate_shareable(size: usize) -> Result<usize, DriverError> {
    let mut address = 0;
    // SAFETY: `address` is a valid out-pointer and the caller made the context current.
    call("cuMemAlloc", || unsafe {
        sys::cuMemAlloc_v2(&mut address, size)
    })?;
    Ok(address as usize)
}

/// The IPC handle of `address`, an allocation from [`allocate_shareable`] in the current context.
pub(crate) fn ipc_handle(address: usize) -> Result<CUipcMemHandle, DriverError> {
    // SAFETY: an all-zero CUipcMemHandle is a valid out-value.
    let mut handle: CUipcMemHandle = unsafe { std::mem::zeroed() };
    // SAFETY: `handle` is writable; the driver checks `address`.
    call("cuIpcGetMemHandle", || unsafe {
        sys::cuIpcGetMemHandle(&mut handle, address as u64)
    })?;
    Ok(handle)
}

/// Maps another process's allocation named by `handle` into the current context (the driver
/// validates the handle's bytes), for [`close_ipc_mapping`] to unmap.
pub(crate) fn open_ipc_handle(handle: CUipcMemHandle) -> Result<usize, DriverError> {
    let mut ptr = 0;
    // SAFETY: `ptr` is a valid out-pointer and the caller made the context current.
    call("cuIpcOpenMemHandle", || unsafe {
        sys::cuIpcOpenMemHandle_v2(
            &mut ptr,
            handle,
            CUipcMem_flags::CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS as u32,
        )
    })?;
    Ok(ptr as usize)
}

/// Unmaps a mapping from [`open_ipc_handle`].
///
/// # Safety
/// `ptr` came from [`open_ipc_handle`] in the current context, and is closed once.
pub(crate) unsafe fn close_ipc_mapping(ptr: usize) -> Result<(), DriverError> {
    // SAFETY: the caller's contract.
    call("cuIpcCloseMemHandle", || unsafe {
        sys::cuIpcCloseMemHandle(ptr as u64)
    })
}

/// What the driver knows about a pointer: the ordinal of the device it belongs to (for pinned and
/// managed memory, the device that was current when it was allocated) and its kind; `None` for
/// memory CUDA does not know (pageable host memory, garbage, null).
pub(crate) fn pointer_info(ptr: usize) -> Result<Option<(u32, MemKind)>, DriverError> {
    Ok(pointer_facts(ptr)?.map(|facts| (facts.ordinal, facts.kind)))
}

/// [`pointer_info`], with the allocation holding the pointer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PointerFacts {
    pub ordinal: u32,
    pub kind: MemKind,
    /// The context the memory was allocated in (`CU_POINTER_ATTRIBUTE_CONTEXT`): null for
    /// stream-ordered memory, which belongs to its device and no context.
    pub context: CUcontext,
    /// The allocation's bytes (`CU_POINTER_ATTRIBUTE_RANGE_START_ADDR`, `_RANGE_SIZE`: "Starting
    /// address" and "Size of the address range for this requested pointer"); `None` where the
    /// driver bounds none (a size of 0).
    pub range: Option<Range<usize>>,
}

/// [`pointer_info`] and the allocation's range, in one driver call (`cuPointerGetAttributes`):
/// what an import asks of the driver, and nothing else.
pub(crate) fn pointer_facts(ptr: usize) -> Result<Option<PointerFacts>, DriverError> {
    let mut memory_type: u32 = 0;
    // Wide enough for the driver's `bool` and its `unsigned int`, zeroed for both.
    let mut is_managed: u32 = 0;
    let mut ordinal: i32 = -1;
    let mut start: u64 = 0;
    let mut size: usize = 0;
    let mut context: CUcontext = ptr::null_mut();
    let mut attributes = [
        CUpointer_attribute::CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
        CUpointer_attribute::CU_POINTER_ATTRIBUTE_IS_MANAGED,
        CUpointer_attribute::CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
        CUpointer_attribute::CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
        CUpointer_attribute::CU_POINTER_ATTRIBUTE_RANGE_SIZE,
        CUpointer_attribute::CU_POINTER_ATTRIBUTE_CONTEXT,
    ];
    let mut values: [*mut c_void; 6] = [
        (&raw mut memory_type).cast(),
        (&raw mut is_managed).cast(),
        (&raw mut ordinal).cast(),
        (&raw mut start).cast(),
        (&raw mut size).cast(),
        (&raw mut context).cast(),
    ];
    // SAFETY: each value pointer points at a live local of the attribute's type; the pointer
    // being queried is never dereferenced.
    let queried = call("cuPointerGetAttributes", || unsafe {
        sys::cuPointerGetAttributes(
            attributes.len() as u32,
            attributes.as_mut_ptr(),
            values.as_mut_ptr(),
            ptr as u64,
        )
    });
    match queried {
        Ok(()) => {}
        // Older drivers answer so for memory they do not know; newer ones succeed with type 0.
        Err(err) if err.is(CUresult::CUDA_ERROR_INVALID_VALUE) => return Ok(None),
        Err(err) => return Err(err),
    }
    let Some((ordinal, kind)) = classify_attributes(memory_type, is_managed != 0, ordinal) else {
        return Ok(None);
    };
    let start = start as usize;
    let range = (size > 0)
        .then(|| start.checked_add(size).map(|end| start..end))
        .flatten();
    Ok(Some(PointerFacts {
        ordinal,
        kind,
        context,
        range,
    }))
}

/// The bytes of the allocation that holds `ptr`, from `cuMemGetAddressRange` ("Returns the base
/// address in *pbase and size in *psize of the allocation that contains the input pointer dptr");
/// `None` where the driver finds no such allocation (CUDA_ERROR_NOT_FOUND, or INVALID_VALUE from
/// drivers that answer so for memory they do not know). A context must be current.
pub(crate) fn address_range(ptr: usize) -> Result<Option<Range<usize>>, DriverError> {
    let (mut base, mut size) = (0, 0);
    // SAFETY: both out-pointers point at live locals; the pointer queried is never dereferenced.
    let found = call("cuMemGetAddressRange", || unsafe {
        sys::cuMemGetAddressRange_v2(&mut base, &mut size, ptr as u64)
    });
    match found {
        Ok(()) => {}
        Err(err)
            if err.is(CUresult::CUDA_ERROR_NOT_FOUND)
                || err.is(CUresult::CUDA_ERROR_INVALID_VALUE) =>
        {
            return Ok(None);
        }
        Err(err) => return Err(err),
    }
    let base = base as usize;
    Ok(base.checked_add(size).map(|end| base..end))
}

/// The kind the driver's attributes describe. Managed memory reports either memory type
/// depending on where its pages are, so `is_managed` decides first.
fn classify_attributes(memory_type: u32, is_managed: bool, ordinal: i32) -> Option<(u32, MemKind)> {
    let ordinal = u32::try_from(ordinal).ok()?;
    let kind = if is_managed {
        MemKind::Shared
    } else if memory_type == CUmemorytype::CU_MEMORYTYPE_DEVICE as u32 {
        MemKind::Device
    } else if memory_type == CUmemorytype::CU_MEMORYTYPE_HOST as u32 {
        MemKind::Host
    } else {
        return None;
    };
    Some((ordinal, kind))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn over_aligned_blocks_fit_in_what_is_requested() {
        for base in [0x7f00_0000_0000usize, 0x7f00_0000_0100, 0x7f00_0001_ff00] {
            for align in [1, 64, 256, 512, 4096, 1 << 16, 1 << 21] {
                for size in [1, 255, 256, 4097, 1 << 20] {
                    let requested = request_size(size, align).unwrap();
                    let start = aligned_start(base, align);
                    assert_eq!(start % align, 0, "{base:#x} {align}");
                    assert!(start >= base && start + size <= base + requested);
                    if align <= NATIVE_ALIGNMENT {
                        assert_eq!((start, requested), (base, size));
                    }
                }
            }
        }
        assert_eq!(request_size(usize::MAX, 512), None);
        assert_eq!(request_size(usize::MAX, 256), Some(usize::MAX));
    }

    #[test]
    fn attributes_classify_like_the_driver_documents() {
        let device = CUmemorytype::CU_MEMORYTYPE_DEVICE as u32;
        let host = CUmemorytype::CU_MEMORYTYPE_HOST as u32;
        assert_eq!(
            classify_attributes(device, false, 1),
            Some((1, MemKind::Device))
        );
        assert_eq!(
            classify_attributes(host, false, 0),
            Some((0, MemKind::Host))
        );
        assert_eq!(
            classify_attributes(device, true, 0),
            Some((0, MemKind::Shared))
        );
        assert_eq!(
            classify_attributes(host, true, 2),
            Some((2, MemKind::Shared))
        );
        // Unregistered (pageable) memory: type 0, and no device.
        assert_eq!(classify_attributes(0, false, -1), None);
        assert_eq!(classify_attributes(0, false, 0), None);
        assert_eq!(classify_attributes(device, false, -1), None);
    }
}
