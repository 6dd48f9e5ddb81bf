//! [`SyclQueue`]: an in-order SYCL queue with its context and device, implementing devbuf's
//! [`Queue`] over USM.

use std::any::Any;
use std::ffi::{CStr, c_int, c_void};
use std::fmt;
use std::ptr::NonNull;
use std::sync::{Arc, Weak};

use devbuf_core::dlpark::ffi::{DLDevice, DLDeviceType};
use devbuf_core::extent::Holder;
use devbuf_core::{
    Buffer, DeviceInfo, Error, Event, ExportedHandle, ForeignObject, ForeignQueue, LastCommand,
    MemKind, Queue, QueueEvent, Result,
};
use devbuf_sycl_sys as sys;
use parking_lot::Mutex;

use crate::SYCL;
use crate::raw::{Context, Device, RawEvent, RawQueue};
use crate::runtime::Runtime;

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
struct RuntimeQueues {
    /// One in-order queue in the default context of each device, by dpctl device index.
    default_queues: Mutex<Vec<(i32, Arc<SyclQueue>)>>,
    /// The default queue each filter string opened (resolving one takes tens of µs).
    filter_queues: Mutex<Vec<(String, Arc<SyclQueue>)>>,
    /// The queues made for other libraries' in-order `sycl::queue`s, while devbuf uses them: the
    /// same `sycl::queue` handed over again (a dpnp array made from devbuf memory, imported back)
    /// gets the same devbuf queue.
    adopted_queues: Mutex<Vec<Weak<SyclQueue>>>,
}

/// The queues of `rt`, made on first use. Runtimes are loaded once per library and never
/// unloaded, so neither are these.
fn queues_of(rt: &'static Runtime) -> &'static RuntimeQueues {
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
    queue: RawQueue,
    context: Context,
    info: DeviceInfo,
    /// Whether the context can classify pointers (see [`Context::knows_usm`]).
    knows_usm: bool,
    default_context: bool,
    dlpack_id: Option<i32>,
    /// The event of the last command enqueued here, until a wait sees it complete. The queue is
    /// in order, so it completes after everything enqueued before it. (Waiting on it is much
    /// cheaper than a barrier: a barrier behind a large copy slows the copy down by half.)
    last: LastCommand<RawEvent>,
    /// Identifies this queue in the events it records (shared with them, so never reused while
    /// one is alive).
    identity: Arc<()>,
    /// Whether the context has several devices (then a pointer's device, not the context alone,
    /// decides the queue for its memory).
    multi_device_context: bool,
}

impl SyclQueue {
    /// A new in-order queue on `device` in `context`.
    pub(crate) fn create(context: Context, device: Device) -> Result<SyclQueue> {
        let rt = device.rt;
        // SAFETY: both handles are live; the call catches the runtime's exceptions and returns a
        // new queue we own, or null.
        let raw = unsafe {
            rt.api().DPCTLQueue_Create(
                context.as_ptr(),
                device.as_ptr(),
                Some(report_async_error),
                sys::DPCTLQueuePropertyType_DPCTL_IN_ORDER as c_int,
            )
        };
        // SAFETY: `raw` is null or a queue we own.
        let queue = unsafe { RawQueue::from_raw(rt, raw) }.ok_or_else(|| {
            Error::runtime(SYCL, "DPCTLQueue_Create", "the SYCL runtime made no queue")
        })?;
        Ok(SyclQueue::assemble(queue, context, device))
    }

    fn assemble(queue: RawQueue, context: Context, device: Device) -> SyclQueue {
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
    fn on_context(context: Context, device: Device) -> Result<Arc<SyclQueue>> {
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

    /// A queue for a `sycl::queue` someone else owns: the payload of a "SyclQueueRef" capsule
    /// (dpctl's `SyclQueue._get_capsule()`). The caller's queue is copied, never freed; when it
    /// is out of order (dpctl's default), an in-order queue on its context and device is made
    /// instead, since devbuf orders work by queue order.
    ///
    /// # Safety
    /// `queue_ref` is a live `DPCTLSyclQueueRef` (a `sycl::queue*`) of the SYCL runtime `rt`
    /// belongs to, for the duration of the call.
    pub unsafe fn from_queue_ref(
        rt: &'static Runtime,
        queue_ref: *mut c_void,
    ) -> Result<Arc<SyclQueue>> {
        if queue_ref.is_null() {
            return Err(Error::invalid("syclobj", "the SyclQueueRef is null"));
        }
        let api = rt.api();
        // SAFETY: the caller guarantees the queue; Copy returns a new handle we own, or null.
        let copy = unsafe { RawQueue::from_raw(rt, api.DPCTLQueue_Copy(queue_ref.cast())) }
            .ok_or_else(|| Error::runtime(SYCL, "DPCTLQueue_Copy", "returned null"))?;
        // SAFETY: `copy` is live; the calls return new handles we own (copies of the queue's
        // context and device, which SYCL returns without throwing).
        let (context, device) = unsafe {
            (
                Context::from_raw(rt, api.DPCTLQueue_GetContext(copy.as_ptr())),
                Device::from_raw(rt, api.DPCTLQueue_GetDevice(copy.as_ptr())),
            )
        };
        let (Some(context), Some(device)) = (context, device) else {
            return Err(Error::runtime(
                SYCL,
                "DPCTLQueue_GetContext",
                "the queue has no context or device",
            ));
        };
        // SAFETY: `copy` is live; the call reads a queue property.
        if !unsafe { api.DPCTLQueue_IsInOrder(copy.as_ptr()) } {
            return SyclQueue::on_context(context, device);
        }
        if let Some(known) = SyclQueue::known_equal_to(rt, &copy) {
            return Ok(known);
        }
        let adopted = Arc::new(SyclQueue::assemble(copy, context, device));
        let mut adopted_queues = queues_of(rt).adopted_queues.lock();
        adopted_queues.retain(|queue| queue.strong_count() > 0);
        adopted_queues.push(Arc::downgrade(&adopted));
        Ok(adopted)
    }

    /// The devbuf queue, still in use, that wraps the very `sycl::queue` `queue` is a handle to:
    /// a device's default queue, or one adopted from another library.
    fn known_equal_to(rt: &'static Runtime, queue: &RawQueue) -> Option<Arc<SyclQueue>> {
        let same = |known: &SyclQueue| {
            // SAFETY: both handles are live queues of `rt`; the call compares them.
            unsafe {
                rt.api()
                    .DPCTLQueue_AreEq(known.queue.as_ptr(), queue.as_ptr())
            }
        };
        let defaults = queues_of(rt).default_queues.lock();
        if let Some((_, known)) = defaults.iter().find(|(_, known)| same(known)) {
            return Some(Arc::clone(known));
        }
        drop(defaults);
        queues_of(rt)
            .adopted_queues
            .lock()
            .iter()
            .filter_map(Weak::upgrade)
            .find(|known| same(known))
    }

    /// Like [`SyclQueue::from_queue_ref`], for a SUAI producer's queue: also returns that queue
    /// as another library's, whose events imports of its memory wait for. For an in-order queue
    /// that is the returned queue itself (it shares the producer's); for an out-of-order one, the
    /// producer's own queue, on which a barrier is submitted.
    ///
    /// # Safety
    /// As for [`SyclQueue::from_queue_ref`].
    pub unsafe fn from_producer_queue_ref(
        rt: &'static Runtime,
        queue_ref: *mut c_void,
    ) -> Result<(Arc<SyclQueue>, Arc<dyn ForeignQueue>)> {
        // SAFETY: the caller's guarantee.
        let queue = unsafe { SyclQueue::from_queue_ref(rt, queue_ref) }?;
        // SAFETY: a live queue (checked non-null above); the call reads a queue property.
        if unsafe { rt.api().DPCTLQueue_IsInOrder(queue_ref.cast()) } {
            let producer = Arc::clone(&queue) as Arc<dyn ForeignQueue>;
            return Ok((queue, producer));
        }
        // SAFETY: the caller's guarantee.
        let producer = unsafe { ForeignSyclQueue::from_queue_ref(rt, queue_ref) }?;
        Ok((queue, Arc::new(producer)))
    }

    /// Whether the queue's context has several devices: then the queue for memory of that
    /// context depends on the pointer's device, not on the context alone.
    pub fn has_multi_device_context(&self) -> bool {
        self.multi_device_context
    }

    /// A queue on a `sycl::context` someone else owns (the payload of a "SyclContextRef"
    /// capsule, dpctl's `SyclContext._get_capsule()`), on the context's first device. The
    /// caller's context is copied, never freed.
    ///
    /// # Safety
    /// `context_ref` is a live `DPCTLSyclContextRef` (a `sycl::context*`) of the SYCL runtime
    /// `rt` belongs to, for the duration of the call.
    pub unsafe fn from_context_ref(
        rt: &'static Runtime,
        context_ref: *mut c_void,
    ) -> Result<Arc<SyclQueue>> {
        // SAFETY: the caller's guarantee.
        let context = unsafe { borrowed_context(rt, context_ref) }?;
        let device = context
            .devices()
            .into_iter()
            .next()
            .ok_or_else(|| Error::invalid("syclobj", "the SYCL context has no devices"))?;
        SyclQueue::on_context(context, device)
    }

    /// Like [`SyclQueue::from_context_ref`], but on the device `usm_ptr` was allocated for, and
    /// with the pointer's kind: what importing SUAI data bound to a context needs. Memory the
    /// context does not know is an error naming `data`.
    ///
    /// # Safety
    /// As for [`SyclQueue::from_context_ref`]; `usm_ptr` is only looked up, never dereferenced.
    pub unsafe fn from_context_ref_and_pointer(
        rt: &'static Runtime,
        context_ref: *mut c_void,
        usm_ptr: *const u8,
    ) -> Result<(Arc<SyclQueue>, MemKind)> {
        // SAFETY: the caller's guarantee.
        let context = unsafe { borrowed_context(rt, context_ref) }?;
        let kind = classify(&context, context.knows_usm(), usm_ptr);
        if kind == MemKind::Unknown {
            return Err(Error::invalid(
                "data",
                format!("{usm_ptr:p} is not USM memory of the given SYCL context"),
            ));
        }
        // SAFETY: the pointer is USM of this context (classified above), so the runtime finds
        // its device instead of throwing; the call returns a new handle we own.
        let device = unsafe {
            Device::from_raw(
                rt,
                rt.api()
                    .DPCTLUSM_GetPointerDevice(usm_ptr.cast_mut().cast(), context.as_ptr()),
            )
        }
        .ok_or_else(|| Error::runtime(SYCL, "DPCTLUSM_GetPointerDevice", "returned null"))?;
        Ok((SyclQueue::on_context(context, device)?, kind))
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

    fn barrier(&self) -> Result<RawEvent> {
        barrier(&self.queue)
    }

    fn event(&self, event: Arc<RawEvent>) -> SyclEvent {
        SyclEvent {
            event,
            recorded_by: Arc::clone(&self.identity),
        }
    }

    /// Enqueues a command with `enqueue` (which returns its event, null when the runtime refused
    /// it) and records it as the last.
    fn submit(
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

/// A second owned handle to a context the caller owns.
///
/// # Safety
/// `context_ref` is null or a live `DPCTLSyclContextRef` of the runtime `rt`.
unsafe fn borrowed_context(rt: &'static Runtime, context_ref: *mut c_void) -> Result<Context> {
    if context_ref.is_null() {
        return Err(Error::invalid("syclobj", "the SyclContextRef is null"));
    }
    // SAFETY: the caller's guarantee.
    unsafe { Context::copy_from(rt, context_ref.cast()) }
}

/// The USM kind of `ptr` in `context`; Unknown for memory the context does not know.
fn classify(context: &Context, knows_usm: bool, ptr: *const u8) -> MemKind {
    if ptr.is_null() || !knows_usm {
        return MemKind::Unknown;
    }
    // SAFETY: the context is live and knows USM, so the runtime answers instead of throwing; the
    // pointer is only looked up, never dereferenced.
    let usm_type = unsafe {
        context
            .rt
            .api()
            .DPCTLUSM_GetPointerType(ptr.cast_mut().cast(), context.as_ptr())
    };
    match usm_type {
        sys::DPCTLSyclUSMType_DPCTL_USM_HOST => MemKind::Host,
        sys::DPCTLSyclUSMType_DPCTL_USM_DEVICE => MemKind::Device,
        sys::DPCTLSyclUSMType_DPCTL_USM_SHARED => MemKind::Shared,
        _ => MemKind::Unknown,
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

    /// Other libraries enqueue on copies of this queue (SUAI's `syclobj`, dpctl's `sycl_queue`,
    /// DLPack's `stream`): dpnp does for every operation on devbuf memory.
    fn untracked_foreign_work(&self) -> bool {
        true
    }

    /// The queue is in order, and their copies of it are the same queue: work enqueued here
    /// already follows theirs. For the host and other queues, a barrier covers it.
    fn foreign_work_event(&self) -> Result<Option<Event>> {
        Ok(Some(Event::new(self.event(Arc::new(self.barrier()?)))))
    }

    /// Other libraries' own queues (dpctl's default ones) are out of [`Queue::wait_device`]'s
    /// sight; the runtime's own free waits for their commands on the memory.
    fn wait_device_covers_every_queue(&self) -> bool {
        false
    }

    fn record_event(&self) -> Result<Event> {
        let event = match self.last.get() {
            Some(last) => last,
            // Nothing of ours is pending, but work others enqueued on this queue may be.
            None => Arc::new(self.barrier()?),
        };
        Ok(Event::new(self.event(event)))
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

    /// dpctl's C API tells a USM pointer's type and device in a context, not the bounds of its
    /// allocation (SYCL has no such query; Level Zero's `zeMemGetAddressRange` is not reachable
    /// through it): an import's span is checked at its first and last byte (same USM type, same
    /// device, in this queue's context). The bytes between are not: a span over two neighbouring
    /// allocations of the same type and device passes.
    fn holder_of(&self, ptr: *const u8) -> Result<Holder> {
        let kind = self.kind_of(ptr);
        if kind == MemKind::Unknown {
            return Ok(Holder::Unknown);
        }
        if !self.multi_device_context {
            // One device in the context: the USM type there says the device too.
            return Ok(Holder::Unbounded { kind, place: 0 });
        }
        let rt = self.runtime();
        // SAFETY: the pointer is USM of this context (classified above), so the runtime finds
        // its device instead of throwing; the call returns a new handle we own.
        let device = unsafe {
            Device::from_raw(
                rt,
                rt.api()
                    .DPCTLUSM_GetPointerDevice(ptr.cast_mut().cast(), self.context.as_ptr()),
            )
        }
        .ok_or_else(|| Error::runtime(SYCL, "DPCTLUSM_GetPointerDevice", "returned null"))?;
        // SAFETY: a live device handle; hashing does not throw.
        let place = unsafe { rt.api().DPCTLDevice_Hash(device.as_ptr()) } as u64;
        Ok(Holder::Unbounded { kind, place })
    }

    fn dlpack_device(&self, _kind: MemKind) -> DLDevice {
        DLDevice {
            device_type: DLDeviceType::ONEAPI,
            device_id: self.dlpack_id.unwrap_or(-1),
        }
    }

    /// A fresh owned copy of this queue as a "SyclQueueRef" payload (destroyed with
    /// `DPCTLQueue_Delete`).
    fn export_handle(&self) -> Option<ExportedHandle> {
        let api = self.runtime().api();
        let delete = *api.DPCTLQueue_Delete.as_ref().ok()?;
        // SAFETY: the queue is live; Copy returns a new handle, or null.
        let copy = unsafe { api.DPCTLQueue_Copy(self.queue.as_ptr()) };
        owned_handle(c"SyclQueueRef", copy, delete)
    }

    /// The `sycl::queue*` itself: what DLPack's exchange API names for kDLOneAPI.
    fn dlpack_work_stream(&self) -> Option<usize> {
        Some(self.queue.as_ptr() as usize)
    }

    fn as_foreign_queue(self: Arc<Self>) -> Option<Arc<dyn ForeignQueue>> {
        Some(self)
    }

    fn ipc(&self) -> Result<&dyn devbuf_core::IpcSharing> {
        Err(devbuf_core::ipc::unsupported(
            &self.info,
            "dpctl's SYCL C API has no inter-process handles for USM, and the runtimes it runs on \
             here (OpenCL) have none either; Level Zero's IPC (zeMemGetIpcHandle) is not reachable \
             through it",
        ))
    }

    fn dlpack_export_refusal(&self) -> Option<String> {
        self.dlpack_refusal()
    }

    unsafe fn order_dlpack_export(
        &self,
        buffer: &Buffer,
        device: DLDevice,
        stream: &ForeignObject<'_>,
    ) -> Option<Result<()>> {
        // SAFETY: the caller's promise about handles.
        unsafe { self.order_dlpack_export_on(buffer, device, stream) }
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// This queue as other libraries holding a copy of it see it: its events must cover their work
/// too, so they are barriers, never devbuf's last command.
impl ForeignQueue for SyclQueue {
    fn record_event(&self) -> Result<Event> {
        Ok(Event::new(self.event(Arc::new(self.barrier()?))))
    }

    fn wait_event(&self, event: &Event) -> Result<()> {
        Queue::wait_event(self, event)
    }
}

/// Another library's `sycl::queue` (dpctl's out-of-order default queue, or the queue a DLPack
/// consumer passes as `stream`): devbuf submits barriers on it, never work of its own.
#[derive(Debug)]
pub struct ForeignSyclQueue {
    queue: RawQueue,
    /// Identifies the events recorded here (see [`SyclQueue`]'s).
    identity: Arc<()>,
}

impl ForeignSyclQueue {
    /// A handle of our own to the queue a "SyclQueueRef" payload names (copied, never freed).
    ///
    /// # Safety
    /// `queue_ref` is a live `DPCTLSyclQueueRef` (a `sycl::queue*`) of the SYCL runtime `rt`
    /// belongs to, for the duration of the call.
    pub unsafe fn from_queue_ref(
        rt: &'static Runtime,
        queue_ref: *mut c_void,
    ) -> Result<ForeignSyclQueue> {
        if queue_ref.is_null() {
            return Err(Error::invalid("stream", "the SyclQueueRef is null"));
        }
        // SAFETY: the caller guarantees the queue; Copy returns a new handle we own, or null.
        let queue = unsafe { RawQueue::from_raw(rt, rt.api().DPCTLQueue_Copy(queue_ref.cast())) }
            .ok_or_else(|| Error::runtime(SYCL, "DPCTLQueue_Copy", "returned null"))?;
        Ok(ForeignSyclQueue {
            queue,
            identity: Arc::new(()),
        })
    }
}

impl ForeignQueue for ForeignSyclQueue {
    fn record_event(&self) -> Result<Event> {
        Ok(Event::new(SyclEvent {
            event: Arc::new(barrier(&self.queue)?),
            recorded_by: Arc::clone(&self.identity),
        }))
    }

    fn wait_event(&self, event: &Event) -> Result<()> {
        match event.downcast_ref::<SyclEvent>() {
            Some(sycl) if Arc::ptr_eq(&sycl.recorded_by, &self.identity) => {
                // Our own barrier: only an in-order queue is sure to run later work after it.
                // SAFETY: the queue is live; the call reads a queue property.
                if unsafe {
                    self.queue
                        .rt
                        .api()
                        .DPCTLQueue_IsInOrder(self.queue.as_ptr())
                } {
                    Ok(())
                } else {
                    barrier_for(&self.queue, sycl).map(drop)
                }
            }
            Some(sycl) if std::ptr::eq(sycl.event.rt, self.queue.rt) => {
                barrier_for(&self.queue, sycl).map(drop)
            }
            // Another runtime's event: the host waits for it.
            _ => event.wait(),
        }
    }
}

/// Submits a barrier on `queue`: its event completes after all work enqueued there so far.
fn barrier(queue: &RawQueue) -> Result<RawEvent> {
    // SAFETY: the queue is live; the call catches the runtime's exceptions.
    let event = unsafe { queue.rt.api().DPCTLQueue_SubmitBarrier(queue.as_ptr()) };
    // SAFETY: `event` is null or an event we own.
    unsafe { RawEvent::from_raw(queue.rt, event) }.ok_or_else(|| {
        Error::runtime(
            SYCL,
            "DPCTLQueue_SubmitBarrier",
            "the SYCL runtime refused it",
        )
    })
}

/// Submits a barrier on `queue` that waits for `event` (of the same runtime): work enqueued
/// there later runs after it, and the host does not block.
fn barrier_for(queue: &RawQueue, event: &SyclEvent) -> Result<RawEvent> {
    let dependencies = [event.event.as_ptr()];
    // SAFETY: the queue and the event are live and of one runtime; the call catches the
    // runtime's exceptions and returns the barrier's event, which we own.
    let barrier = unsafe {
        queue.rt.api().DPCTLQueue_SubmitBarrierForEvents(
            queue.as_ptr(),
            dependencies.as_ptr(),
            dependencies.len(),
        )
    };
    // SAFETY: `barrier` is null or an event we own.
    unsafe { RawEvent::from_raw(queue.rt, barrier) }.ok_or_else(|| {
        Error::runtime(
            SYCL,
            "DPCTLQueue_SubmitBarrierForEvents",
            "the SYCL runtime refused it",
        )
    })
}

/// A point in a SYCL queue's work: the event of its last command, or of a barrier.
#[derive(Debug)]
pub struct SyclEvent {
    event: Arc<RawEvent>,
    /// The identity of the [`SyclQueue`] that recorded it.
    recorded_by: Arc<()>,
}

impl SyclEvent {
    fn status(&self) -> sys::DPCTLSyclEventStatusType {
        // SAFETY: the event is live; the call catches the runtime's exceptions.
        unsafe {
            self.event
                .rt
                .api()
                .DPCTLEvent_GetCommandExecutionStatus(self.event.as_ptr())
        }
    }
}

impl QueueEvent for SyclEvent {
    fn wait(&self) -> Result<()> {
        // SAFETY: the event is live; the call catches the runtime's exceptions.
        unsafe { self.event.rt.api().DPCTLEvent_Wait(self.event.as_ptr()) };
        match self.status() {
            sys::DPCTLSyclEventStatusType_DPCTL_COMPLETE => Ok(()),
            status => Err(Error::runtime(
                SYCL,
                "DPCTLEvent_Wait",
                format!("the event is not complete after waiting (status {status})"),
            )),
        }
    }

    fn is_complete(&self) -> Result<bool> {
        match self.status() {
            sys::DPCTLSyclEventStatusType_DPCTL_UNKNOWN_STATUS => Err(Error::runtime(
                SYCL,
                "DPCTLEvent_GetCommandExecutionStatus",
                "the SYCL runtime could not say",
            )),
            status => Ok(status == sys::DPCTLSyclEventStatusType_DPCTL_COMPLETE),
        }
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// A handle we own (a fresh copy, or null when the copy failed) given away as `name`, released
/// with the C API's `delete` for its type.
fn owned_handle<T>(
    name: &'static CStr,
    handle: *mut T,
    delete: unsafe extern "C" fn(*mut T),
) -> Option<ExportedHandle> {
    Some(ExportedHandle {
        name,
        ptr: NonNull::new(handle)?.cast(),
        // SAFETY: same ABI (one pointer argument, no result); the library is never unloaded.
        destroy: unsafe {
            std::mem::transmute::<unsafe extern "C" fn(*mut T), unsafe extern "C" fn(*mut c_void)>(
                delete,
            )
        },
    })
}
