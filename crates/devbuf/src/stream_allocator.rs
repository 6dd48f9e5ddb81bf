//! Device memory by address for libraries that hand devbuf only an address, a size, a device and
//! a CUDA stream (PyTorch's pluggable allocator): each allocation comes from the device's current
//! resource for device memory (its queue's own allocator when none is set), ordered before the
//! caller's stream uses it, and goes back only after the work the caller's stream has enqueued
//! on it by the time of the free, as RMM's allocators for PyTorch and CuPy do.

use std::collections::HashMap;
use std::ptr::NonNull;
use std::sync::{Arc, LazyLock};

use devbuf_core::mr::{FreeAfter, MemoryResource, QueueResource, current};
use devbuf_core::{DEFAULT_ALIGNMENT, Error, HandleSource, MemKind, Protocol, Queue, Result};
use parking_lot::Mutex;

use crate::{adopt_stream, open};

/// One allocation handed out: where it came from, and its size.
struct Live {
    resource: Arc<dyn MemoryResource>,
    size: usize,
}

/// What was handed out, by address: the caller's free names only the address. (Process-wide,
/// like the caller's own allocator it stands in for.)
static LIVE: LazyLock<Mutex<HashMap<usize, Live>>> = LazyLock::new(Mutex::default);

/// The device's current resource for device memory, or its queue's own allocator.
fn resource_of(selector: &str) -> Result<Arc<dyn MemoryResource>> {
    let queue = open(selector)?;
    Ok(match current(&queue.device().selector, MemKind::Device) {
        Some(resource) if Arc::ptr_eq(resource.queue(), &queue) => resource,
        _ => QueueResource::new(queue),
    })
}

/// The caller's stream as a queue, `handle` as the CUDA runtime numbers streams: 0 is the legacy
/// default stream ("the NULL stream" of a program built without per-thread default streams).
fn stream(selector: &str, handle: usize) -> Result<Arc<dyn Queue>> {
    const CU_STREAM_LEGACY: usize = 1;
    let handle = if handle == 0 {
        CU_STREAM_LEGACY
    } else {
        handle
    };
    // SAFETY: the caller promises the stream is alive for the call; the queue made of it is
    // used within the call only.
    unsafe {
        adopt_stream(
            Protocol::Cai,
            Some(selector),
            handle,
            HandleSource::Bare,
            Box::new(()),
        )
    }
}

/// `size` bytes of device memory on the device `selector` names, usable by work enqueued on the
/// CUDA stream `handle` from now on.
///
/// # Safety
/// `handle` is a live stream of that device (or 0) for the duration of the call.
pub unsafe fn allocate_on_stream(
    selector: &str,
    size: usize,
    handle: usize,
) -> Result<NonNull<u8>> {
    let resource = resource_of(selector)?;
    let ptr = resource.allocate(MemKind::Device, size.max(1), DEFAULT_ALIGNMENT)?;
    let ordered = match stream(selector, handle) {
        Ok(stream) => devbuf_core::ordering::order_stream_after(&stream, resource.queue()),
        // A stream devbuf cannot adopt (a per-thread default stream): the allocation is made
        // complete before the caller sees it, so any stream may use it.
        Err(_) => devbuf_core::ordering::synchronize_stream(resource.queue()),
    };
    if let Err(err) = ordered {
        // SAFETY: just allocated with these arguments, never handed out.
        unsafe {
            resource.deallocate(
                ptr,
                MemKind::Device,
                size.max(1),
                DEFAULT_ALIGNMENT,
                FreeAfter::Now,
            )
        };
        return Err(err);
    }
    let live = Live { resource, size };
    LIVE.lock().insert(ptr.as_ptr() as usize, live);
    Ok(ptr)
}

/// Frees what [`allocate_on_stream`] returned at `address`, after the work enqueued on the CUDA
/// stream `handle` so far. An address it did not hand out (or took back already) is refused.
///
/// # Safety
/// `handle` is a live stream of the memory's device (or 0) for the duration of the call; no work
/// on the memory runs, or will be enqueued, on other streams than `handle` and the resource's.
pub unsafe fn free_on_stream(address: usize, handle: usize) -> Result<()> {
    let Some(live) = LIVE.lock().remove(&address) else {
        return Err(Error::invalid(
            "ptr",
            format!(
                "{address:#x} is not memory devbuf's stream allocator handed out (or it was freed)"
            ),
        ));
    };
    let queue = Arc::clone(live.resource.queue());
    let selector = queue.device().selector.clone();
    let after = stream(&selector, handle)
        .and_then(|stream| devbuf_core::ordering::free_after_stream(&stream));
    let ptr = NonNull::new(address as *mut u8).expect("handed-out addresses are non-null");
    // Where the caller's stream could not be followed, the device's whole work is waited for.
    let after = match after {
        Ok(after) => after,
        Err(_) => {
            devbuf_core::ordering::synchronize_device(&queue)?;
            FreeAfter::Now
        }
    };
    // SAFETY: handed out by this resource with these arguments, taken out of LIVE once; the
    // caller's stream's work on it is ordered before `after`.
    unsafe {
        live.resource.deallocate(
            ptr,
            MemKind::Device,
            live.size.max(1),
            DEFAULT_ALIGNMENT,
            after,
        )
    };
    Ok(())
}
