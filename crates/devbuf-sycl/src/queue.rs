//! [`SyclQueue`]: an in-order SYCL queue with its context and device, implementing devbuf's
//! [`Queue`] over USM.

use std::any::Any;
use std::ffi::c_int;
use std::fmt;
use std::ptr::NonNull;
use std::sync::{Arc, Weak};

use devbuf_core::{
    Advice, DeviceInfo, Error, Event, ExportedHandle, Interop, LastCommand, Location, MemKind,
    Queue, QueueEvent, Result,
};
use devbuf_sycl_sys as sys;
use parking_lot::Mutex;

use crate::event::{SyclEvent, barrier};
use crate::loader::Runtime;
use crate::loader::SYCL;
use crate::memory::classify;
use crate::raw::{Context, Device, RawEvent, RawQueue, owned_handle};

/// How long `is_idle` lets a barrier behind finished work settle: the runtime's bookkeeping,
/// microseconds on an idle machine, milliseconds when its threads wait for a core.
const BARRIER_SETTLE: std::time::Duration = std::time::Duration::from_millis(2);

/// Receives SYCL's asynchronous errors. Without a handler the SYCL runtime terminates the process
/// when it reports one (e.g. while destroying a queue); here it is reported and devbuf goes on.
extern "C" fn report_async_error(code: c_int) {
    use std::io::Write;
    let _ = writeln!(
        std::io::stderr(),
        "devbuf-sycl: asynchronous SYCL error (code {code})"
    );
}

/// The queues devbuf made on one loaded runtime (kept here, not in [`Runtime`], so that the
/// runtime module knows nothing of queues).
#[derive(Default)]
pub(crate) struct RuntimeQueues {
    /// One in-order queue in the default context of each device, by dpctl device index.
    pub(crate) default_queues: Mutex<Vec<(i32, Arc<SyclQueue>)>>,
    /// The default queue each filter string opened (resolving one takes tens of µs).
    pub(crate) filter_queues: Mutex<Vec<(String, Arc<SyclQueue>)>>,
    /// The queues made for users' streams and for other libraries' in-order `sycl::queue`s,
    /// while devbuf uses them: the same `sycl::queue` handed over again (a dpnp array made from
    /// devbuf memory imported back, a stream's `sycl_queue` passed as DLPack's `stream`) gets the
    /// same devbuf queue.
    pub(crate) adopted_queues: Mutex<Vec<Weak<SyclQueue>>>,
}

/// The queues of `rt`, made on first use. Runtimes are loaded once per library and never
/// unloaded, so neither are these.
pub(crate) fn queues_of(rt: &'static Runtime) -> &'static RuntimeQueues {
    static BY_RUNTIME: Mutex<Vec<(usize, &'static RuntimeQueues)>> = Mutex::new(Vec::new());
    let key = std::ptr::from_ref(rt) as usize;
    let mut all = BY_RUNTIME.lock();
    if let Some(&(_, queues)) = all.iter().find(|(known, _)| *known == key) {
        return queues;
    }
    let queues: &'static RuntimeQueues = Box::leak(Box::default());
    all.push((key, queues));
    queues
}

/// An in-order SYCL queue on one device and context.
pub struct SyclQueue {
    pub(crate) queue: RawQueue,
    pub(crate) context: Context,
    pub(crate) info: DeviceInfo,
    /// Whether the context can classify pointers (see [`Context::knows_usm`]).
    pub(crate) knows_usm: bool,
    pub(crate) default_context: bool,
    pub(crate) dlpack_id: Option<i32>,
    /// The event of the last command enqueued here, until a wait sees it complete. The queue is
    /// in order, so it completes after everything enqueued before it. (Waiting on it is much
    /// cheaper than a barrier: a barrier behind a large copy slows the copy down by half.)
    pub(crate) last: LastCommand<RawEvent>,
    /// Identifies this queue in the events it records (shared with them, so never reused while
    /// one is alive).
    pub(crate) identity: Arc<()>,
    /// Whether the context has several devices (then a pointer's device, not the context alone,
    /// decides the queue for its memory).
    pub(crate) multi_device_context: bool,
    /// Whether the queue was made with profiling, so that its events carry timestamps.
    pub(crate) profiling: bool,
}

impl SyclQueue {
    /// A new in-order queue on `device` in `context`.
    pub(crate) fn create(context: Context, device: Device) -> Result<SyclQueue> {
        Self::create_with(context, device, sys::DPCTLQueuePropertyType_DPCTL_IN_ORDER)
    }

    /// A new in-order queue with profiling (`property::queue::enable_profiling`): its events
    /// keep when their commands ran, so [`Queue::record_timed_event`] works on it. The runtime
    /// then timestamps every command on the queue (see docs/guide/streams.md for the cost).
    pub(crate) fn create_profiling(context: Context, device: Device) -> Result<SyclQueue> {
        let properties = sys::DPCTLQueuePropertyType_DPCTL_IN_ORDER
            | sys::DPCTLQueuePropertyType_DPCTL_ENABLE_PROFILING;
        let mut queue = Self::create_with(context, device, properties)?;
        queue.profiling = true;
        Ok(queue)
    }

    fn create_with(
        context: Context,
        device: Device,
        properties: sys::DPCTLQueuePropertyType,
    ) -> Result<SyclQueue> {
        let rt = device.rt;
        // SAFETY: both handles are live; the call catches the runtime's exceptions and returns a
        // new queue we own, or null.
        let raw = unsafe {
            rt.api().DPCTLQueue_Create(
                context.as_ptr(),
                device.as_ptr(),
                Some(report_async_error),
                properties as c_int,
            )
        };
        // SAFETY: `raw` is null or a queue we own.
        let queue = unsafe { RawQueue::from_raw(rt, raw) }.ok_or_else(|| {
            Error::runtime(SYCL, "DPCTLQueue_Create", "the SYCL runtime made no queue")
        })?;
        Ok(SyclQueue::assemble(queue, context, device))
    }

    pub(crate) fn assemble(queue: RawQueue, context: Context, device: Device) -> SyclQueue {
        let default_context =
            Context::default_for(&device).is_ok_and(|default| default.same_as(&context));
        SyclQueue {
            info: device.info(),
            knows_usm: context.knows_usm(),
            multi_device_context: context.devices().len() > 1,
            default_context,
            dlpack_id: device.dpctl_index(),
            last: LastCommand::default(),
            identity: Arc::new(()),
            profiling: false,
            queue,
            context,
        }
    }

    /// The queue devbuf uses for a root device: in-order, in the device's default context (as
    /// dpctl's own queues are), one per device and process.
    pub(crate) fn default_for(device: Device) -> Result<Arc<SyclQueue>> {
        let rt = device.rt;
        let index = device.dpctl_index().ok_or_else(|| Error::DeviceNotFound {
            selector: format!("{SYCL}:{}", device.filter_string()),
            reason: "the device is not among dpctl's root devices".into(),
        })?;
        let mut cache = queues_of(rt).default_queues.lock();
        if let Some((_, queue)) = cache.iter().find(|(cached, _)| *cached == index) {
            return Ok(Arc::clone(queue));
        }
        let queue = Arc::new(SyclQueue::create(Context::default_for(&device)?, device)?);
        cache.push((index, Arc::clone(&queue)));
        Ok(queue)
    }

    /// A queue on `device` in `context`: the cached default queue when `context` is the device's
    /// default context, else a new one.
    pub(crate) fn on_context(context: Context, device: Device) -> Result<Arc<SyclQueue>> {
        let is_default =
            Context::default_for(&device).is_ok_and(|default| default.same_as(&context));
        if is_default {
            SyclQueue::default_for(device)
        } else {
            SyclQueue::create(context, device).map(Arc::new)
        }
    }

    /// The queue for the root device a dpctl filter selector string picks ("opencl:cpu:0",
    /// "gpu", "1"), in that device's default context: SUAI's filter-string `syclobj`.
    pub fn open(rt: &'static Runtime, filter: &str) -> Result<Arc<SyclQueue>> {
        let cached = queues_of(rt)
            .filter_queues
            .lock()
            .iter()
            .find_map(|(known, queue)| (known == filter).then(|| Arc::clone(queue)));
        if let Some(queue) = cached {
            return Ok(queue);
        }
        let queue = SyclQueue::default_for(Device::from_filter(rt, filter)?)?;
        queues_of(rt)
            .filter_queues
            .lock()
            .push((filter.to_owned(), Arc::clone(&queue)));
        Ok(queue)
    }

    /// Whether the queue's context has several devices: then the queue for memory of that
    /// context depends on the pointer's device, not on the context alone.
    pub fn has_multi_device_context(&self) -> bool {
        self.multi_device_context
    }

    /// The runtime this queue belongs to.
    pub fn runtime(&self) -> &'static Runtime {
        self.queue.rt
    }

    /// Whether the queue's context is its device's default context. DLPack consumers (dpctl,
    /// dpnp) only accept memory bound to it.
    pub fn is_default_context(&self) -> bool {
        self.default_context
    }

    /// dpctl's index of the queue's (root) device, DLPack's `device_id` for kDLOneAPI; `None`
    /// for a device dpctl does not list.
    pub fn dlpack_device_id(&self) -> Option<i32> {
        self.dlpack_id
    }

    /// A fresh owned copy of the queue's context as a "SyclContextRef" payload, for SUAI's
    /// `syclobj` (destroyed with `DPCTLContext_Delete`).
    pub fn export_context_handle(&self) -> Option<ExportedHandle> {
        let api = self.runtime().api();
        let delete = *api.DPCTLContext_Delete.as_ref().ok()?;
        // SAFETY: the context is live; Copy returns a new handle, or null.
        let copy = unsafe { api.DPCTLContext_Copy(self.context.as_ptr()) };
        owned_handle(c"SyclContextRef", copy, delete)
    }

    pub(crate) fn barrier(&self) -> Result<RawEvent> {
        barrier(&self.queue)
    }

    pub(crate) fn event(&self, event: Arc<RawEvent>) -> SyclEvent {
        SyclEvent {
            event,
            recorded_by: Arc::clone(&self.identity),
            timed: false,
        }
    }

    /// Enqueues a command with `enqueue` (which returns its event, null when the runtime refused
    /// it) and records it as the last.
    pub(crate) fn submit(
        &self,
        operation: &'static str,
        enqueue: impl FnOnce(sys::DPCTLSyclQueueRef) -> sys::DPCTLSyclEventRef,
    ) -> Result<()> {
        self.last.submit(|| {
            let event = enqueue(self.queue.as_ptr());
            // SAFETY: `event` is null or an event we own.
            unsafe { RawEvent::from_raw(self.runtime(), event) }.ok_or_else(|| {
                Error::runtime(SYCL, operation, "the SYCL runtime refused the command")
            })
        })
    }
}

impl fmt::Debug for SyclQueue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SyclQueue")
            .field("device", &self.info.selector)
            .field("name", &self.info.name)
            .field("default_context", &self.default_context)
            .finish()
    }
}

impl Queue for SyclQueue {
    fn device(&self) -> &DeviceInfo {
        &self.info
    }

    fn allocate(&self, kind: MemKind, size: usize, align: usize) -> Result<NonNull<u8>> {
        // The aspect check is what keeps host allocation safe: DPCTLaligned_alloc_host lets the
        // runtime's exception escape (aborting the process) on a device without the aspect.
        if !self.info.supports(kind) {
            return Err(Error::Unsupported {
                device: self.info.selector.clone(),
                what: format!("{kind} allocation"),
                reason: self
                    .info
                    .unusable_reason
                    .clone()
                    .unwrap_or_else(|| format!("the usm_{kind}_allocations aspect is false")),
            });
        }
        let api = self.runtime().api();
        let queue = self.queue.as_ptr();
        // SAFETY: the queue is live and its device has the USM aspect for `kind` (checked above),
        // so none of the calls throws; each returns new memory or null.
        let ptr = unsafe {
            match kind {
                MemKind::Host => api.DPCTLaligned_alloc_host(align, size, queue),
                MemKind::Device => api.DPCTLaligned_alloc_device(align, size, queue),
                MemKind::Shared => api.DPCTLaligned_alloc_shared(align, size, queue),
                MemKind::Unknown => std::ptr::null_mut(),
            }
        };
        NonNull::new(ptr.cast::<u8>()).ok_or_else(|| Error::OutOfMemory {
            kind,
            size,
            device: self.info.selector.clone(),
            reason: "the SYCL runtime returned no memory (out of memory, or above the device's \
                     allocation limit)"
                .into(),
        })
    }

    unsafe fn deallocate(&self, ptr: NonNull<u8>, _kind: MemKind, _size: usize, _align: usize) {
        // Copies and fills are asynchronous: never free memory the device may still be using.
        // If waiting fails, leaking is the only safe choice.
        if !self.last.is_idle() && self.wait().is_err() {
            return;
        }
        // SAFETY: `ptr` is an allocation of this queue's context (the caller's contract) with no
        // work pending, so the runtime frees it without throwing.
        unsafe {
            self.runtime()
                .api()
                .DPCTLfree_with_queue(ptr.as_ptr().cast(), self.queue.as_ptr())
        }
    }

    /// No wait for the queue: this may run on a thread of one of its host tasks (dpnp releases the
    /// arrays it kept alive from one), behind which devbuf's later commands are queued, so a wait
    /// for them would never end. The runtime's free waits for the commands that use the memory
    /// (measured on the Intel CPU runtime), as it does for memory other libraries allocated.
    unsafe fn deallocate_unused(
        &self,
        ptr: NonNull<u8>,
        _kind: MemKind,
        _size: usize,
        _align: usize,
    ) {
        // SAFETY: `ptr` is an allocation of this queue's context (the caller's contract) that no
        // work of ours still uses, so the runtime frees it without throwing.
        unsafe {
            self.runtime()
                .api()
                .DPCTLfree_with_queue(ptr.as_ptr().cast(), self.queue.as_ptr())
        }
    }

    unsafe fn copy(&self, dst: *mut u8, src: *const u8, len: usize) -> Result<()> {
        if len == 0 {
            return Ok(());
        }
        if !self.knows_usm {
            // Without USM this queue reaches host memory only: copy it here.
            // SAFETY: the caller guarantees both ranges are valid for `len` bytes.
            unsafe { std::ptr::copy(src, dst, len) };
            return Ok(());
        }
        let api = self.runtime().api();
        self.submit("DPCTLQueue_Memcpy", |queue| {
            // SAFETY: the caller guarantees both ranges; the call catches the runtime's exceptions.
            unsafe { api.DPCTLQueue_Memcpy(queue, dst.cast(), src.cast(), len) }
        })
    }

    unsafe fn fill(&self, dst: *mut u8, byte: u8, len: usize) -> Result<()> {
        if len == 0 {
            return Ok(());
        }
        if !self.knows_usm {
            // SAFETY: the caller guarantees `dst` is valid (host memory, see `copy`) for `len`.
            unsafe { std::ptr::write_bytes(dst, byte, len) };
            return Ok(());
        }
        let api = self.runtime().api();
        self.submit("DPCTLQueue_Memset", |queue| {
            // SAFETY: the caller guarantees the range; the call catches the runtime's exceptions.
            unsafe { api.DPCTLQueue_Memset(queue, dst.cast(), byte, len) }
        })
    }

    fn wait(&self) -> Result<()> {
        // The last command's event rather than DPCTLQueue_Wait, which lets the runtime's
        // exceptions escape (DPCTLEvent_Wait catches them).
        self.last.wait(|last| self.event(Arc::clone(last)).wait())
    }

    /// Consumers that were handed this queue (SUAI's `syclobj`, DLPack's `stream`) enqueue on
    /// it through their own copies of it, which devbuf's last command does not cover: a barrier
    /// does, the queue being in order.
    fn wait_device(&self) -> Result<()> {
        self.event(Arc::new(self.barrier()?)).wait()?;
        self.wait()
    }

    fn record_event(&self) -> Result<Event> {
        let event = match self.last.get() {
            Some(last) => last,
            // Nothing of ours is pending, but work others enqueued on this queue may be.
            None => Arc::new(self.barrier()?),
        };
        Ok(Event::new(self.event(event)))
    }

    fn record_timed_event(&self) -> Result<Event> {
        if !self.profiling {
            return Err(Error::Unsupported {
                device: self.info.selector.clone(),
                what: "a timed event".into(),
                reason: "a SYCL queue keeps timestamps only when made with profiling: record on \
                         a stream made with timing=True (devbuf.Stream(device, timing=True))"
                    .into(),
            });
        }
        // A barrier: its command ends once everything enqueued before it has, whoever did it.
        let mut event = self.event(Arc::new(self.barrier()?));
        event.timed = true;
        Ok(Event::new(event))
    }

    /// Other libraries enqueue on copies of this queue, which its last command does not cover: a
    /// barrier does (what a stream's `query` means to dpctl's users too).
    ///
    /// The runtime completes a barrier on its own threads: one enqueued behind finished work is
    /// not complete at once (seen right after `synchronize()` on the CPU device under load), so
    /// it is given a short while before the queue is called busy; devbuf's own unfinished work
    /// answers at once.
    fn is_idle(&self) -> Result<bool> {
        if let Some(last) = self.last.get()
            && !self.event(last).is_complete()?
        {
            return Ok(false);
        }
        let barrier = self.event(Arc::new(self.barrier()?));
        // A monotonic clock's reading plus milliseconds: far from where an Instant ends.
        let deadline = std::time::Instant::now()
            .checked_add(BARRIER_SETTLE)
            .unwrap_or_else(std::time::Instant::now);
        loop {
            if barrier.is_complete()? {
                return Ok(true);
            }
            if std::time::Instant::now() >= deadline {
                return Ok(false);
            }
            std::thread::yield_now();
        }
    }

    fn wait_event(&self, event: &Event) -> Result<()> {
        match event.downcast_ref::<SyclEvent>() {
            // Our own event: the queue is in order, so later work already follows it.
            Some(sycl) if Arc::ptr_eq(&sycl.recorded_by, &self.identity) => Ok(()),
            Some(sycl) if std::ptr::eq(sycl.event.rt, self.runtime()) => {
                let dependencies = [sycl.event.as_ptr()];
                let api = self.runtime().api();
                self.submit("DPCTLQueue_SubmitBarrierForEvents", |queue| {
                    // SAFETY: the queue and the event are live; the call catches the runtime's
                    // exceptions and returns the barrier's event, which we own.
                    unsafe {
                        api.DPCTLQueue_SubmitBarrierForEvents(
                            queue,
                            dependencies.as_ptr(),
                            dependencies.len(),
                        )
                    }
                })
            }
            // Another runtime's event: the host waits for it.
            _ => event.wait(),
        }
    }

    fn kind_of(&self, ptr: *const u8) -> MemKind {
        classify(&self.context, self.knows_usm, ptr)
    }

    unsafe fn prefetch(&self, ptr: *const u8, len: usize, to: Location) -> Result<()> {
        // SAFETY: forwarded from our caller.
        unsafe { self.prefetch_shared(ptr, len, to) }
    }

    unsafe fn advise(&self, ptr: *const u8, len: usize, advice: Advice) -> Result<()> {
        // SAFETY: forwarded from our caller.
        unsafe { self.advise_shared(ptr, len, advice) }
    }

    fn interop(&self) -> &dyn Interop {
        self
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
