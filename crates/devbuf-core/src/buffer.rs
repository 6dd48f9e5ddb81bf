//! [`Buffer`]: bytes with an owner.
//!
//! Either devbuf allocated the bytes (they go back to the queue that made them, exactly once,
//! when the last view is dropped), or they are foreign and the caller says how they are kept
//! alive: an owner object held until the last view goes, or a deleter run exactly once then.

use std::any::Any;
use std::fmt;
use std::ops::Range;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::ptr::NonNull;
use std::sync::Arc;

use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::{Mutex, MutexGuard};
use smallvec::SmallVec;

use crate::blocking::blocking;
use crate::mr::{self, MemoryResource};
use crate::{DeviceInfo, Error, Event, ForeignQueue, MemKind, Queue, Result};

/// Alignment of [`Buffer::alloc`]: DLPack's recommended data alignment, and CUDA's own.
pub const DEFAULT_ALIGNMENT: usize = 256;

/// What keeps foreign memory alive, or frees it.
pub enum Owner {
    /// An object that keeps the memory alive while held (a Python producer, an Arc of a runtime
    /// allocation...). It is dropped after the last view.
    KeepAlive(Box<dyn Any + Send + Sync>),
    /// A deleter run exactly once, after the last view.
    Deleter(RunOnDrop),
}

/// A deleter that runs when dropped: after the last view of a buffer, or, for an owner that never
/// reached a buffer (an import refused after it took ownership), right away instead of leaking.
pub struct RunOnDrop(Option<Box<dyn FnOnce() + Send>>);

impl Drop for RunOnDrop {
    fn drop(&mut self) {
        if let Some(delete) = self.0.take() {
            delete();
        }
    }
}

impl Owner {
    /// Keeps `owner` alive as long as the memory is viewed.
    pub fn keep_alive(owner: impl Any + Send + Sync) -> Self {
        Owner::KeepAlive(Box::new(owner))
    }

    /// Runs `deleter` once, after the last view.
    pub fn deleter(deleter: impl FnOnce() + Send + 'static) -> Self {
        Owner::Deleter(RunOnDrop(Some(Box::new(deleter))))
    }
}

impl fmt::Debug for Owner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Owner::KeepAlive(_) => "KeepAlive",
            Owner::Deleter(_) => "Deleter",
        })
    }
}

/// How an allocation is released when its last view is dropped.
enum Release {
    /// devbuf allocated it: back to the queue that made it.
    Queue { size: usize, align: usize },
    /// devbuf allocated it through a memory resource: back to that resource.
    Resource {
        resource: Arc<dyn MemoryResource>,
        size: usize,
        align: usize,
    },
    /// Foreign memory: drop the owner (taken out exactly once, in `Drop`).
    Foreign(Mutex<Option<Owner>>),
}

/// Work enqueued on an allocation that may not have completed yet.
struct PendingWork {
    /// The devbuf queue it runs on; `None` for another library's queue (the producer of
    /// imported memory), whose work devbuf never waits for before letting go of its memory.
    queue: Option<Arc<dyn Queue>>,
    /// Completes when the queue's work on the allocation (and everything before it) is done.
    event: Event,
    /// Sources of copies into the allocation enqueued without waiting: held until the copies
    /// complete, so that dropping them never has to wait.
    sources: Vec<Buffer>,
}

impl PendingWork {
    fn on(&self, queue: &Arc<dyn Queue>) -> bool {
        self.queue
            .as_ref()
            .is_some_and(|own| Arc::ptr_eq(own, queue))
    }
}

/// The pending work of an allocation.
#[derive(Default)]
struct PendingList {
    work: Vec<PendingWork>,
    /// The queue of the library that produced imported memory, while devbuf has not yet ordered
    /// anything after its work there. An event is recorded on it (a barrier: microseconds) only
    /// when devbuf first needs one, so that imports nobody waits on cost nothing; the event then
    /// covers the producer's work up to that moment, which includes its work at import.
    producer: Option<Arc<dyn ForeignQueue>>,
    /// The queue of the library that produced imported memory when its protocol asks that its
    /// later work there wait for ours (CAI v3's consumer rule): every command devbuf enqueues
    /// without waiting for it is made to precede that queue's later work. Not pending work itself.
    held_back: Option<Arc<dyn ForeignQueue>>,
}

impl PendingList {
    fn is_empty(&self) -> bool {
        self.work.is_empty() && self.producer.is_none()
    }

    /// Records the event of the producer's queue, if that has not been done yet.
    fn record_producer_event(&mut self) -> Result<()> {
        if let Some(producer) = &self.producer {
            let event = producer.record_event()?;
            self.producer = None;
            self.work.push(PendingWork {
                queue: None,
                event,
                sources: Vec::new(),
            });
        }
        Ok(())
    }

    /// Takes out the work that `done` says has completed. The caller drops it after unlocking:
    /// dropping the sources it holds may release foreign memory, whose owner may be a Python
    /// object.
    fn take_completed(&mut self, done: impl Fn(&PendingWork) -> bool) -> Vec<PendingWork> {
        let (completed, pending) = std::mem::take(&mut self.work).into_iter().partition(done);
        self.work = pending;
        completed
    }

    /// Takes out the work whose event has completed.
    fn take_all_completed(&mut self) -> Vec<PendingWork> {
        self.take_completed(|w| w.event.is_complete().unwrap_or(false))
    }
}

/// The pending work of an allocation, with a lock-free answer to "is there any?" for the common
/// case of none (every export asks).
#[derive(Default)]
struct Pending {
    list: Mutex<PendingList>,
    /// Whether `list` is non-empty; updated under the lock when a guard is dropped.
    any: AtomicBool,
}

impl Pending {
    fn is_empty(&self) -> bool {
        !self.any.load(Ordering::Acquire)
    }

    fn lock(&self) -> PendingGuard<'_> {
        PendingGuard {
            list: self.list.lock(),
            any: &self.any,
        }
    }
}

struct PendingGuard<'a> {
    list: MutexGuard<'a, PendingList>,
    any: &'a AtomicBool,
}

impl Deref for PendingGuard<'_> {
    type Target = PendingList;
    fn deref(&self) -> &Self::Target {
        &self.list
    }
}

impl DerefMut for PendingGuard<'_> {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.list
    }
}

impl Drop for PendingGuard<'_> {
    fn drop(&mut self) {
        self.any.store(!self.list.is_empty(), Ordering::Release);
    }
}

/// One allocation, shared by every [`Buffer`] that views it.
struct Allocation {
    /// Address of the first byte (0 only for empty foreign memory).
    base: usize,
    kind: MemKind,
    queue: Arc<dyn Queue>,
    release: Release,
    /// At most one entry per queue: queues are in order, so a queue's latest event covers its
    /// earlier work.
    pending: Pending,
    /// Whether the memory was handed to another library (DLPack, CAI, SUAI), whose work on it is
    /// not ordered with ours.
    exported: AtomicBool,
}

impl Drop for Allocation {
    fn drop(&mut self) {
        // The producer of imported memory is not waited for: its work is its own business, and
        // letting go of its memory does not free it under that work.
        let pending = std::mem::take(&mut self.pending.list.get_mut().work);
        let exported = *self.exported.get_mut();
        // Memory that a command may still use is leaked when a wait fails: freeing it would be
        // worse.
        match &mut self.release {
            Release::Queue { size, align } => {
                let (queue, base, kind, size, align) =
                    (&self.queue, self.base, self.kind, *size, *align);
                let release = || {
                    // Other libraries' work on exported memory is ordered with nothing of ours:
                    // wait for the whole device before the queue may hand the memory out again.
                    if exported && queue.wait_device().is_err() {
                        return;
                    }
                    // The queue releases memory after its own work; other queues' work must come
                    // first.
                    for work in pending.iter().filter(|w| !w.on(queue)) {
                        if queue.wait_event(&work.event).is_err() && work.event.wait().is_err() {
                            return;
                        }
                    }
                    if let Some(ptr) = NonNull::new(base as *mut u8) {
                        // SAFETY: this allocation came from `queue.allocate(kind, size, align)`
                        // and Drop runs once, after the last Buffer referring to it is gone.
                        unsafe { queue.deallocate(ptr, kind, size, align) };
                    }
                };
                if exported || !pending.is_empty() {
                    blocking(release);
                } else {
                    release();
                }
            }
            Release::Resource {
                resource,
                size,
                align,
            } => {
                let (queue, kind, size, align) = (&self.queue, self.kind, *size, *align);
                let Some(ptr) = NonNull::new(self.base as *mut u8) else {
                    return;
                };
                let Some(after) = release_point(queue, &pending, exported) else {
                    return;
                };
                // SAFETY: this allocation came from `resource.allocate(kind, size, align)`, Drop
                // runs once, and other queues' work was ordered before `after`.
                unsafe { resource.deallocate(ptr, kind, size, align, after) };
            }
            Release::Foreign(owner) => {
                // Foreign memory has no ordered release: block until devbuf's work on it is done,
                // and, when devbuf handed it on to another library, until the device is idle.
                let queue = &self.queue;
                let ours = || {
                    pending
                        .iter()
                        .filter(|w| w.queue.is_some())
                        .all(|w| w.event.wait().is_ok())
                        && (!exported || queue.wait_device().is_ok())
                };
                let done =
                    (pending.iter().all(|w| w.queue.is_none()) && !exported) || blocking(ours);
                let owner = owner.get_mut().take();
                match owner {
                    Some(owner) if done => {
                        // A panicking deleter must not unwind into a C caller (DLPack deleters
                        // run this from `extern "C"` code); the panic message has already been
                        // printed.
                        let _ = catch_unwind(AssertUnwindSafe(move || drop(owner)));
                    }
                    owner => std::mem::forget(owner),
                }
            }
        }
    }
}

/// Refuses allocations `queue` cannot make.
fn check_allocation(queue: &Arc<dyn Queue>, kind: MemKind, align: usize) -> Result<()> {
    if !align.is_power_of_two() {
        return Err(Error::invalid(
            "alignment",
            format!("{align} is not a power of two"),
        ));
    }
    if kind == MemKind::Unknown {
        return Err(Error::invalid(
            "kind",
            "\"unknown\" memory cannot be allocated",
        ));
    }
    if !queue.supports(kind) {
        let device = queue.device();
        return Err(Error::Unsupported {
            device: device.selector.clone(),
            what: format!("{kind} allocation"),
            reason: device
                .unusable_reason
                .clone()
                .unwrap_or_else(|| format!("the device has no {kind} memory")),
        });
    }
    Ok(())
}

/// Orders the release of memory from a resource: waits (blocking) for the whole device when the
/// memory was exported, makes the home queue wait for other queues' work, and returns the event
/// after which the memory is free of all work (`Some(None)`: free now). `None` when a wait failed:
/// the memory may still be in use and must be leaked.
fn release_point(
    queue: &Arc<dyn Queue>,
    pending: &[PendingWork],
    exported: bool,
) -> Option<Option<Event>> {
    // Other libraries' work on exported memory is ordered with nothing of ours.
    if exported && blocking(|| queue.wait_device()).is_err() {
        return None;
    }
    if pending.is_empty() {
        return Some(None);
    }
    for work in pending.iter().filter(|w| !w.on(queue)) {
        if queue.wait_event(&work.event).is_err() && blocking(|| work.event.wait()).is_err() {
            return None;
        }
    }
    match queue.record_event() {
        Ok(after) => Some(Some(after)),
        Err(_) => blocking(|| queue.wait()).is_ok().then_some(None),
    }
}

/// A contiguous range of bytes in one allocation; cheap to clone, and every clone or sub-view
/// keeps the allocation alive.
#[derive(Clone)]
pub struct Buffer {
    alloc: Arc<Allocation>,
    offset: usize,
    len: usize,
}

impl Buffer {
    /// Allocates `nbytes` of `kind` memory on `queue`, aligned to [`DEFAULT_ALIGNMENT`].
    pub fn alloc(queue: &Arc<dyn Queue>, kind: MemKind, nbytes: usize) -> Result<Buffer> {
        Self::alloc_aligned(queue, kind, nbytes, DEFAULT_ALIGNMENT)
    }

    /// Allocates `nbytes` of `kind` memory on `queue`, aligned to `align` (a power of two),
    /// through the device's current resource for `kind` ([`mr::current`]) when one is set on
    /// this queue.
    ///
    /// A zero-byte buffer still owns a real (1-byte) allocation, so its pointer is unique and
    /// classifies as `kind`.
    pub fn alloc_aligned(
        queue: &Arc<dyn Queue>,
        kind: MemKind,
        nbytes: usize,
        align: usize,
    ) -> Result<Buffer> {
        match mr::current(&queue.device().selector, kind) {
            // A device's current resource serves the queue it allocates on (another queue of the
            // device may have a context of its own, which cannot reach that memory).
            Some(resource) if Arc::ptr_eq(resource.queue(), queue) => {
                Self::alloc_from(&resource, kind, nbytes, align)
            }
            _ => Self::alloc_on_queue(queue, kind, nbytes, align),
        }
    }

    /// Allocates `nbytes` of `kind` memory from `resource`, aligned to `align` (a power of two).
    /// The buffer's queue is the resource's, and its memory goes back to `resource`.
    pub fn alloc_from(
        resource: &Arc<dyn MemoryResource>,
        kind: MemKind,
        nbytes: usize,
        align: usize,
    ) -> Result<Buffer> {
        let queue = resource.queue();
        check_allocation(queue, kind, align)?;
        let size = nbytes.max(1);
        let ptr = resource.allocate(kind, size, align)?;
        let release = Release::Resource {
            resource: Arc::clone(resource),
            size,
            align,
        };
        Self::allocated(
            queue,
            kind,
            ptr,
            nbytes,
            release,
            queue.allocates_in_order(kind),
        )
    }

    fn alloc_on_queue(
        queue: &Arc<dyn Queue>,
        kind: MemKind,
        nbytes: usize,
        align: usize,
    ) -> Result<Buffer> {
        check_allocation(queue, kind, align)?;
        let size = nbytes.max(1);
        let ptr = queue.allocate(kind, size, align)?;
        let release = Release::Queue { size, align };
        Self::allocated(
            queue,
            kind,
            ptr,
            nbytes,
            release,
            queue.allocates_in_order(kind),
        )
    }

    /// The buffer of fresh memory at `ptr`.
    fn allocated(
        queue: &Arc<dyn Queue>,
        kind: MemKind,
        ptr: NonNull<u8>,
        nbytes: usize,
        release: Release,
        in_order: bool,
    ) -> Result<Buffer> {
        let buffer = Buffer {
            alloc: Arc::new(Allocation {
                base: ptr.as_ptr() as usize,
                kind,
                queue: Arc::clone(queue),
                release,
                pending: Pending::default(),
                exported: AtomicBool::new(false),
            }),
            offset: 0,
            len: nbytes,
        };
        if in_order {
            // The allocation itself is work on the queue: nothing else may touch the memory
            // before it. (On failure, dropping the buffer releases the memory.)
            let allocated = queue.record_event()?;
            buffer.record_work(queue, allocated);
        }
        Ok(buffer)
    }

    /// Wraps foreign memory. `queue` is the queue that can reach it (for copies and fills) and
    /// `owner` keeps it alive or frees it after the last view.
    ///
    /// # Safety
    /// `ptr` is valid for `len` bytes of `kind` memory reachable by `queue` (or `len` is 0) for as
    /// long as `owner` has not been dropped or run.
    pub unsafe fn from_foreign(
        queue: Arc<dyn Queue>,
        ptr: *mut u8,
        len: usize,
        kind: MemKind,
        owner: Owner,
    ) -> Buffer {
        Buffer {
            alloc: Arc::new(Allocation {
                base: ptr as usize,
                kind,
                queue,
                release: Release::Foreign(Mutex::new(Some(owner))),
                pending: Pending::default(),
                exported: AtomicBool::new(false),
            }),
            offset: 0,
            len,
        }
    }

    /// Address of the first byte of this view.
    pub fn ptr(&self) -> *mut u8 {
        (self.alloc.base + self.offset) as *mut u8
    }

    /// Length of this view in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether this view has no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The kind of memory.
    pub fn kind(&self) -> MemKind {
        self.alloc.kind
    }

    /// The queue that allocated (or can reach) this memory.
    pub fn queue(&self) -> &Arc<dyn Queue> {
        &self.alloc.queue
    }

    /// The device the memory belongs to.
    pub fn device(&self) -> &DeviceInfo {
        self.alloc.queue.device()
    }

    /// Whether devbuf allocated this memory (rather than wrapping foreign memory).
    pub fn is_owned(&self) -> bool {
        matches!(
            self.alloc.release,
            Release::Queue { .. } | Release::Resource { .. }
        )
    }

    /// The object that keeps this foreign memory alive, when it is a `T` (how a shareable
    /// allocation is found again from its buffers).
    pub fn keep_alive<T: Any + Clone>(&self) -> Option<T> {
        match &self.alloc.release {
            Release::Foreign(owner) => match &*owner.lock() {
                Some(Owner::KeepAlive(keep)) => keep.downcast_ref::<T>().cloned(),
                _ => None,
            },
            Release::Queue { .. } | Release::Resource { .. } => None,
        }
    }

    /// Whether the host CPU may read and write these bytes directly.
    pub fn is_host_accessible(&self) -> bool {
        self.alloc.queue.host_accessible(self.alloc.kind)
    }

    /// Whether two views share one allocation.
    pub fn same_allocation(&self, other: &Buffer) -> bool {
        Arc::ptr_eq(&self.alloc, &other.alloc)
    }

    /// A sub-view of `range` (relative to this view), sharing ownership of the allocation.
    pub fn slice(&self, range: Range<usize>) -> Result<Buffer> {
        if range.start > range.end || range.end > self.len {
            return Err(Error::invalid(
                "range",
                format!(
                    "{}..{} is outside the buffer of {} bytes",
                    range.start, range.end, self.len
                ),
            ));
        }
        Ok(Buffer {
            alloc: Arc::clone(&self.alloc),
            offset: self.offset + range.start,
            len: range.end - range.start,
        })
    }

    /// Copies all of `src` into this view (same length) and waits for the copy. Works across
    /// kinds, queues and backends: the copy runs on whichever queue reaches both sides, or is
    /// staged through host memory when none does.
    pub fn copy_from(&self, src: &Buffer) -> Result<()> {
        self.check_copy_source(src.len, || {
            self.same_allocation(src) && ranges_overlap(self, src)
        })?;
        if self.len == 0 {
            return Ok(());
        }
        let (dst_queue, src_queue) = (self.queue(), src.queue());
        let queue = if reaches(dst_queue, src) {
            dst_queue
        } else if reaches(src_queue, self) {
            src_queue
        } else {
            let staged = src.to_vec()?;
            return self.copy_from_host(&staged).inspect_err(|_| {
                // The copy may still be reading the staging bytes.
                std::mem::forget(staged);
            });
        };
        self.order_on(queue)?;
        src.order_on(queue)?;
        // SAFETY: both views are alive (we hold them), in range and disjoint, the queue reaches
        // both, and we wait for the copy before returning.
        unsafe { queue.copy(self.ptr(), src.ptr(), self.len)? };
        self.finish_on(queue, &[src])
    }

    /// Enqueues a copy of `src` into this view on `queue` (which must reach both), ordered after
    /// pending work on both allocations, and returns without waiting. The work is recorded on both
    /// allocations: they stay alive until it completes (this one holds `src`, so that dropping
    /// `src` meanwhile does not wait), and [`Buffer::sync_queue`] reports it.
    pub fn enqueue_copy_from(&self, src: &Buffer, queue: &Arc<dyn Queue>) -> Result<Event> {
        self.check_copy_source(src.len, || {
            self.same_allocation(src) && ranges_overlap(self, src)
        })?;
        for side in [self, src] {
            if !reaches(queue, side) {
                return Err(Error::Unsupported {
                    device: queue.device().selector.clone(),
                    what: "an asynchronous copy".into(),
                    reason: format!("the queue cannot reach {side:?}"),
                });
            }
        }
        self.order_on(queue)?;
        src.order_on(queue)?;
        if self.len > 0 {
            // SAFETY: both views are in range, disjoint and reachable by `queue`; both
            // allocations record the work and outlive it (Allocation::drop waits for it).
            unsafe { queue.copy(self.ptr(), src.ptr(), self.len)? };
        }
        let source = (!self.same_allocation(src)).then(|| src.clone());
        record_enqueued(queue, &[self, src], source)
    }

    /// Copies `src` (host memory, same length) into this view and waits for the copy.
    pub fn copy_from_host(&self, src: &[u8]) -> Result<()> {
        self.check_copy_source(src.len(), || false)?;
        if self.len == 0 {
            return Ok(());
        }
        let queue = self.queue();
        self.order_on(queue)?;
        // SAFETY: `src` is borrowed host memory and the view is alive; we wait before returning,
        // so `src` outlives the copy.
        unsafe { queue.copy(self.ptr(), src.as_ptr(), self.len)? };
        self.finish_on(queue, &[])
    }

    /// Copies this view into `dst` (host memory, same length) and waits for the copy.
    pub fn copy_to_host(&self, dst: &mut [u8]) -> Result<()> {
        if dst.len() != self.len {
            return Err(Error::invalid(
                "nbytes",
                format!(
                    "destination has {} bytes, source has {}",
                    dst.len(),
                    self.len
                ),
            ));
        }
        if self.len == 0 {
            return Ok(());
        }
        let queue = self.queue();
        self.order_on(queue)?;
        // SAFETY: `dst` is exclusively borrowed host memory; we wait before returning.
        unsafe { queue.copy(dst.as_mut_ptr(), self.ptr(), self.len)? };
        self.finish_on(queue, &[])
    }

    /// The bytes of this view, copied to a new host vector.
    pub fn to_vec(&self) -> Result<Vec<u8>> {
        let mut bytes = vec![0; self.len];
        match self.copy_to_host(&mut bytes) {
            Ok(()) => Ok(bytes),
            Err(err) => {
                // The copy may still be writing into the vector.
                std::mem::forget(bytes);
                Err(err)
            }
        }
    }

    /// Sets every byte of this view to `byte` and waits.
    pub fn fill(&self, byte: u8) -> Result<()> {
        if self.len == 0 {
            return Ok(());
        }
        let queue = self.queue();
        self.order_on(queue)?;
        // SAFETY: the view is alive and in range; we wait before returning.
        unsafe { queue.fill(self.ptr(), byte, self.len)? };
        self.finish_on(queue, &[])
    }

    /// Enqueues setting this view to `byte` on its own queue and returns without waiting; the
    /// work is recorded like [`Buffer::enqueue_copy_from`]'s.
    pub fn enqueue_fill(&self, byte: u8) -> Result<Event> {
        let queue = self.queue();
        self.order_on(queue)?;
        if self.len > 0 {
            // SAFETY: the view is in range; the allocation records the work and outlives it.
            unsafe { queue.fill(self.ptr(), byte, self.len)? };
        }
        record_enqueued(queue, &[self], None)
    }

    /// Records that work on this allocation was enqueued on `queue` and completes with `event`
    /// (for work devbuf did not enqueue itself, e.g. a consumer's kernel).
    pub fn record_work(&self, queue: &Arc<dyn Queue>, event: Event) {
        set_latest(&mut self.alloc.pending.lock(), queue, event, None);
    }

    /// Records that the library that produced this (imported) memory may still have work on it
    /// in `producer`, its queue: host views and devbuf's commands are ordered after that work.
    /// The producer's event is only recorded when something first needs it.
    pub fn record_producer(&self, producer: Arc<dyn ForeignQueue>) -> Result<()> {
        let mut pending = self.alloc.pending.lock();
        // A second producer: the first one's work must be captured before it is forgotten.
        pending.record_producer_event()?;
        pending.producer = Some(producer);
        Ok(())
    }

    /// Makes `producer`, the queue of the library that produced this (imported) memory, wait for
    /// every command devbuf enqueues on it from now on without waiting for it (copies, fills)
    /// before it runs more of its own work: CAI v3's rule for a consumer that works on its own
    /// stream. The producer's queue must stay alive while the memory is viewed.
    pub fn hold_back(&self, producer: Arc<dyn ForeignQueue>) {
        self.alloc.pending.lock().held_back = Some(producer);
    }

    /// Makes work enqueued on `queue` from now on wait for pending work on this allocation from
    /// other queues (on the device where the runtime can, else by blocking).
    pub fn order_on(&self, queue: &Arc<dyn Queue>) -> Result<()> {
        if self.alloc.pending.is_empty() {
            return Ok(());
        }
        // Declared first, so dropped after the guard.
        let _completed: Vec<PendingWork>;
        let mut pending = self.alloc.pending.lock();
        pending.record_producer_event()?;
        _completed = pending.take_all_completed();
        for work in pending.work.iter().filter(|w| !w.on(queue)) {
            queue.wait_event(&work.event)?;
        }
        Ok(())
    }

    /// Makes work another library enqueues on `queue` from now on wait for all pending work on
    /// this allocation (a DLPack consumer's `stream`), without blocking the host where the
    /// runtime allows it.
    pub fn order_on_foreign(&self, queue: &dyn ForeignQueue) -> Result<()> {
        if self.alloc.pending.is_empty() {
            return Ok(());
        }
        // Declared first, so dropped after the guard.
        let _completed: Vec<PendingWork>;
        let mut pending = self.alloc.pending.lock();
        pending.record_producer_event()?;
        _completed = pending.take_all_completed();
        for work in &pending.work {
            queue.wait_event(&work.event)?;
        }
        Ok(())
    }

    /// The queue a consumer must synchronize with to see every pending write to this allocation:
    /// `None` when nothing is pending, the one queue with pending work, or, when several queues
    /// have pending work, `home` after it was made to wait for the others (CAI v3's producer rule).
    pub fn sync_queue(&self, home: &Arc<dyn Queue>) -> Result<Option<Arc<dyn Queue>>> {
        if self.alloc.pending.is_empty() {
            return Ok(None);
        }
        // Declared first, so dropped after the guard.
        let completed: Vec<PendingWork>;
        let mut pending = self.alloc.pending.lock();
        pending.record_producer_event()?;
        completed = pending.take_all_completed();
        let sync = match pending.work.as_slice() {
            [] => None,
            [
                PendingWork {
                    queue: Some(only), ..
                },
            ] => Some(Arc::clone(only)),
            // Several queues, or another library's: joined on `home`.
            several => {
                for work in several.iter().filter(|w| !w.on(home)) {
                    home.wait_event(&work.event)?;
                }
                let joined = home.record_event()?;
                let sources = several.iter().flat_map(|w| w.sources.iter().cloned());
                let joined = PendingWork {
                    queue: Some(Arc::clone(home)),
                    event: joined,
                    sources: sources.collect(),
                };
                drop(std::mem::replace(&mut pending.work, vec![joined]));
                Some(Arc::clone(home))
            }
        };
        drop(pending);
        drop(completed);
        Ok(sync)
    }

    /// Records that the memory was handed to another library, whose work on it devbuf cannot see:
    /// when devbuf frees it, it first waits for all work on the device ([`Queue::wait_device`]).
    pub fn mark_exported(&self) {
        self.alloc.exported.store(true, Ordering::Relaxed);
    }

    /// Whether work devbuf recorded on this allocation may still be running.
    pub fn has_pending_work(&self) -> bool {
        !self.alloc.pending.is_empty()
    }

    /// Blocks until all pending work on this allocation has completed.
    pub fn synchronize(&self) -> Result<()> {
        if self.alloc.pending.is_empty() {
            return Ok(());
        }
        // The work stays recorded while the host waits: a thread that orders new work after it
        // meanwhile must still see it.
        let events: SmallVec<[Event; 2]> = {
            let mut pending = self.alloc.pending.lock();
            pending.record_producer_event()?;
            pending.work.iter().map(|w| w.event.clone()).collect()
        };
        events.iter().try_for_each(Event::wait)?;
        // Forget only the work waited for: newer work may have replaced or joined it.
        let completed = self
            .alloc
            .pending
            .lock()
            .take_completed(|w| events.iter().any(|event| event.same_as(&w.event)));
        drop(completed);
        Ok(())
    }

    fn check_copy_source(&self, src_len: usize, overlaps: impl FnOnce() -> bool) -> Result<()> {
        if src_len != self.len {
            return Err(Error::invalid(
                "nbytes",
                format!("source has {src_len} bytes, destination has {}", self.len),
            ));
        }
        if overlaps() {
            return Err(Error::invalid(
                "src",
                "source and destination views overlap",
            ));
        }
        Ok(())
    }

    /// Waits for `queue` and forgets its completed work on this and `others`' allocations (work
    /// another thread enqueued after the wait stays recorded).
    fn finish_on(&self, queue: &Arc<dyn Queue>, others: &[&Buffer]) -> Result<()> {
        queue.wait()?;
        for buffer in std::iter::once(self).chain(others.iter().copied()) {
            if !buffer.alloc.pending.is_empty() {
                // Another library's work was ordered before ours (order_on), so it is done too.
                let completed = buffer.alloc.pending.lock().take_completed(|w| {
                    (w.queue.is_none() || w.on(queue)) && w.event.is_complete().unwrap_or(false)
                });
                drop(completed);
            }
        }
        Ok(())
    }
}

/// Records work just enqueued on `queue` on the allocations of `buffers`, and returns its event;
/// the first buffer's allocation also holds `source` until the work completes.
/// The event is recorded while every allocation's pending list is locked (in address order, so
/// threads never deadlock): a thread that enqueued later records later, and never replaces a
/// queue's latest event by an earlier one.
fn record_enqueued(
    queue: &Arc<dyn Queue>,
    buffers: &[&Buffer],
    source: Option<Buffer>,
) -> Result<Event> {
    let destination: *const Allocation = &*buffers[0].alloc;
    let mut allocations: SmallVec<[&Allocation; 2]> =
        buffers.iter().map(|buffer| &*buffer.alloc).collect();
    allocations.sort_by_key(|alloc| *alloc as *const Allocation as usize);
    allocations.dedup_by(|a, b| std::ptr::eq(*a, *b));
    let mut guards: SmallVec<[PendingGuard<'_>; 2]> = allocations
        .iter()
        .map(|alloc| alloc.pending.lock())
        .collect();
    let event = queue.record_event()?;
    let mut source = source;
    for (alloc, pending) in allocations.iter().zip(&mut guards) {
        let keep = if std::ptr::eq(*alloc, destination) {
            source.take()
        } else {
            None
        };
        set_latest(pending, queue, event.clone(), keep);
    }
    for pending in &guards {
        if let Some(producer) = &pending.held_back {
            producer.wait_event(&event)?;
        }
    }
    Ok(event)
}

/// Makes `event` the latest work of `queue` in an allocation's pending list, which also holds
/// `source` until then.
fn set_latest(
    pending: &mut PendingList,
    queue: &Arc<dyn Queue>,
    event: Event,
    source: Option<Buffer>,
) {
    match pending.work.iter_mut().find(|w| w.on(queue)) {
        Some(work) => {
            work.event = event;
            work.sources.extend(source);
        }
        None => pending.work.push(PendingWork {
            queue: Some(Arc::clone(queue)),
            event,
            sources: source.into_iter().collect(),
        }),
    }
}

/// Whether `queue` can address `buffer` in a copy: its own memory, memory its context knows, or
/// memory the host can dereference (which every runtime's copy treats as host memory).
fn reaches(queue: &Arc<dyn Queue>, buffer: &Buffer) -> bool {
    Arc::ptr_eq(queue, buffer.queue())
        || buffer.is_host_accessible()
        || queue.kind_of(buffer.ptr()) != MemKind::Unknown
}

fn ranges_overlap(a: &Buffer, b: &Buffer) -> bool {
    a.offset < b.offset + b.len && b.offset < a.offset + a.len
}

impl fmt::Debug for Buffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Buffer")
            .field("ptr", &self.ptr())
            .field("len", &self.len)
            .field("kind", &self.kind())
            .field("device", &self.device().selector)
            .field("owned", &self.is_owned())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    //! Pending-work tracking is plain state: these tests drive it with a queue whose events only
    //! complete when the queue is waited on, standing in for an asynchronous runtime.
    use super::*;
    use crate::{HostQueue, QueueEvent};
    use std::any::Any;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

    #[derive(Debug)]
    struct ManualEvent {
        label: String,
        done: Arc<AtomicBool>,
        waits: Arc<AtomicUsize>,
        /// Waits fail while this is set (the runtime lost the device).
        fail: Arc<AtomicBool>,
    }

    fn lost() -> Error {
        Error::runtime("test", "wait", "the device was lost")
    }

    impl QueueEvent for ManualEvent {
        fn wait(&self) -> Result<()> {
            if self.fail.load(Ordering::SeqCst) {
                return Err(lost());
            }
            self.waits.fetch_add(1, Ordering::SeqCst);
            self.done.store(true, Ordering::SeqCst);
            Ok(())
        }
        fn is_complete(&self) -> Result<bool> {
            Ok(self.done.load(Ordering::SeqCst))
        }
        fn as_any(&self) -> &dyn Any {
            self
        }
    }

    /// Host memory, but its work only "completes" when the queue is waited on.
    #[derive(Debug)]
    struct DeferredQueue {
        host: HostQueue,
        name: &'static str,
        recorded: Mutex<Vec<Arc<AtomicBool>>>,
        /// Labels of the events this queue was told to wait for.
        waited_for: Mutex<Vec<String>>,
        event_waits: Arc<AtomicUsize>,
        device_waits: AtomicUsize,
        deallocations: AtomicUsize,
        fail: Arc<AtomicBool>,
    }

    impl DeferredQueue {
        fn new(name: &'static str) -> Arc<DeferredQueue> {
            Arc::new(DeferredQueue {
                host: HostQueue::new(),
                name,
                recorded: Mutex::new(Vec::new()),
                waited_for: Mutex::new(Vec::new()),
                event_waits: Arc::new(AtomicUsize::new(0)),
                device_waits: AtomicUsize::new(0),
                deallocations: AtomicUsize::new(0),
                fail: Arc::new(AtomicBool::new(false)),
            })
        }
    }

    impl Queue for DeferredQueue {
        fn device(&self) -> &DeviceInfo {
            self.host.device()
        }
        fn host_accessible(&self, _kind: MemKind) -> bool {
            true
        }
        fn allocate(&self, kind: MemKind, size: usize, align: usize) -> Result<NonNull<u8>> {
            self.host.allocate(kind, size, align)
        }
        unsafe fn deallocate(&self, ptr: NonNull<u8>, kind: MemKind, size: usize, align: usize) {
            self.deallocations.fetch_add(1, Ordering::SeqCst);
            // SAFETY: forwarded unchanged from the caller's contract.
            unsafe { self.host.deallocate(ptr, kind, size, align) }
        }
        unsafe fn copy(&self, dst: *mut u8, src: *const u8, len: usize) -> Result<()> {
            // SAFETY: forwarded unchanged from the caller's contract.
            unsafe { self.host.copy(dst, src, len) }
        }
        unsafe fn fill(&self, dst: *mut u8, byte: u8, len: usize) -> Result<()> {
            // SAFETY: forwarded unchanged from the caller's contract.
            unsafe { self.host.fill(dst, byte, len) }
        }
        fn wait(&self) -> Result<()> {
            if self.fail.load(Ordering::SeqCst) {
                return Err(lost());
            }
            for done in self.recorded.lock().drain(..) {
                done.store(true, Ordering::SeqCst);
            }
            Ok(())
        }
        fn wait_device(&self) -> Result<()> {
            self.device_waits.fetch_add(1, Ordering::SeqCst);
            self.wait()
        }
        fn record_event(&self) -> Result<Event> {
            let mut recorded = self.recorded.lock();
            let done = Arc::new(AtomicBool::new(false));
            recorded.push(Arc::clone(&done));
            Ok(Event::new(ManualEvent {
                label: format!("{}#{}", self.name, recorded.len()),
                done,
                waits: Arc::clone(&self.event_waits),
                fail: Arc::clone(&self.fail),
            }))
        }
        fn wait_event(&self, event: &Event) -> Result<()> {
            if self.fail.load(Ordering::SeqCst) {
                return Err(lost());
            }
            let label = event
                .downcast_ref::<ManualEvent>()
                .map_or_else(|| "foreign".to_string(), |e| e.label.clone());
            self.waited_for.lock().push(label);
            Ok(())
        }
        fn kind_of(&self, ptr: *const u8) -> MemKind {
            self.host.kind_of(ptr)
        }
        fn dlpack_device(&self, kind: MemKind) -> dlpark::ffi::DLDevice {
            self.host.dlpack_device(kind)
        }
        fn as_any(&self) -> &dyn Any {
            self
        }
    }

    /// A deferred queue, also as the trait object the buffer API takes.
    type QueuePair = (Arc<DeferredQueue>, Arc<dyn Queue>);

    /// Foreign memory over `memory`, on `queue`, whose deleter only raises the returned flag.
    ///
    /// # Safety
    /// `memory` outlives the buffer.
    unsafe fn flagged_foreign(
        queue: &Arc<dyn Queue>,
        memory: &mut [u8],
    ) -> (Buffer, Arc<AtomicBool>) {
        let deleted = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&deleted);
        // SAFETY: the caller keeps `memory` alive past the buffer; the deleter only sets a flag.
        let buffer = unsafe {
            Buffer::from_foreign(
                Arc::clone(queue),
                memory.as_mut_ptr(),
                memory.len(),
                MemKind::Unknown,
                Owner::deleter(move || flag.store(true, Ordering::SeqCst)),
            )
        };
        (buffer, deleted)
    }

    fn deferred(name: &'static str) -> QueuePair {
        let queue = DeferredQueue::new(name);
        (queue.clone(), queue)
    }

    #[test]
    fn one_queue_with_pending_work_is_the_sync_queue_until_it_completes() {
        let ((_, qa), (_, qb)) = (deferred("a"), deferred("b"));
        let buffer = Buffer::alloc(&qa, MemKind::Device, 64).unwrap();
        assert!(buffer.sync_queue(&qa).unwrap().is_none());
        let src = Buffer::alloc(&qb, MemKind::Device, 64).unwrap();
        buffer.enqueue_copy_from(&src, &qb).unwrap();
        // Only b has work on it: b is the stream to export, even though a is the home queue.
        let sync = buffer.sync_queue(&qa).unwrap().unwrap();
        assert!(Arc::ptr_eq(&sync, &qb));
        qb.wait().unwrap();
        assert!(buffer.sync_queue(&qa).unwrap().is_none());
    }

    #[test]
    fn work_on_several_queues_is_joined_on_the_home_queue() {
        let ((a, qa), (_, qb)) = (deferred("a"), deferred("b"));
        let buffer = Buffer::alloc(&qa, MemKind::Device, 64).unwrap();
        let other = Buffer::alloc(&qa, MemKind::Device, 64).unwrap();
        buffer.enqueue_fill(1).unwrap();
        other.enqueue_copy_from(&buffer, &qb).unwrap();
        let sync = buffer.sync_queue(&qa).unwrap().unwrap();
        assert!(Arc::ptr_eq(&sync, &qa));
        assert_eq!(*a.waited_for.lock(), vec!["b#1".to_string()]);
        // The join is itself recorded: one entry remains, on a.
        qa.wait().unwrap();
        assert!(buffer.sync_queue(&qa).unwrap().is_none());
    }

    #[test]
    fn new_work_waits_for_other_queues_and_blocking_ops_forget_their_own() {
        let ((a, qa), (_, qb)) = (deferred("a"), deferred("b"));
        let buffer = Buffer::alloc(&qa, MemKind::Device, 8).unwrap();
        let src = Buffer::alloc(&qb, MemKind::Device, 8).unwrap();
        src.copy_from_host(&[5; 8]).unwrap();
        buffer.enqueue_copy_from(&src, &qb).unwrap();
        // A blocking fill on a must first wait for b's copy, device-side.
        buffer.fill(9).unwrap();
        assert_eq!(*a.waited_for.lock(), vec!["b#1".to_string()]);
        assert_eq!(buffer.to_vec().unwrap(), vec![9; 8]);
        buffer.synchronize().unwrap();
        assert!(buffer.sync_queue(&qa).unwrap().is_none());
    }

    #[test]
    fn dropping_memory_with_pending_work_orders_the_release_after_it() {
        let ((a, qa), (_, qb)) = (deferred("a"), deferred("b"));
        let owned = Buffer::alloc(&qa, MemKind::Device, 8).unwrap();
        owned.enqueue_fill(3).unwrap();
        let src = Buffer::alloc(&qb, MemKind::Device, 8).unwrap();
        owned.enqueue_copy_from(&src, &qb).unwrap();
        drop(owned);
        // a frees its own allocation stream-ordered after waiting for b's work on it.
        assert_eq!(*a.waited_for.lock(), vec!["b#1".to_string()]);

        let mut memory = vec![0u8; 8];
        // SAFETY: `memory` outlives the buffer.
        let (foreign, deleted) = unsafe { flagged_foreign(&qa, &mut memory) };
        foreign.enqueue_fill(4).unwrap();
        let waits_before = a.event_waits.load(Ordering::SeqCst);
        drop(foreign);
        // Foreign memory has no ordered release: the host blocked on the event, then deleted.
        assert_eq!(a.event_waits.load(Ordering::SeqCst), waits_before + 1);
        assert!(deleted.load(Ordering::SeqCst));
    }

    /// An import that took ownership of foreign memory and then refused it never makes a
    /// Buffer: its owner must still release the memory, once.
    #[test]
    fn an_owner_that_never_reaches_a_buffer_still_runs_its_deleter_once() {
        let runs = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counter = Arc::clone(&runs);
        let owner = Owner::deleter(move || {
            counter.fetch_add(1, Ordering::SeqCst);
        });
        drop(owner);
        assert_eq!(runs.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn exported_memory_is_released_only_after_the_whole_device_is_idle() {
        let (a, qa) = deferred("a");
        drop(Buffer::alloc(&qa, MemKind::Device, 8).unwrap());
        assert_eq!(a.device_waits.load(Ordering::SeqCst), 0);
        let exported = Buffer::alloc(&qa, MemKind::Device, 8).unwrap();
        let view = exported.slice(0..4).unwrap();
        view.mark_exported();
        drop(exported);
        assert_eq!(a.device_waits.load(Ordering::SeqCst), 0);
        drop(view);
        assert_eq!(a.device_waits.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn memory_a_command_may_still_use_is_leaked_when_waiting_fails() {
        let ((a, qa), (b, qb)) = (deferred("a"), deferred("b"));
        let owned = Buffer::alloc(&qa, MemKind::Device, 8).unwrap();
        let src = Buffer::alloc(&qb, MemKind::Device, 8).unwrap();
        owned.enqueue_copy_from(&src, &qb).unwrap();
        a.fail.store(true, Ordering::SeqCst);
        b.fail.store(true, Ordering::SeqCst);
        drop(owned);
        assert_eq!(a.deallocations.load(Ordering::SeqCst), 0);

        let mut memory = vec![0u8; 8];
        a.fail.store(false, Ordering::SeqCst);
        // SAFETY: `memory` outlives the buffer.
        let (foreign, deleted) = unsafe { flagged_foreign(&qa, &mut memory) };
        foreign.enqueue_fill(4).unwrap();
        a.fail.store(true, Ordering::SeqCst);
        drop(foreign);
        assert!(!deleted.load(Ordering::SeqCst));
    }

    /// An event whose wait blocks until the test opens its gate.
    #[derive(Debug, Default)]
    struct GatedEvent {
        waiting: AtomicBool,
        open: Mutex<bool>,
        opened: parking_lot::Condvar,
    }

    impl QueueEvent for GatedEvent {
        fn wait(&self) -> Result<()> {
            self.waiting.store(true, Ordering::SeqCst);
            let mut open = self.open.lock();
            while !*open {
                self.opened.wait(&mut open);
            }
            Ok(())
        }
        fn is_complete(&self) -> Result<bool> {
            Ok(*self.open.lock())
        }
        fn as_any(&self) -> &dyn Any {
            self
        }
    }

    /// Holds an `Arc<GatedEvent>` so that the test can open the gate the buffer waits on.
    #[derive(Debug)]
    struct SharedGate(Arc<GatedEvent>);

    impl QueueEvent for SharedGate {
        fn wait(&self) -> Result<()> {
            self.0.wait()
        }
        fn is_complete(&self) -> Result<bool> {
            self.0.is_complete()
        }
        fn as_any(&self) -> &dyn Any {
            self
        }
    }

    #[test]
    fn work_stays_recorded_while_synchronize_waits_for_it() {
        let ((a, qa), (_, qb)) = (deferred("a"), deferred("b"));
        let buffer = Buffer::alloc(&qa, MemKind::Device, 8).unwrap();
        let gate = Arc::new(GatedEvent::default());
        buffer.record_work(&qb, Event::new(SharedGate(Arc::clone(&gate))));
        std::thread::scope(|scope| {
            let waiter = scope.spawn(|| buffer.synchronize());
            while !gate.waiting.load(Ordering::SeqCst) {
                std::thread::yield_now();
            }
            // A write on a, ordered while the host still waits for b's read: it must wait too.
            buffer.order_on(&qa).unwrap();
            *gate.open.lock() = true;
            gate.opened.notify_all();
            waiter.join().unwrap().unwrap();
        });
        assert_eq!(*a.waited_for.lock(), vec!["foreign".to_string()]);
        assert!(!buffer.has_pending_work());
    }

    /// Another library's queue: counts the events recorded on it.
    #[derive(Debug, Default)]
    struct Producer {
        recorded: AtomicUsize,
        waited: AtomicUsize,
        done: Arc<AtomicBool>,
    }

    impl ForeignQueue for Producer {
        fn record_event(&self) -> Result<Event> {
            self.recorded.fetch_add(1, Ordering::SeqCst);
            Ok(Event::new(ManualEvent {
                label: "producer".into(),
                done: Arc::clone(&self.done),
                waits: Arc::new(AtomicUsize::new(0)),
                fail: Arc::new(AtomicBool::new(false)),
            }))
        }
        fn wait_event(&self, _event: &Event) -> Result<()> {
            self.waited.fetch_add(1, Ordering::SeqCst);
            Ok(())
        }
    }

    #[test]
    fn a_held_back_producer_waits_for_work_enqueued_without_waiting() {
        let (_, qa) = deferred("a");
        let imported = Buffer::alloc(&qa, MemKind::Device, 8).unwrap();
        let producer = Arc::new(Producer::default());
        imported.hold_back(producer.clone());
        assert!(!imported.has_pending_work());
        imported.fill(1).unwrap();
        assert_eq!(producer.waited.load(Ordering::SeqCst), 0);
        imported.enqueue_fill(2).unwrap();
        let source = Buffer::alloc(&qa, MemKind::Device, 8).unwrap();
        imported.enqueue_copy_from(&source, &qa).unwrap();
        assert_eq!(producer.waited.load(Ordering::SeqCst), 2);
    }

    #[test]
    fn re_exported_foreign_memory_lets_go_of_its_owner_after_the_device_is_idle() {
        let (a, qa) = deferred("a");
        let released = Arc::new(AtomicBool::new(false));
        let set = Arc::clone(&released);
        // SAFETY: nothing dereferences the made-up address.
        let imported = unsafe {
            Buffer::from_foreign(
                Arc::clone(&qa),
                0x1000 as *mut u8,
                8,
                MemKind::Device,
                Owner::deleter(move || set.store(true, Ordering::SeqCst)),
            )
        };
        imported.mark_exported();
        drop(imported);
        assert!(released.load(Ordering::SeqCst));
        assert_eq!(a.device_waits.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn the_producers_event_is_recorded_when_first_needed_and_ordered_before_ours() {
        let (a, qa) = deferred("a");
        let mut memory = vec![0u8; 8];
        // SAFETY: `memory` outlives the buffer.
        let imported = unsafe {
            Buffer::from_foreign(
                Arc::clone(&qa),
                memory.as_mut_ptr(),
                8,
                MemKind::Unknown,
                Owner::keep_alive(()),
            )
        };
        let producer = Arc::new(Producer::default());
        imported.record_producer(producer.clone()).unwrap();
        assert!(imported.has_pending_work());
        assert_eq!(producer.recorded.load(Ordering::SeqCst), 0);
        imported.fill(1).unwrap();
        assert_eq!(producer.recorded.load(Ordering::SeqCst), 1);
        assert_eq!(*a.waited_for.lock(), vec!["producer".to_string()]);
        // The fill waited for it on the device: once done, nothing is pending.
        producer.done.store(true, Ordering::SeqCst);
        qa.wait().unwrap();
        imported.synchronize().unwrap();
        assert!(!imported.has_pending_work());

        // Dropping an import with only the producer's work pending does not wait for it.
        let waits = a.event_waits.load(Ordering::SeqCst);
        imported
            .record_producer(Arc::new(Producer::default()))
            .unwrap();
        drop(imported);
        assert_eq!(a.event_waits.load(Ordering::SeqCst), waits);
    }

    #[test]
    fn a_pending_copy_holds_its_source_so_dropping_the_source_does_not_wait() {
        let (a, qa) = deferred("a");
        let mut memory = vec![7u8; 8];
        // SAFETY: `memory` outlives the buffer.
        let (source, deleted) = unsafe { flagged_foreign(&qa, &mut memory) };
        let target = Buffer::alloc(&qa, MemKind::Device, 8).unwrap();
        target.enqueue_copy_from(&source, &qa).unwrap();
        let waits = a.event_waits.load(Ordering::SeqCst);
        drop(source);
        assert_eq!(a.event_waits.load(Ordering::SeqCst), waits);
        assert!(!deleted.load(Ordering::SeqCst));
        target.synchronize().unwrap();
        assert!(deleted.load(Ordering::SeqCst));
    }

    #[test]
    fn waits_before_a_release_run_through_the_blocking_hook() {
        static CALLS: AtomicUsize = AtomicUsize::new(0);
        fn counting(run: &mut dyn FnMut()) {
            CALLS.fetch_add(1, Ordering::SeqCst);
            run();
        }
        crate::set_blocking_hook(counting);
        let (_, qa) = deferred("a");
        drop(Buffer::alloc(&qa, MemKind::Device, 8).unwrap());
        assert_eq!(CALLS.load(Ordering::SeqCst), 0);
        let busy = Buffer::alloc(&qa, MemKind::Device, 8).unwrap();
        busy.enqueue_fill(1).unwrap();
        drop(busy);
        assert_eq!(CALLS.load(Ordering::SeqCst), 1);
    }
}
