//! The traits every backend implements: [`Queue`] (one device and context) and [`Backend`]
//! (discovery and availability).
//!
//! The trait is deliberately small, in the spirit of RMM's `device_memory_resource` and wgpu-hal:
//! raw allocation, ordered copies and fills, waits, and pointer classification. Ownership,
//! sub-views and the exchange protocols are built once on top of it ([`crate::Buffer`],
//! [`crate::interface`]).

use std::any::Any;
use std::ffi::{CStr, c_void};
use std::fmt;
use std::ptr::NonNull;
use std::sync::Arc;

use dlpark::ffi::DLDevice;

use crate::exchange::{ForeignObject, Protocol, ResolvedQueue};
use crate::extent::Holder;
use crate::ipc::{self, IpcSharing};
use crate::{Buffer, DeviceInfo, MemKind, Result, StreamOptions, StreamOwner};

/// A device and context with an in-order stream of work on it.
///
/// Implementations never panic and never let a foreign exception reach Rust: every runtime
/// failure is an [`crate::Error`].
pub trait Queue: Send + Sync + fmt::Debug + 'static {
    /// The device this queue runs on.
    fn device(&self) -> &DeviceInfo;

    /// Whether this queue can allocate `kind` memory.
    fn supports(&self, kind: MemKind) -> bool {
        self.device().supports(kind)
    }

    /// Whether the host CPU may dereference memory of `kind` that this queue allocated.
    fn host_accessible(&self, kind: MemKind) -> bool {
        matches!(kind, MemKind::Host | MemKind::Shared)
    }

    /// Allocates `size` bytes (never 0: [`crate::Buffer`] rounds 0 up) aligned to `align` (a power
    /// of two). The memory must be released with [`Queue::deallocate`] with the same arguments.
    fn allocate(&self, kind: MemKind, size: usize, align: usize) -> Result<NonNull<u8>>;

    /// Whether memory of `kind` from [`Queue::allocate`] becomes usable only when this queue's
    /// work reaches the allocation (a stream-ordered allocator, whose block may still be in use
    /// by its previous owner's queued work): [`crate::Buffer`] then records the allocation as
    /// pending work, which other queues, host views and exports wait for.
    fn allocates_in_order(&self, _kind: MemKind) -> bool {
        false
    }

    /// Releases memory from [`Queue::allocate`], after the work already enqueued on this queue
    /// (stream-ordered where the runtime can, else by waiting when work is pending).
    ///
    /// # Safety
    /// `ptr`, `kind`, `size` and `align` are exactly those of one earlier successful `allocate` on
    /// this queue, the memory is released once, and no other queue has pending work on it.
    unsafe fn deallocate(&self, ptr: NonNull<u8>, kind: MemKind, size: usize, align: usize);

    /// Releases memory from [`Queue::allocate`] that no work devbuf enqueued can still be using
    /// (the caller knows: [`crate::Buffer`] tracks that work per allocation), without waiting for
    /// the queue's other work. Defaults to [`Queue::deallocate`].
    ///
    /// # Safety
    /// As for [`Queue::deallocate`], and no work devbuf enqueued on the memory is still running.
    unsafe fn deallocate_unused(&self, ptr: NonNull<u8>, kind: MemKind, size: usize, align: usize) {
        // SAFETY: the caller's guarantees are `deallocate`'s.
        unsafe { self.deallocate(ptr, kind, size, align) }
    }

    /// Enqueues a copy of `len` bytes, ordered after earlier work on this queue. The copy may still
    /// be running when this returns: call [`Queue::wait`] before the host reads `dst` or reuses `src`.
    ///
    /// # Safety
    /// Both ranges are valid for `len` bytes, reachable by this queue (its own allocations or host
    /// memory), do not overlap, and stay alive until the copy completes.
    unsafe fn copy(&self, dst: *mut u8, src: *const u8, len: usize) -> Result<()>;

    /// Enqueues setting `len` bytes at `dst` to `byte`, ordered like [`Queue::copy`]. Memory the
    /// runtime will not set is set from the host only where the runtime shows it is host memory;
    /// elsewhere the runtime's error is returned (an address it does not know may be a device's).
    ///
    /// # Safety
    /// `dst` is valid for `len` bytes, reachable by this queue, and alive until the fill completes.
    unsafe fn fill(&self, dst: *mut u8, byte: u8, len: usize) -> Result<()>;

    /// Blocks the calling thread until all work enqueued so far has completed.
    fn wait(&self) -> Result<()>;

    /// Blocks until all work on this queue's device and context has completed, whichever library
    /// enqueued it (foreign streams included, where the runtime can tell). Memory that was handed
    /// to other libraries is only released after this, since their work on it is not ordered with
    /// ours. Defaults to [`Queue::wait`].
    fn wait_device(&self) -> Result<()> {
        self.wait()
    }

    /// Whether [`Queue::wait_device`] covers every queue other libraries may use this queue's
    /// memory on, so that a pool may hand memory they were given out again after it. Where it
    /// does not (SYCL: other libraries' own queues are out of its sight, and only the runtime's
    /// own free waits for their work on the memory), a pool gives such memory back to the
    /// runtime instead.
    fn wait_device_covers_every_queue(&self) -> bool {
        true
    }

    /// Records an event that completes when all work enqueued so far has completed.
    fn record_event(&self) -> Result<Event>;

    /// Records an event like [`Queue::record_event`] that also carries when it completed, for
    /// [`Event::elapsed_ms_since`]; an [`crate::Error::Unsupported`] where the runtime keeps no
    /// such time for this queue.
    fn record_timed_event(&self) -> Result<Event> {
        Err(crate::Error::Unsupported {
            device: self.device().selector.clone(),
            what: "a timed event".into(),
            reason: format!(
                "the {} backend's events carry no timing",
                self.device().backend
            ),
        })
    }

    /// Makes work enqueued on this queue from now on wait for `event`, without blocking the host
    /// where the runtime allows it.
    fn wait_event(&self, event: &Event) -> Result<()>;

    /// Whether all work enqueued so far has completed, without blocking. The default asks an
    /// event recorded now, which a runtime whose records are work of their own may not have
    /// completed yet: such a backend asks its runtime instead.
    fn is_idle(&self) -> Result<bool> {
        self.record_event()?.is_complete()
    }

    /// Classifies a pointer: the kind of this queue's own allocations, [`MemKind::Unknown`] for
    /// everything else (another context's memory, stack, heap, garbage).
    fn kind_of(&self, ptr: *const u8) -> MemKind;

    /// Which allocation holds `ptr`, as far as the runtime can tell: an exchange-side question
    /// (imports check the whole extent a descriptor claims against the answer, see
    /// [`crate::extent`]). Never dereferences `ptr`. The default knows only what
    /// [`Queue::kind_of`] says: the kind, not the allocation's bounds.
    fn holder_of(&self, ptr: *const u8) -> Result<Holder> {
        Ok(match self.kind_of(ptr) {
            MemKind::Unknown => Holder::Unknown,
            kind => Holder::Unbounded { kind, place: 0 },
        })
    }

    /// The DLPack device of memory of `kind` allocated by this queue.
    fn dlpack_device(&self, kind: MemKind) -> DLDevice;

    /// A fresh, owned copy of the runtime's handle to this queue, for protocols that pass queues
    /// between libraries (SUAI's `syclobj`). `None` where the backend has no such handle.
    fn export_handle(&self) -> Option<ExportedHandle> {
        None
    }

    /// The native stream handle work is enqueued on (a `CUstream`), where the backend has one, as
    /// the exchange protocols number it (CAI's `stream`, DLPack's `stream` argument,
    /// `__cuda_stream__`): never 0, which they reserve, so a runtime whose default stream is 0
    /// answers with the protocols' number for it. Callers pass it on unchanged.
    fn native_stream(&self) -> Option<usize> {
        None
    }

    /// The handle DLPack's C exchange API names as this queue's current work stream: the native
    /// stream, or the runtime's queue object (a `sycl::queue*` for kDLOneAPI).
    fn dlpack_work_stream(&self) -> Option<usize> {
        self.native_stream()
    }

    /// This queue as other libraries see it once they hold its handle (see
    /// [`Queue::export_handle`]): its events then also cover work they enqueued on it. `None`
    /// where no other library can enqueue on it.
    fn as_foreign_queue(self: Arc<Self>) -> Option<Arc<dyn ForeignQueue>> {
        None
    }

    /// How this queue shares memory with other processes on the machine, or why it cannot (an
    /// [`crate::Error::Unsupported`] with the reason). See [`crate::ipc`].
    fn ipc(&self) -> Result<&dyn IpcSharing> {
        Err(ipc::unsupported(
            self.device(),
            format!(
                "the {} backend cannot share memory between processes",
                self.device().backend
            ),
        ))
    }

    /// Why memory of this queue cannot leave through DLPack zero-copy on its own device although
    /// DLPack has a pointer form for it (SYCL memory outside the device's default context, the
    /// only one DLPack consumers look in), if it cannot.
    fn dlpack_export_refusal(&self) -> Option<String> {
        None
    }

    /// Readies `buffer` (memory of this queue) for a zero-copy DLPack export to `device`, ordered
    /// for the consumer's `stream` argument, where this backend has a rule for that device (CUDA
    /// streams, SYCL queues); `None` leaves it to the generic rule (waiting for pending work).
    ///
    /// # Safety
    /// A stream handle in `stream` names one of the consumer's live streams (DLPack's contract).
    unsafe fn order_dlpack_export(
        &self,
        _buffer: &Buffer,
        _device: DLDevice,
        _stream: &ForeignObject<'_>,
    ) -> Option<Result<()>> {
        None
    }

    /// Exchange hook: whether other libraries may enqueue work devbuf does not track on queues
    /// or streams this backend lets devbuf know of: this queue itself, once its handle was handed
    /// out (CAI's `stream`, SUAI's `syclobj`, DLPack's work stream), and, on CUDA, the legacy
    /// default stream, the ecosystem's default. Memory that was handed out is then ordered after
    /// that work whenever devbuf touches it again ([`Queue::order_after_foreign_work`],
    /// [`Queue::foreign_work_event`]).
    fn untracked_foreign_work(&self) -> bool {
        false
    }

    /// Exchange hook: makes work enqueued on this queue from now on wait for the work other
    /// libraries have enqueued so far on the queues and streams of
    /// [`Queue::untracked_foreign_work`], without blocking the host. Nothing to do for work they
    /// enqueue on this very queue when it runs in order.
    fn order_after_foreign_work(&self) -> Result<()> {
        Ok(())
    }

    /// Exchange hook: an event that completes once the work of
    /// [`Queue::order_after_foreign_work`] and this queue's own work so far have, for the host and
    /// other queues to wait for; `None` when none of it can still be running.
    fn foreign_work_event(&self) -> Result<Option<Event>> {
        Ok(None)
    }

    /// Orders later work on `buffer`, just imported through `protocol` onto this queue, after the
    /// producer's `stream` as that protocol names it (`None`: the producer named none), unless
    /// `sync` is off; a stream value the protocol forbids is refused either way.
    ///
    /// # Safety
    /// A stream handle in `stream` names one of the producer's live streams (the protocol's
    /// contract), alive while the data is used.
    unsafe fn order_after_producer_stream(
        &self,
        _buffer: &Buffer,
        _protocol: Protocol,
        _stream: Option<i64>,
        _sync: bool,
    ) -> Result<()> {
        Ok(())
    }

    /// Downcasting, for backend-specific protocol details.
    fn as_any(&self) -> &dyn Any;
}

/// A runtime handle given away to a foreign library (e.g. a "SyclQueueRef" capsule payload).
/// Whoever receives it must call `destroy` once on `ptr`; dropping it unused destroys it.
pub struct ExportedHandle {
    /// The capsule name the protocol uses for this handle.
    pub name: &'static CStr,
    /// The handle itself.
    pub ptr: NonNull<c_void>,
    /// Releases the handle.
    pub destroy: unsafe extern "C" fn(*mut c_void),
}

impl ExportedHandle {
    /// Gives up ownership of the handle: the caller must call `destroy` on the returned pointer.
    pub fn into_raw(self) -> (NonNull<c_void>, unsafe extern "C" fn(*mut c_void)) {
        let parts = (self.ptr, self.destroy);
        std::mem::forget(self);
        parts
    }
}

impl Drop for ExportedHandle {
    fn drop(&mut self) {
        // SAFETY: the handle is still owned here (into_raw forgets self), so it is released once.
        unsafe { (self.destroy)(self.ptr.as_ptr()) }
    }
}

impl fmt::Debug for ExportedHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ExportedHandle({:?} at {:p})", self.name, self.ptr)
    }
}

// SAFETY: runtime handles (sycl::queue copies) are thread-safe reference-counted objects.
unsafe impl Send for ExportedHandle {}

/// Another library's queue or stream (a dpctl queue that produced imported memory, or the one a
/// DLPack consumer passes as `stream`): devbuf orders work with it but never enqueues its own.
pub trait ForeignQueue: Send + Sync + fmt::Debug {
    /// Records an event that completes when all work enqueued on it so far has completed, without
    /// blocking the host (a barrier on an out-of-order SYCL queue).
    fn record_event(&self) -> Result<Event>;

    /// Makes work enqueued on it from now on wait for `event`, without blocking the host where
    /// the runtime allows it.
    fn wait_event(&self, event: &Event) -> Result<()>;
}

/// A backend's event: a point in one queue's stream of work.
pub trait QueueEvent: Send + Sync + fmt::Debug {
    /// Blocks until the event has completed.
    fn wait(&self) -> Result<()>;
    /// Whether the event has completed, without blocking.
    fn is_complete(&self) -> Result<bool>;
    /// Milliseconds from `start` to this event, both recorded with timing on one backend
    /// ([`Queue::record_timed_event`]); `None` where either has no timing.
    fn elapsed_ms_since(&self, _start: &Event) -> Option<Result<f32>> {
        None
    }
    /// Downcasting, so a queue can wait on its own backend's events on the device.
    fn as_any(&self) -> &dyn Any;
}

/// A shareable handle to a [`QueueEvent`].
#[derive(Clone, Debug)]
pub struct Event(Arc<dyn QueueEvent>);

impl Event {
    /// Wraps a backend event.
    pub fn new(event: impl QueueEvent + 'static) -> Self {
        Event(Arc::new(event))
    }

    /// Blocks until the event has completed.
    pub fn wait(&self) -> Result<()> {
        self.0.wait()
    }

    /// Whether the event has completed, without blocking.
    pub fn is_complete(&self) -> Result<bool> {
        self.0.is_complete()
    }

    /// Milliseconds from `start` to this event, where both were recorded with timing
    /// ([`Queue::record_timed_event`]); `None` where either has none.
    pub fn elapsed_ms_since(&self, start: &Event) -> Option<Result<f32>> {
        self.0.elapsed_ms_since(start)
    }

    /// Whether both handles name the same event.
    pub fn same_as(&self, other: &Event) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }

    /// The backend's own event, if it is of type `T`.
    pub fn downcast_ref<T: 'static>(&self) -> Option<&T> {
        self.0.as_any().downcast_ref()
    }
}

/// An event that has already completed: what synchronous backends record.
#[derive(Debug, Clone, Copy, Default)]
pub struct CompletedEvent;

impl QueueEvent for CompletedEvent {
    fn wait(&self) -> Result<()> {
        Ok(())
    }
    fn is_complete(&self) -> Result<bool> {
        Ok(true)
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// Whether a backend's runtime can be used in this process, and if not, why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Availability {
    /// The runtime loaded and has at least one usable device.
    Available,
    /// The runtime is missing or unusable; the reason says what was tried.
    Unavailable(String),
}

impl Availability {
    /// Whether the backend can be used.
    pub fn is_available(&self) -> bool {
        matches!(self, Availability::Available)
    }
}

/// A family of devices behind one runtime: discovery, availability and opening queues.
pub trait Backend: Send + Sync {
    /// The backend's name, also the first part of its selectors ("host", "sycl", "cuda", "opencl").
    fn name(&self) -> &'static str;

    /// Whether the runtime is usable, with the reason when it is not. Never panics.
    fn availability(&self) -> Availability;

    /// All devices the runtime reports, usable or not (see [`DeviceInfo::unusable_reason`]).
    fn devices(&self) -> Result<Vec<DeviceInfo>>;

    /// Opens a queue. `spec` is the selector after "`name`:", or empty for the backend's default.
    fn open(&self, spec: &str) -> Result<Arc<dyn Queue>>;

    /// A new queue with a stream of its own on the device `spec` names (as in [`Backend::open`]),
    /// sharing the device's context with the queue `open` returns (so that each reaches the
    /// other's memory): what a user's `Stream` is. Where the backend cannot make one, an
    /// [`crate::Error::Unsupported`] says why.
    fn open_stream(&self, spec: &str, _options: StreamOptions) -> Result<Arc<dyn Queue>> {
        Err(crate::Error::Unsupported {
            device: format!("{}:{spec}", self.name()),
            what: "a new stream".into(),
            reason: format!("the {} backend cannot make streams", self.name()),
        })
    }

    /// A queue that enqueues its work on another library's stream, `handle` as the exchange
    /// protocols number it (a `CUstream`, `__cuda_stream__`'s second item), on the device `spec`
    /// names (`None`: the device the stream belongs to); `owner` keeps the stream alive while the
    /// queue or any memory it allocated lives. `None` where the backend has no such handles.
    ///
    /// # Safety
    /// `handle` names a live stream for as long as `owner` is alive.
    unsafe fn adopt_stream(
        &self,
        _spec: Option<&str>,
        _handle: usize,
        _owner: StreamOwner,
    ) -> Option<Result<Arc<dyn Queue>>> {
        None
    }

    /// A queue on the device a DLPack producer named, if `device` belongs to this backend.
    fn queue_for_dlpack_device(&self, device: DLDevice) -> Option<Result<Arc<dyn Queue>>>;

    /// Whether memory of this backend's queues is described by `protocol`.
    fn speaks(&self, _protocol: Protocol) -> bool {
        false
    }

    /// The queue a SUAI `syclobj` names for memory at `data`, if the object is this backend's.
    ///
    /// # Safety
    /// A [`ForeignObject::Handle`] is a live handle of the kind its name says, for the call.
    unsafe fn queue_for_suai_context(
        &self,
        _syclobj: &ForeignObject<'_>,
        _data: usize,
    ) -> Option<Result<ResolvedQueue>> {
        None
    }

    /// The queue of another library's queue handle given as a device, if it is this backend's.
    ///
    /// # Safety
    /// As for [`Backend::queue_for_suai_context`].
    unsafe fn queue_for_device_object(
        &self,
        _object: &ForeignObject<'_>,
    ) -> Option<Result<Arc<dyn Queue>>> {
        None
    }

    /// The queue for memory at `ptr` that `protocol` hands over as a bare pointer (CAI's `data`),
    /// if `protocol` is this backend's; an error when the runtime does not know the pointer.
    fn queue_for_pointer(
        &self,
        _protocol: Protocol,
        _ptr: usize,
    ) -> Option<Result<Arc<dyn Queue>>> {
        None
    }
}

/// Splits a device selector such as "sycl:opencl:cpu:0", "cuda:1" or "host" into the backend name
/// and the backend-specific rest.
pub fn split_selector(selector: &str) -> (&str, &str) {
    match selector.split_once(':') {
        Some((backend, rest)) => (backend, rest),
        None => (selector, ""),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selectors_split_at_the_first_colon() {
        assert_eq!(split_selector("host"), ("host", ""));
        assert_eq!(
            split_selector("sycl:opencl:cpu:0"),
            ("sycl", "opencl:cpu:0")
        );
        assert_eq!(split_selector("cuda:1"), ("cuda", "1"));
    }

    #[test]
    fn exported_handle_is_destroyed_once_unless_taken() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        static DESTROYED: AtomicUsize = AtomicUsize::new(0);
        unsafe extern "C" fn destroy(_: *mut c_void) {
            DESTROYED.fetch_add(1, Ordering::SeqCst);
        }
        let make = || ExportedHandle {
            name: c"SyclQueueRef",
            ptr: NonNull::dangling(),
            destroy,
        };
        drop(make());
        assert_eq!(DESTROYED.load(Ordering::SeqCst), 1);
        let (ptr, release) = make().into_raw();
        assert_eq!(DESTROYED.load(Ordering::SeqCst), 1);
        // SAFETY: we own the handle taken out above.
        unsafe { release(ptr.as_ptr()) };
        assert_eq!(DESTROYED.load(Ordering::SeqCst), 2);
    }
}
