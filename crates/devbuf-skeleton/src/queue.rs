//! [`SkeletonQueue`]: the device half ([`Queue`]). Copies and fills run on the calling thread
//! before they return, so every event it records has completed.

use std::any::Any;
use std::ptr::NonNull;

use devbuf_core::{DeviceInfo, Interop, MemKind, Queue, Result};

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

    devbuf_core::works_on_the_calling_thread!();

    fn allocate(&self, kind: MemKind, size: usize, align: usize) -> Result<NonNull<u8>> {
        self.memory.allocate(kind, size, align)
    }

    unsafe fn deallocate(&self, ptr: NonNull<u8>, _kind: MemKind, size: usize, align: usize) {
        // SAFETY: the caller passes back exactly what `allocate` returned and was given, once.
        unsafe { self.memory.deallocate(ptr, size, align) }
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
