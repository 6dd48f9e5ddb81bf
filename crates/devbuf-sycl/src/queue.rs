//! [`SyclQueue`]: the SYCL queue devbuf hands out with its memory and the in-order queue its own
//! commands run on, with their context and device, implementing devbuf's [`Queue`] over USM.

use std::any::Any;
use std::ffi::c_int;
use std::fmt;
use std::ptr::NonNull;
use std::sync::{Arc, Weak};

use devbuf_core::{
    Advice, DeviceInfo, Error, Event, ExportedHandle, ForeignObject, Interop, LastCommand,
    Location, MemKind, Queue, QueueEvent, Result, Rows, copy_row_by_row,
};
use devbuf_sycl_sys as sys;
use parking_lot::Mutex;

use crate::event::{SyclEvent, barrier, barrier_for, through_the_scheduler};
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
    /// The default queue of each device ([`SyclQueue::default_for`]), by dpctl device index.
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

/// A SYCL queue on one device and context, as devbuf uses it: the `sycl::queue` other libraries
/// are handed and enqueue on, and devbuf's own in-order queue for its commands, which is that same
/// queue when it runs in order and a private one beside it when it does not (docs/architecture.md,
/// "Where memory is handed out").
pub struct SyclQueue {
    /// The `sycl::queue` other libraries are handed (SUAI's `syclobj`, dpctl's `sycl_queue`,
    /// DLPack's `stream` and work stream) and enqueue on: for a device's default queue, the queue
    /// dpnp makes its arrays on (dpctl's cached queue, out of order); for an adopted queue, that
    /// queue; for a user's new stream, its own in-order queue.
    pub(crate) handed_out: RawQueue,
    /// devbuf's commands run here, in order: a handle to `handed_out` when that runs in order,
    /// else a private queue on its device and context.
    pub(crate) commands: RawQueue,
    /// Whether `commands` is not `handed_out`: other libraries' work there is then ordered with
    /// devbuf's by barriers on `handed_out` (`sycl_ext_oneapi_enqueue_barrier`), both ways.
    pub(crate) split: bool,
    pub(crate) context: Context,
    pub(crate) info: DeviceInfo,
    /// Whether the context can classify pointers (see [`Context::knows_usm`]).
    pub(crate) knows_usm: bool,
    pub(crate) default_context: bool,
    pub(crate) dlpack_id: Option<i32>,
    /// The event of the last command enqueued on `commands`, until a wait sees it complete. The
    /// queue is in order, so it completes after everything enqueued before it. (Waiting on it is
    /// much cheaper than a barrier: a barrier behind a large copy slows the copy down by half.)
    pub(crate) last: LastCommand<RawEvent>,
    /// Identifies the events recorded on `commands` (shared with them, so never reused while one
    /// is alive).
    pub(crate) identity: Arc<()>,
    /// Identifies the events recorded on `handed_out`: `identity` itself when not split.
    pub(crate) handed_out_identity: Arc<()>,
    /// Whether the context has several devices (then a pointer's device, not the context alone,
    /// decides the queue for its memory).
    pub(crate) multi_device_context: bool,
    /// Whether `commands` was made with profiling, so that its events carry timestamps. devbuf
    /// makes its queues so (the cost is within noise: docs/guide/streams.md, "Timing").
    pub(crate) profiling: bool,
    /// Whether the device is the host's processor (a CPU device): its host-accessible memory is
    /// then the host's own ([`Queue::on_the_host_processor`]).
    pub(crate) on_the_host_processor: bool,
    /// Rows copied on this context and device, and the kernel that copies them at once
    /// ([`crate::row_kernel`]), shared by every queue on them.
    pub(crate) row_copies: Arc<crate::row_kernel::RowCopies>,
}

/// The properties of the in-order queues devbuf makes: timestamps on, so that any stream times
/// (`record(timing=True)`) as CUDA's do.
const IN_ORDER_TIMED: sys::DPCTLQueuePropertyType =
    sys::DPCTLQueuePropertyType_DPCTL_IN_ORDER | sys::DPCTLQueuePropertyType_DPCTL_ENABLE_PROFILING;

/// Makes a `sycl::queue` on `device` in `context` with `properties`.
fn make_queue(
    context: &Context,
    device: &Device,
    properties: sys::DPCTLQueuePropertyType,
) -> Result<RawQueue> {
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
    unsafe { RawQueue::from_raw(rt, raw) }
        .ok_or_else(|| Error::runtime(SYCL, "DPCTLQueue_Create", "the SYCL runtime made no queue"))
}

/// A second owned handle to the `sycl::queue` of `queue`.
fn copy_queue(queue: &RawQueue) -> Result<RawQueue> {
    // SAFETY: the queue is live; Copy returns a new handle we own, or null.
    unsafe { RawQueue::from_raw(queue.rt, queue.rt.api().DPCTLQueue_Copy(queue.as_ptr())) }
        .ok_or_else(|| Error::runtime(SYCL, "DPCTLQueue_Copy", "returned null"))
}

impl SyclQueue {
    /// A new in-order queue on `device` in `context` (a user's stream, or memory of a context
    /// other than the device's default), which times its work.
    pub(crate) fn create(context: Context, device: Device) -> Result<SyclQueue> {
        let queue = make_queue(&context, &device, IN_ORDER_TIMED)?;
        SyclQueue::handing_out(queue, context, device)
    }

    /// The devbuf queue that hands out `queue`, a `sycl::queue` on `device` in `context`: its
    /// commands run on `queue` itself when it is in order, else on a new in-order queue beside
    /// it.
    pub(crate) fn handing_out(
        queue: RawQueue,
        context: Context,
        device: Device,
    ) -> Result<SyclQueue> {
        let api = queue.rt.api();
        // SAFETY: `queue` is live; the calls read queue properties.
        let (in_order, profiling) = unsafe {
            (
                api.DPCTLQueue_IsInOrder(queue.as_ptr()),
                api.DPCTLQueue_HasEnableProfiling(queue.as_ptr()),
            )
        };
        let (commands, profiling) = if in_order {
            (copy_queue(&queue)?, profiling)
        } else {
            (make_queue(&context, &device, IN_ORDER_TIMED)?, true)
        };
        let default_context =
            Context::default_for(&device).is_ok_and(|default| default.same_as(&context));
        let identity = Arc::new(());
        let handed_out_identity = if in_order {
            Arc::clone(&identity)
        } else {
            Arc::new(())
        };
        let row_copies = crate::row_kernel::copies_for(&context, &device)?;
        Ok(SyclQueue {
            row_copies,
            on_the_host_processor: device.is_host_processor(),
            info: device.info(),
            knows_usm: context.knows_usm(),
            multi_device_context: context.devices().len() > 1,
            default_context,
            dlpack_id: device.dpctl_index(),
            last: LastCommand::default(),
            identity,
            handed_out_identity,
            profiling,
            split: !in_order,
            handed_out: queue,
            commands,
            context,
        })
    }

    /// The queue devbuf uses for a root device: in the device's default context (as dpctl's own
    /// queues are), one per device and process, handing out the queue dpnp makes its arrays on
    /// (dpctl's cached queue for the device, as [`devbuf_core::ecosystem`] finds it) or, where
    /// none can be found, an out-of-order queue devbuf makes as dpctl would.
    pub(crate) fn default_for(device: Device) -> Result<Arc<SyclQueue>> {
        let rt = device.rt;
        let index = device.dpctl_index().ok_or_else(|| Error::DeviceNotFound {
            selector: format!("{SYCL}:{}", device.filter_string()),
            reason: "the device is not among dpctl's root devices".into(),
        })?;
        let cached = |index| {
            queues_of(rt)
                .default_queues
                .lock()
                .iter()
                .find(|(cached, _)| *cached == index)
                .map(|(_, queue)| Arc::clone(queue))
        };
        if let Some(queue) = cached(index) {
            return Ok(queue);
        }
        // Asked with no lock held: the source may run Python code.
        let context = Context::default_for(&device)?;
        let handed_out = match ecosystem_default_queue(&device, &context) {
            Some(queue) => queue,
            None => make_queue(
                &context,
                &device,
                sys::DPCTLQueuePropertyType_DPCTL_DEFAULT_PROPERTY,
            )?,
        };
        let made = Arc::new(SyclQueue::handing_out(handed_out, context, device)?);
        let mut cache = queues_of(rt).default_queues.lock();
        // Another thread may have made one meanwhile: the first one stays.
        if let Some((_, queue)) = cache.iter().find(|(cached, _)| *cached == index) {
            return Ok(Arc::clone(queue));
        }
        cache.push((index, Arc::clone(&made)));
        Ok(made)
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
        self.commands.rt
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

    /// A barrier on the queue handed out: its event completes once everything enqueued there so
    /// far has, by other libraries (and, when not split, by devbuf).
    pub(crate) fn handed_out_barrier(&self) -> Result<SyclEvent> {
        Ok(SyclEvent {
            event: Arc::new(barrier(&self.handed_out)?),
            recorded_by: Arc::clone(&self.handed_out_identity),
            timed: false,
        })
    }

    pub(crate) fn event(&self, event: Arc<RawEvent>) -> SyclEvent {
        SyclEvent {
            event,
            recorded_by: Arc::clone(&self.identity),
            timed: false,
        }
    }

    /// An event that completes once all work enqueued so far has, by devbuf and by the libraries
    /// the queue was handed to: a barrier on the queue handed out (which covers devbuf's commands
    /// too where they run there, or when none is pending beside it); else the command queue's next
    /// event, once it waits for such a barrier.
    pub(crate) fn all_work_event(&self) -> Result<Event> {
        if !self.split || self.last.is_idle() {
            return Ok(Event::new(self.handed_out_barrier()?));
        }
        self.order_commands_after_handed_out()?;
        Queue::record_event(self)
    }

    /// Makes devbuf's later commands wait for everything enqueued so far on the queue handed out
    /// (nothing to do when that is the command queue itself: it runs in order).
    pub(crate) fn order_commands_after_handed_out(&self) -> Result<()> {
        if !self.split {
            return Ok(());
        }
        let others = self.handed_out_barrier()?;
        self.enqueue_wait(&others)
    }

    /// Makes work other libraries enqueue from now on on the queue handed out follow `event`: a
    /// barrier there that waits for it, SYCL's own promise (`sycl_ext_oneapi_enqueue_barrier`),
    /// which a consumer that submits by queue order follows; and `event` joins the record of work
    /// the libraries that submit by their own record follow (dpctl's `SequentialOrderManager`, by
    /// which dpnp and dpnp.tensor submit: [`devbuf_core::ecosystem::order_next_work_after`]),
    /// since the barrier did not order their next kernels (measured on the Intel CPU runtime:
    /// docs/architecture.md, "Where memory is handed out"). Where they cannot be told, the host
    /// waits for the event.
    pub(crate) fn order_handed_out_after_event(&self, event: &SyclEvent) -> Result<()> {
        barrier_for(&self.handed_out, event)?;
        let told = match (Interop::export_handle(self), event.export_handle()) {
            (Some(queue), Some(event)) => devbuf_core::ecosystem::order_next_work_after(
                devbuf_core::Protocol::Suai,
                queue,
                event,
            ),
            _ => false,
        };
        if told { Ok(()) } else { event.wait() }
    }

    /// Enqueues on the command queue a barrier that waits for `event`, recorded as the last
    /// command.
    fn enqueue_wait(&self, event: &SyclEvent) -> Result<()> {
        let dependencies = [event.event.as_ptr()];
        let api = self.runtime().api();
        self.submit("DPCTLQueue_SubmitBarrierForEvents", |queue| {
            // SAFETY: the queue and the event are live; the call catches the runtime's exceptions
            // and returns the barrier's event, which we own.
            unsafe {
                api.DPCTLQueue_SubmitBarrierForEvents(
                    queue,
                    dependencies.as_ptr(),
                    dependencies.len(),
                )
            }
        })
    }

    /// Enqueues a command on the command queue with `enqueue` (which returns its event, null when
    /// the runtime refused it) and records it as the last.
    pub(crate) fn submit(
        &self,
        operation: &'static str,
        enqueue: impl FnOnce(sys::DPCTLSyclQueueRef) -> sys::DPCTLSyclEventRef,
    ) -> Result<()> {
        through_the_scheduler(|| {
            self.last.submit(|| {
                let event = enqueue(self.commands.as_ptr());
                // SAFETY: `event` is null or an event we own.
                unsafe { RawEvent::from_raw(self.runtime(), event) }.ok_or_else(|| {
                    Error::runtime(SYCL, operation, "the SYCL runtime refused the command")
                })
            })
        })
    }
}

/// The queue the consumers of SUAI memory keep by default for `device` (dpctl's cached queue), as
/// a handle of ours, when it is one of this runtime's queues on that device in `context`.
fn ecosystem_default_queue(device: &Device, context: &Context) -> Option<RawQueue> {
    let rt = device.rt;
    let mut found = None;
    devbuf_core::ecosystem::with_default_queue(
        devbuf_core::Protocol::Suai,
        &device.filter_string(),
        &mut |object| {
            let ForeignObject::Handle { name, ptr } = object else {
                return;
            };
            if name.to_bytes() != b"SyclQueueRef" || *ptr == 0 {
                return;
            }
            // SAFETY: a live "SyclQueueRef" payload of the runtime dpctl loaded, which is `rt`'s
            // library (the source's promise); Copy returns a new handle we own, or null.
            found = unsafe { RawQueue::from_raw(rt, rt.api().DPCTLQueue_Copy(*ptr as *mut _)) };
        },
    );
    let queue = found?;
    // SAFETY: `queue` is live; the calls return new handles we own.
    let (its_context, its_device) = unsafe {
        (
            Context::from_raw(rt, rt.api().DPCTLQueue_GetContext(queue.as_ptr()))?,
            Device::from_raw(rt, rt.api().DPCTLQueue_GetDevice(queue.as_ptr()))?,
        )
    };
    (its_context.same_as(context) && its_device.same_as(device)).then_some(queue)
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

    /// A CPU device's.
    fn on_the_host_processor(&self) -> bool {
        self.on_the_host_processor
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
        let queue = self.commands.as_ptr();
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

    /// `sycl::free`, at once: core waited for the work on the memory, or, for memory handed out,
    /// leaves other libraries' work to the runtime's free, which waits for the commands that use
    /// the memory (measured on the Intel CPU runtime). It may run on a thread of another library's
    /// host task (dpnp releases the arrays it kept alive from one): it never waits for a queue.
    unsafe fn deallocate(&self, ptr: NonNull<u8>, _kind: MemKind, _size: usize, _align: usize) {
        // SAFETY: `ptr` is an allocation of this queue's context (the caller's contract) that no
        // work of ours still uses, so the runtime frees it without throwing.
        unsafe {
            self.runtime()
                .api()
                .DPCTLfree_with_queue(ptr.as_ptr().cast(), self.commands.as_ptr())
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

    unsafe fn copy_rows(&self, dst: *mut u8, src: *const u8, rows: Rows) -> Result<()> {
        // SAFETY: the caller's, for either way.
        unsafe {
            if self.copy_rows_at_once(dst, src, rows)? {
                return Ok(());
            }
            copy_row_by_row(self, dst, src, rows)
        }
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

    /// Every devbuf queue of the device (this one, the device's default queue, the streams made
    /// or adopted on it): their commands, and other libraries' work on the queues they hand out
    /// (their copies of those queues, which devbuf's last command does not cover: a barrier does).
    fn wait_device(&self) -> Result<()> {
        let queues = queues_of(self.runtime());
        let mut on_device: Vec<Arc<SyclQueue>> = queues
            .default_queues
            .lock()
            .iter()
            .map(|(_, queue)| Arc::clone(queue))
            .collect();
        on_device.extend(
            queues
                .adopted_queues
                .lock()
                .iter()
                .filter_map(Weak::upgrade),
        );
        on_device.retain(|queue| queue.info.selector == self.info.selector);
        std::iter::once(self)
            .chain(on_device.iter().map(|queue| &**queue))
            .try_for_each(|queue| {
                queue.handed_out_barrier()?.wait()?;
                queue.wait()
            })
    }

    fn record_event(&self) -> Result<Event> {
        let event = match self.last.get() {
            Some(last) => self.event(last),
            // Nothing of ours is pending, but work others enqueued on this queue may be.
            None if !self.split => self.handed_out_barrier()?,
            // Nothing is pending on the private command queue: an event that is complete.
            None => {
                // SAFETY: the call makes a new default (complete) event we own, or null.
                let made = unsafe {
                    RawEvent::from_raw(self.runtime(), self.runtime().api().DPCTLEvent_Create())
                };
                self.event(Arc::new(made.ok_or_else(|| {
                    Error::runtime(SYCL, "DPCTLEvent_Create", "returned null")
                })?))
            }
        };
        Ok(Event::new(event))
    }

    fn keeps_time(&self) -> bool {
        self.profiling
    }

    /// A barrier on the command queue, after the work others enqueued on the queue handed out:
    /// its command ends once everything enqueued before it has, whoever did it.
    fn record_timed_event(&self) -> Result<Event> {
        if !self.profiling {
            return Err(Error::Unsupported {
                device: self.info.selector.clone(),
                what: "a timed event".into(),
                reason: "this SYCL queue was made by another library without \
                         property::queue::enable_profiling, so its events keep no timestamps: \
                         time on a stream devbuf made (they all time)"
                    .into(),
            });
        }
        self.order_commands_after_handed_out()?;
        let mut event = self.event(Arc::new(barrier(&self.commands)?));
        event.timed = true;
        Ok(Event::new(event))
    }

    /// Other libraries enqueue on copies of the queue handed out, which devbuf's last command does
    /// not cover: a barrier there does (what a stream's `query` means to dpctl's users too).
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
        let barrier = self.handed_out_barrier()?;
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
            // Our own command's event: the command queue is in order, so later work follows it.
            Some(sycl) if Arc::ptr_eq(&sycl.recorded_by, &self.identity) => Ok(()),
            Some(sycl) if std::ptr::eq(sycl.event.rt, self.runtime()) => self.enqueue_wait(sycl),
            // Another runtime's event: the host waits for it.
            _ => event.wait(),
        }
    }

    /// dpctl refuses a null pointer in `__sycl_usm_array_interface__` ("the pointer 0x0 is not
    /// bound to SyclContext"), even for no elements, and so do dpnp's arrays built on it: an empty
    /// buffer owns a 1-byte allocation, as dpnp's own empty arrays do.
    fn empty_buffers_are_null(&self) -> bool {
        false
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
