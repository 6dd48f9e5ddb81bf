//! [`OpenClQueue`]: an in-order command queue with its own context on one device, implementing
//! devbuf's [`Queue`] over its device's memory strategy (Intel USM or SVM: [`crate::memory`]).

use std::any::Any;
use std::fmt;
use std::ptr::NonNull;
use std::sync::Arc;

use cl3::error_codes::error_text;
use devbuf_core::{
    CompletedEvent, DeviceInfo, Error, Event, Interop, LastCommand, MemKind, Queue, QueueEvent,
    Result,
};
use opencl3::command_queue::CommandQueue;
use opencl3::context::Context;
use opencl3::device::{CL_DEVICE_TYPE_CPU, Device};
use opencl3::event::Event as ClEvent;
use opencl3::types::{cl_device_id, cl_int, cl_uint};
use parking_lot::Mutex;

use crate::device::{DeviceEntry, OPENCL};
use crate::event::OpenClEvent;
use crate::memory::{MemoryStrategy, QueueAccess, strategy_for};

/// An in-order command queue on one OpenCL device, in a context of its own.
pub struct OpenClQueue {
    // Declared before the context: fields drop in order, and a queue is released before its
    // context.
    pub(crate) queue: CommandQueue,
    pub(crate) context: Context,
    pub(crate) device: Device,
    pub(crate) info: DeviceInfo,
    /// How the queue reaches its device's memory.
    pub(crate) memory: Box<dyn MemoryStrategy>,
    /// The event of the last command enqueued here, until a wait sees it complete. The queue is
    /// in order, so it completes after everything enqueued before it.
    pub(crate) last: LastCommand<ClEvent>,
    /// Identifies this queue in the events it records (shared with them, so never reused while
    /// one is alive).
    pub(crate) identity: Arc<()>,
    /// Whether the device is the host's processor (a CPU device, as PoCL's and Intel's CPU
    /// runtimes are): its host-accessible memory is then the host's own
    /// ([`Queue::on_the_host_processor`]).
    pub(crate) on_the_host_processor: bool,
}

impl OpenClQueue {
    /// The queue devbuf uses on `entry`'s device: made on first use, then shared.
    pub(crate) fn for_device(entry: &'static DeviceEntry) -> Result<Arc<OpenClQueue>> {
        /// The queue opened on each device, by its entry's address (entries live for the process).
        static OPENED: Mutex<Vec<(usize, Arc<OpenClQueue>)>> = Mutex::new(Vec::new());
        let key = std::ptr::from_ref(entry) as usize;
        let mut opened = OPENED.lock();
        if let Some((_, queue)) = opened.iter().find(|(known, _)| *known == key) {
            return Ok(Arc::clone(queue));
        }
        let queue = Arc::new(OpenClQueue::create(entry)?);
        opened.push((key, Arc::clone(&queue)));
        Ok(queue)
    }

    /// A context holding only this device (so that allocations and pointer queries concern this
    /// device alone) and an in-order queue on it.
    fn create(entry: &DeviceEntry) -> Result<OpenClQueue> {
        let context = Context::from_device(&entry.device)
            .map_err(|err| Error::runtime(OPENCL, "clCreateContext", err.to_string()))?;
        // Properties 0: in order, no profiling.
        let queue =
            CommandQueue::create_default_with_properties(&context, 0, 0).map_err(|err| {
                Error::runtime(
                    OPENCL,
                    "clCreateCommandQueueWithProperties",
                    err.to_string(),
                )
            })?;
        // A device whose type cannot be read is taken for one that is not the host's processor
        // (its strided writes stay commands).
        let on_the_host_processor = entry
            .device
            .dev_type()
            .is_ok_and(|device_type| device_type & CL_DEVICE_TYPE_CPU != 0);
        Ok(OpenClQueue {
            on_the_host_processor,
            queue,
            context,
            device: entry.device,
            info: entry.info.clone(),
            memory: strategy_for(entry),
            last: LastCommand::default(),
            identity: Arc::new(()),
        })
    }

    pub(crate) fn event(&self, event: Arc<ClEvent>) -> OpenClEvent {
        OpenClEvent {
            event,
            recorded_by: Arc::clone(&self.identity),
        }
    }
}

impl QueueAccess for OpenClQueue {
    fn context(&self) -> &Context {
        &self.context
    }

    fn device_id(&self) -> cl_device_id {
        self.device.id()
    }

    fn submit(
        &self,
        operation: &'static str,
        enqueue: &mut dyn FnMut(&CommandQueue) -> std::result::Result<ClEvent, cl_int>,
    ) -> Result<()> {
        self.last.submit(|| {
            enqueue(&self.queue).map_err(|code| Error::runtime(OPENCL, operation, error_text(code)))
        })?;
        // Submit now: an event polled with `is_complete` (not waited on, which flushes) would
        // otherwise never complete.
        self.queue
            .flush()
            .map_err(|err| Error::runtime(OPENCL, "clFlush", err.to_string()))
    }
}

impl fmt::Debug for OpenClQueue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpenClQueue")
            .field("device", &self.info.selector)
            .field("name", &self.info.name)
            .field("memory", &self.memory.name())
            .finish()
    }
}

impl Queue for OpenClQueue {
    fn device(&self) -> &DeviceInfo {
        &self.info
    }

    /// A CPU device's.
    fn on_the_host_processor(&self) -> bool {
        self.on_the_host_processor
    }

    fn allocate(&self, kind: MemKind, size: usize, align: usize) -> Result<NonNull<u8>> {
        if !self.info.supports(kind) {
            let reason = self
                .info
                .unusable_reason
                .clone()
                .unwrap_or_else(|| format!("the device offers no {kind} memory"));
            return Err(self.unsupported(format!("{kind} allocation"), reason));
        }
        if cl_uint::try_from(align).is_err() {
            return Err(self.unsupported(
                format!("alignment {align}"),
                "OpenCL takes alignments as 32-bit values".into(),
            ));
        }
        self.memory.allocate(self, kind, size, align)
    }

    unsafe fn deallocate(&self, ptr: NonNull<u8>, _kind: MemKind, _size: usize, _align: usize) {
        // SAFETY: `ptr` is an allocation of this queue's strategy (the caller's contract).
        unsafe { self.memory.free(self, ptr) }
    }

    unsafe fn copy(&self, dst: *mut u8, src: *const u8, len: usize) -> Result<()> {
        if len == 0 {
            return Ok(());
        }
        // SAFETY: forwarded from our caller.
        unsafe { self.memory.copy(self, dst, src, len) }
    }

    unsafe fn fill(&self, dst: *mut u8, byte: u8, len: usize) -> Result<()> {
        if len == 0 {
            return Ok(());
        }
        // SAFETY: forwarded from our caller.
        unsafe { self.memory.fill(self, dst, byte, len) }
    }

    fn wait(&self) -> Result<()> {
        self.last.wait(|last| self.event(Arc::clone(last)).wait())
    }

    fn record_event(&self) -> Result<Event> {
        // The queue is not shared with other libraries, so with nothing of ours pending there is
        // nothing to wait for.
        Ok(match self.last.get() {
            Some(last) => Event::new(self.event(last)),
            None => Event::new(CompletedEvent),
        })
    }

    fn wait_event(&self, event: &Event) -> Result<()> {
        match event.downcast_ref::<OpenClEvent>() {
            // Our own event: the queue is in order, so later work already follows it.
            Some(ours) if Arc::ptr_eq(&ours.recorded_by, &self.identity) => Ok(()),
            // Another queue's event belongs to another context (one per device), which OpenCL
            // wait lists do not accept; so does every other runtime's: the host waits.
            _ => event.wait(),
        }
    }

    /// Its memory goes out through DLPack and the buffer protocol, which take a null pointer for no
    /// bytes (no array-interface protocol describes it).
    fn empty_buffers_are_null(&self) -> bool {
        true
    }

    fn kind_of(&self, ptr: *const u8) -> MemKind {
        if ptr.is_null() {
            return MemKind::Unknown;
        }
        self.memory.kind_of(&self.context, ptr)
    }

    fn interop(&self) -> &dyn Interop {
        self
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
