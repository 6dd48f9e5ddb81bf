//! [`SkeletonQueue`]: the device half ([`Queue`]). Copies and fills run on the calling thread
//! before they return, so every event it records has completed.

use std::any::Any;
use std::ptr::NonNull;

use devbuf_core::{CompletedEvent, DeviceInfo, Event, Interop, MemKind, Queue, Result};

use crate::device::device_info;
use crate::memory::Memory;

/// The queue of the skeleton backend's one device.
#[derive(Debug)]
pub struct SkeletonQueue {
    pub(crate) device: DeviceInfo,
    pub(crate) memory: Memory,
}

impl SkeletonQueue {
    pub(crate) fn new() -> Self {
        SkeletonQueue {
            device: device_info(),
            memory: Memory::default(),
        }
    }
}

impl Queue for SkeletonQueue {
    fn device(&self) -> &DeviceInfo {
        &self.device
    }

    fn host_accessible(&self, _kind: MemKind) -> bool {
        true
    }

    fn allocate(&self, kind: MemKind, size: usize, align: usize) -> Result<NonNull<u8>> {
        self.memory.allocate(kind, size, align)
    }

    unsafe fn deallocate(&self, ptr: NonNull<u8>, _kind: MemKind, size: usize, align: usize) {
        // SAFETY: the caller passes back exactly what `allocate` returned and was given, once.
        unsafe { self.memory.deallocate(ptr, size, align) }
    }

    unsafe fn copy(&self, dst: *mut u8, src: *const u8, len: usize) -> Result<()> {
        // SAFETY: the caller guarantees both ranges are valid host memory for `len` bytes.
        unsafe { std::ptr::copy(src, dst, len) };
        Ok(())
    }

    unsafe fn fill(&self, dst: *mut u8, byte: u8, len: usize) -> Result<()> {
        // SAFETY: the caller guarantees `dst` is valid host memory for `len` bytes.
        unsafe { std::ptr::write_bytes(dst, byte, len) };
        Ok(())
    }

    fn wait(&self) -> Result<()> {
        Ok(())
    }

    fn record_event(&self) -> Result<Event> {
        Ok(Event::new(CompletedEvent))
    }

    /// Work runs when it is enqueued: the host waits for another queue's event first.
    fn wait_event(&self, event: &Event) -> Result<()> {
        event.wait()
    }

    fn kind_of(&self, ptr: *const u8) -> MemKind {
        self.memory.kind_of(ptr)
    }

    fn interop(&self) -> &dyn Interop {
        self
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
