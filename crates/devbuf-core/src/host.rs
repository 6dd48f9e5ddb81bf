//! The host backend: always available, the embedded default. Every kind is aligned host memory
//! from the global allocator; copies and fills run synchronously on the calling thread. It keeps
//! a registry of its allocations so that `kind_of` answers for them (and only them).
//!
//! Like malloc's thread caches and devbuf's pool, the queue keeps a few small freed blocks for the
//! next request of exactly the same size, alignment and kind: the allocate-use-free loop of one
//! size then skips the system allocator's aligned path (`posix_memalign` splits and merges chunks
//! for every 256-byte-aligned request) and the registry's update, most of an allocation's cost.
//! A kept block stays in the registry: it is still the queue's memory, and no other owner can hand
//! out an address inside it. The queue frees a block only once `Buffer` has ordered the release
//! after every use of it, so reusing one is as safe as freeing it.

use std::alloc::{Layout, alloc, dealloc};
use std::any::Any;
use std::collections::BTreeMap;
use std::ptr::NonNull;
use std::sync::{Arc, OnceLock};

use dlpark::ffi::{DLDevice, DLDeviceType};
use parking_lot::Mutex;

use crate::extent::Holder;
use crate::{
    Availability, Backend, CompletedEvent, DeviceInfo, Error, Event, IpcSharing, MemKind, Queue,
    Result,
};

/// The name of the host backend and its one selector.
pub const HOST: &str = "host";

/// How many freed blocks the queue keeps for the next request of the same size.
const RECENT_BLOCKS: usize = 16;
/// The largest block kept (64 KiB): the few kept never pin much memory.
const RECENT_MAX_SIZE: usize = 64 << 10;

/// A queue on the host CPU.
#[derive(Debug)]
pub struct HostQueue {
    device: DeviceInfo,
    /// Start address → (size, kind) of each live allocation, and of each block kept in `recent`.
    allocations: Mutex<BTreeMap<usize, (usize, MemKind)>>,
    /// Small freed blocks kept for reuse (see the module's notes).
    recent: Mutex<Vec<RecentBlock>>,
}

/// A freed block kept for reuse, with the request it was made for.
#[derive(Debug, Clone, Copy)]
struct RecentBlock {
    addr: usize,
    size: usize,
    align: usize,
    kind: MemKind,
}

impl HostQueue {
    /// A new host queue with its own allocation registry. Most code wants [`HostQueue::shared`].
    pub fn new() -> Self {
        HostQueue {
            device: host_device_info(),
            allocations: Mutex::new(BTreeMap::new()),
            recent: Mutex::new(Vec::with_capacity(RECENT_BLOCKS)),
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

impl Drop for HostQueue {
    fn drop(&mut self) {
        for block in self.recent.get_mut().drain(..) {
            // SAFETY: a kept block came from `alloc` with this size and alignment, and left the
            // registry's users when it was freed; it is freed here once.
            unsafe {
                dealloc(
                    block.addr as *mut u8,
                    Layout::from_size_align_unchecked(block.size, block.align),
                )
            }
        }
    }
}

impl Queue for HostQueue {
    fn device(&self) -> &DeviceInfo {
        &self.device
    }

    fn host_accessible(&self, _kind: MemKind) -> bool {
        true
    }

    /// Every kind but Unknown (what the device's list says, without scanning it on every
    /// allocation).
    fn supports(&self, kind: MemKind) -> bool {
        kind != MemKind::Unknown
    }

    fn allocate(&self, kind: MemKind, size: usize, align: usize) -> Result<NonNull<u8>> {
        let oom = |reason: &str| Error::OutOfMemory {
            kind,
            size,
            device: HOST.into(),
            reason: reason.into(),
        };
        let layout = Layout::from_size_align(size, align)
            .map_err(|_| oom("the size rounded up to the alignment overflows isize"))?;
        if size == 0 {
            return Err(oom("zero-sized allocation requested"));
        }
        if size <= RECENT_MAX_SIZE {
            let mut recent = self.recent.lock();
            if let Some(index) = recent
                .iter()
                .rposition(|b| b.size == size && b.align == align && b.kind == kind)
            {
                let block = recent.swap_remove(index);
                drop(recent);
                // SAFETY: kept blocks are non-null addresses from `alloc`.
                return Ok(unsafe { NonNull::new_unchecked(block.addr as *mut u8) });
            }
        }
        // SAFETY: the layout has a non-zero size.
        let ptr = NonNull::new(unsafe { alloc(layout) })
            .ok_or_else(|| oom("the system allocator returned null"))?;
        self.allocations
            .lock()
            .insert(ptr.as_ptr() as usize, (size, kind));
        Ok(ptr)
    }

    unsafe fn deallocate(&self, ptr: NonNull<u8>, kind: MemKind, size: usize, align: usize) {
        let addr = ptr.as_ptr() as usize;
        if size <= RECENT_MAX_SIZE {
            let mut recent = self.recent.lock();
            if recent.len() < RECENT_BLOCKS {
                recent.push(RecentBlock {
                    addr,
                    size,
                    align,
                    kind,
                });
                return;
            }
        }
        self.allocations.lock().remove(&addr);
        // SAFETY: the caller passes back exactly what `allocate` returned and was given, once.
        unsafe { dealloc(ptr.as_ptr(), Layout::from_size_align_unchecked(size, align)) }
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

    fn record_timed_event(&self) -> Result<Event> {
        Ok(Event::new(crate::InstantEvent(std::time::Instant::now())))
    }

    fn wait_event(&self, event: &Event) -> Result<()> {
        event.wait()
    }

    fn kind_of(&self, ptr: *const u8) -> MemKind {
        let addr = ptr as usize;
        match self.allocations.lock().range(..=addr).next_back() {
            Some((&start, &(size, kind))) if addr < start + size => kind,
            _ => MemKind::Unknown,
        }
    }

    /// Its own allocations, by the registry; any other address may be host memory of the
    /// process, which nothing can tell from garbage: unchecked, its producer trusted.
    fn holder_of(&self, ptr: *const u8) -> Result<Holder> {
        let addr = ptr as usize;
        Ok(match self.allocations.lock().range(..=addr).next_back() {
            Some((&start, &(size, kind))) if addr < start + size => Holder::Allocation {
                kind,
                range: start..start + size,
            },
            _ => Holder::Unchecked,
        })
    }

    fn dlpack_device(&self, _kind: MemKind) -> DLDevice {
        DLDevice {
            device_type: DLDeviceType::CPU,
            device_id: 0,
        }
    }

    fn ipc(&self) -> Result<&dyn IpcSharing> {
        Ok(self)
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

fn host_device_info() -> DeviceInfo {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let field = |key: &str| {
        cpuinfo
            .lines()
            .find(|line| line.starts_with(key))
            .and_then(|line| line.split_once(':'))
            .map(|(_, value)| value.trim().to_string())
    };
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let total_kib = meminfo
        .lines()
        .find(|line| line.starts_with("MemTotal:"))
        .and_then(|line| line.split_whitespace().nth(1))
        .and_then(|kib| kib.parse::<u64>().ok())
        .unwrap_or(0);
    DeviceInfo {
        backend: HOST,
        index: 0,
        name: field("model name").unwrap_or_else(|| std::env::consts::ARCH.to_string()),
        vendor: field("vendor_id").unwrap_or_default(),
        driver: concat!("devbuf ", env!("CARGO_PKG_VERSION")).into(),
        selector: HOST.into(),
        global_mem_bytes: total_kib * 1024,
        kinds: MemKind::ALLOCATABLE.to_vec(),
        unusable_reason: None,
        test_double: None,
    }
}

/// The host backend.
#[derive(Debug, Default, Clone, Copy)]
pub struct HostBackend;

impl Backend for HostBackend {
    fn name(&self) -> &'static str {
        HOST
    }

    fn availability(&self) -> Availability {
        Availability::Available
    }

    fn devices(&self) -> Result<Vec<DeviceInfo>> {
        Ok(vec![HostQueue::shared().device().clone()])
    }

    fn open(&self, spec: &str) -> Result<Arc<dyn Queue>> {
        match spec {
            "" | "0" => Ok(HostQueue::shared()),
            other => Err(Error::DeviceNotFound {
                selector: format!("{HOST}:{other}"),
                reason: "the host backend has one device, \"host\"".into(),
            }),
        }
    }

    /// The host runs every command on the calling thread before it returns, so any stream of
    /// its work is already in order with every other: its one queue serves as each.
    fn open_stream(&self, spec: &str, _options: crate::StreamOptions) -> Result<Arc<dyn Queue>> {
        self.open(spec)
    }

    fn queue_for_dlpack_device(&self, device: DLDevice) -> Option<Result<Arc<dyn Queue>>> {
        (device.device_type == DLDeviceType::CPU).then(|| Ok(HostQueue::shared()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_freed_small_block_is_reused_for_the_same_request_only() {
        let queue = HostQueue::new();
        let first = queue.allocate(MemKind::Host, 1024, 256).unwrap();
        // SAFETY: freed once, with the arguments it was allocated with.
        unsafe { queue.deallocate(first, MemKind::Host, 1024, 256) };
        // Another kind, size or alignment never gets the kept block, and classifies as itself.
        let others = [
            (MemKind::Device, 1024, 256),
            (MemKind::Host, 512, 256),
            (MemKind::Host, 1024, 512),
        ]
        .map(|(kind, size, align)| {
            let ptr = queue.allocate(kind, size, align).unwrap();
            assert_ne!(ptr, first, "{kind} {size} {align}");
            assert_eq!(queue.kind_of(ptr.as_ptr()), kind);
            (ptr, kind, size, align)
        });
        let again = queue.allocate(MemKind::Host, 1024, 256).unwrap();
        assert_eq!(again, first);
        assert_eq!(queue.kind_of(again.as_ptr()), MemKind::Host);
        // Live blocks are never handed out twice.
        let second = queue.allocate(MemKind::Host, 1024, 256).unwrap();
        assert_ne!(second, again);
        for (ptr, kind, size, align) in others.into_iter().chain([
            (again, MemKind::Host, 1024, 256),
            (second, MemKind::Host, 1024, 256),
        ]) {
            // SAFETY: each freed once, with the arguments it was allocated with.
            unsafe { queue.deallocate(ptr, kind, size, align) };
        }
    }

    #[test]
    fn large_blocks_and_blocks_past_the_cache_go_back_to_the_system() {
        let queue = HostQueue::new();
        let large = queue
            .allocate(MemKind::Host, RECENT_MAX_SIZE + 1, 256)
            .unwrap();
        // SAFETY: freed once, with the arguments it was allocated with.
        unsafe { queue.deallocate(large, MemKind::Host, RECENT_MAX_SIZE + 1, 256) };
        assert_eq!(queue.kind_of(large.as_ptr()), MemKind::Unknown);
        let small: Vec<_> = (0..=RECENT_BLOCKS)
            .map(|_| queue.allocate(MemKind::Host, 64, 256).unwrap())
            .collect();
        for &ptr in &small {
            // SAFETY: each freed once, with the arguments it was allocated with.
            unsafe { queue.deallocate(ptr, MemKind::Host, 64, 256) };
        }
        let kept = small
            .iter()
            .filter(|ptr| queue.kind_of(ptr.as_ptr()) == MemKind::Host)
            .count();
        assert_eq!(kept, RECENT_BLOCKS);
    }
}
