//! [`HostQueue`]: the host CPU as a [`Queue`]. Copies and fills run synchronously on the calling
//! thread, so every event it records has already completed.

use std::any::Any;
use std::ptr::NonNull;
use std::sync::{Arc, OnceLock};

use super::HOST;
use super::device::host_device_info;
use super::memory::HostMemory;
use crate::interop::Interop;
use crate::{Advice, DeviceInfo, Error, Event, Location, MemKind, Queue, Result};

/// A queue on the host CPU.
#[derive(Debug)]
pub struct HostQueue {
    device: DeviceInfo,
    pub(super) memory: HostMemory,
}

impl HostQueue {
    /// A new host queue with its own allocation registry. Most code wants [`HostQueue::shared`].
    pub fn new() -> Self {
        HostQueue {
            device: host_device_info(),
            memory: HostMemory::default(),
        }
    }

    /// The process-wide host queue, which `devbuf` uses for all host memory.
    pub fn shared() -> Arc<dyn Queue> {
        static SHARED: OnceLock<Arc<HostQueue>> = OnceLock::new();
        SHARED.get_or_init(|| Arc::new(HostQueue::new())).clone()
    }
}

impl Default for HostQueue {
    fn default() -> Self {
        Self::new()
    }
}

impl Queue for HostQueue {
    fn device(&self) -> &DeviceInfo {
        &self.device
    }

    crate::works_on_the_calling_thread!();

    /// Every kind but Unknown (what the device's list says, without scanning it on every
    /// allocation).
    fn supports(&self, kind: MemKind) -> bool {
        kind != MemKind::Unknown
    }

    fn allocate(&self, kind: MemKind, size: usize, align: usize) -> Result<NonNull<u8>> {
        self.memory.allocate(kind, size, align)
    }

    unsafe fn deallocate(&self, ptr: NonNull<u8>, kind: MemKind, size: usize, align: usize) {
        // SAFETY: the caller passes back exactly what `allocate` returned and was given, once.
        unsafe { self.memory.deallocate(ptr, kind, size, align) }
    }

    /// The CPU: every host address of the process is its memory to fill and copy.
    fn reaches_any_host_memory(&self) -> bool {
        true
    }

    /// An allocation is a call into the process's allocator.
    fn allocates_cheaply(&self) -> bool {
        true
    }

    /// NumPy's buffer protocol and DLPack take a null pointer for no bytes.
    fn empty_buffers_are_null(&self) -> bool {
        true
    }

    fn keeps_time(&self) -> bool {
        true
    }

    fn record_timed_event(&self) -> Result<Event> {
        Ok(Event::new(crate::InstantEvent(std::time::Instant::now())))
    }

    /// The system's available and total memory (`/proc/meminfo`'s MemAvailable and MemTotal).
    fn memory_info(&self) -> Result<(usize, usize)> {
        let unreadable = |why: String| Error::runtime(HOST, "reading /proc/meminfo", why);
        let text =
            std::fs::read_to_string("/proc/meminfo").map_err(|e| unreadable(e.to_string()))?;
        let field = |name: &str| {
            text.lines()
                .find_map(|line| line.strip_prefix(name)?.strip_prefix(':'))
                .and_then(|rest| rest.trim().strip_suffix("kB")?.trim().parse::<usize>().ok())
                .and_then(|kib| kib.checked_mul(1024))
                .ok_or_else(|| unreadable(format!("no {name} line")))
        };
        Ok((field("MemAvailable")?, field("MemTotal")?))
    }

    fn kind_of(&self, ptr: *const u8) -> MemKind {
        self.memory.kind_of(ptr)
    }

    // Every kind the host backend has is host memory, on the device that is the host: it is
    // where any prefetch would take it, and advice has nothing to change.
    unsafe fn prefetch(&self, _ptr: *const u8, _len: usize, _to: Location) -> Result<()> {
        Ok(())
    }

    unsafe fn advise(&self, _ptr: *const u8, _len: usize, _advice: Advice) -> Result<()> {
        Ok(())
    }

    fn interop(&self) -> &dyn Interop {
        self
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
