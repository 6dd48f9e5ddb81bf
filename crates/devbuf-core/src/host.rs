//! The host backend: always available, the embedded default. Every kind is aligned host memory
//! from the global allocator; copies and fills run synchronously on the calling thread. It keeps
//! a registry of its allocations so that `kind_of` answers for them (and only them).

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

/// A queue on the host CPU.
#[derive(Debug)]
pub struct HostQueue {
    device: DeviceInfo,
    /// Start address → (size, kind) of each live allocation.
    allocations: Mutex<BTreeMap<usize, (usize, MemKind)>>,
}

impl HostQueue {
    /// A new host queue with its own allocation registry. Most code wants [`HostQueue::shared`].
    pub fn new() -> Self {
        HostQueue {
            device: host_device_info(),
            allocations: Mutex::new(BTreeMap::new()),
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

    fn host_accessible(&self, _kind: MemKind) -> bool {
        true
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
        // SAFETY: the layout has a non-zero size.
        let ptr = NonNull::new(unsafe { alloc(layout) })
            .ok_or_else(|| oom("the system allocator returned null"))?;
        self.allocations
            .lock()
            .insert(ptr.as_ptr() as usize, (size, kind));
        Ok(ptr)
    }

    unsafe fn deallocate(&self, ptr: NonNull<u8>, _kind: MemKind, size: usize, align: usize) {
        self.allocations.lock().remove(&(ptr.as_ptr() as usize));
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

    fn queue_for_dlpack_device(&self, device: DLDevice) -> Option<Result<Arc<dyn Queue>>> {
        (device.device_type == DLDeviceType::CPU).then(|| Ok(HostQueue::shared()))
    }
}
