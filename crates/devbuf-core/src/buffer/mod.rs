//! [`Buffer`]: bytes with an owner.
//!
//! Either devbuf allocated the bytes (they go back to the queue that made them, exactly once,
//! when the last view is dropped), or they are foreign and the caller says how they are kept
//! alive: an owner object held until the last view goes, or a deleter run exactly once then.

mod allocation;
mod on_queue;
mod owner;

use std::any::Any;
use std::fmt;
use std::ops::Range;
use std::ptr::NonNull;
use std::sync::Arc;

use std::sync::atomic::{AtomicU8, Ordering};

use parking_lot::Mutex;
use smallvec::SmallVec;

use crate::mr::{self, MemoryResource};
use crate::{DeviceInfo, Error, Event, ForeignQueue, MemKind, Queue, Result};
use allocation::{
    Allocation, Pending, PendingGuard, PendingList, PendingWork, Release, check_allocation,
    exported,
};
pub use owner::Owner;

/// Alignment of [`Buffer::alloc`]: DLPack's recommended data alignment, and CUDA's own.
pub const DEFAULT_ALIGNMENT: usize = 256;

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
    ///
    /// ```
    /// use devbuf_core::{Backend, Buffer, HostBackend, MemKind};
    ///
    /// let queue = HostBackend.open("")?;
    /// let buffer = Buffer::alloc(&queue, MemKind::Device, 256)?;
    /// assert_eq!(buffer.len(), 256);
    /// assert_eq!(queue.kind_of(buffer.ptr()), MemKind::Device);
    /// # Ok::<(), devbuf_core::Error>(())
    /// ```
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
                exported: AtomicU8::new(exported::NO),
                read_only: false,
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
        // SAFETY: the caller's contract.
        unsafe { Self::foreign(queue, ptr, len, kind, owner, false) }
    }

    /// Wraps foreign memory that may only be read, as [`Buffer::from_foreign`]: every write
    /// through the buffer (fills, copies into it) is refused with an error.
    ///
    /// # Safety
    /// As for [`Buffer::from_foreign`], with the memory valid for reads only.
    pub unsafe fn from_foreign_read_only(
        queue: Arc<dyn Queue>,
        ptr: *mut u8,
        len: usize,
        kind: MemKind,
        owner: Owner,
    ) -> Buffer {
        // SAFETY: the caller's contract; nothing writes through a read-only buffer.
        unsafe { Self::foreign(queue, ptr, len, kind, owner, true) }
    }

    /// # Safety
    /// As for [`Buffer::from_foreign`]; writable too unless `read_only`.
    unsafe fn foreign(
        queue: Arc<dyn Queue>,
        ptr: *mut u8,
        len: usize,
        kind: MemKind,
        owner: Owner,
        read_only: bool,
    ) -> Buffer {
        Buffer {
            alloc: Arc::new(Allocation {
                base: ptr as usize,
                kind,
                queue,
                release: Release::Foreign(Mutex::new(Some(owner))),
                pending: Pending::default(),
                exported: AtomicU8::new(exported::NO),
                read_only,
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

    /// Whether the memory may only be read ([`Buffer::from_foreign_read_only`]): fills and copies
    /// into it are refused.
    pub fn is_read_only(&self) -> bool {
        self.alloc.read_only
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
    ///
    /// ```
    /// use devbuf_core::{Backend, Buffer, HostBackend, MemKind};
    ///
    /// let queue = HostBackend.open("")?;
    /// let src = Buffer::alloc(&queue, MemKind::Host, 8)?;
    /// src.copy_from_host(b"devbuf!!")?;
    /// let dst = Buffer::alloc(&queue, MemKind::Device, 8)?;
    /// dst.copy_from(&src)?;
    /// let mut back = [0; 8];
    /// dst.copy_to_host(&mut back)?;
    /// assert_eq!(&back, b"devbuf!!");
    ///
    /// // Lengths must match: a view of the right size is a slice.
    /// assert!(dst.copy_from(&src.slice(0..4)?).is_err());
    /// dst.slice(4..8)?.copy_from(&src.slice(0..4)?)?;
    /// assert_eq!(dst.to_vec()?, b"devbdevb");
    /// # Ok::<(), devbuf_core::Error>(())
    /// ```
    pub fn copy_from(&self, src: &Buffer) -> Result<()> {
        self.check_writable()?;
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
        self.check_writable()?;
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
        self.check_writable()?;
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
        self.check_writable()?;
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
        self.check_writable()?;
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
    /// other queues (on the device where the runtime can, else by blocking), and, once the memory
    /// was handed out, for other libraries' work on the queues devbuf knows of
    /// ([`Queue::untracked_foreign_work`]).
    pub fn order_on(&self, queue: &Arc<dyn Queue>) -> Result<()> {
        if self.may_have_foreign_work() {
            self.order_after_foreign_work(queue)?;
        }
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

    /// Records that the memory was handed to another library, whose work on it devbuf does not
    /// see: from now on devbuf orders its own use of the memory after other libraries' work on the
    /// queues it knows of ([`Queue::untracked_foreign_work`]), and when devbuf frees it, it first
    /// waits for all work on the device ([`Queue::wait_device`]).
    #[inline]
    pub fn mark_exported(&self) {
        // Exports are hot paths: the queue is asked once.
        if self.alloc.exported.load(Ordering::Relaxed) == exported::NO {
            self.mark_first_export();
        }
    }

    #[cold]
    fn mark_first_export(&self) {
        let state = if self.alloc.queue.untracked_foreign_work() {
            exported::WITH_FOREIGN_WORK
        } else {
            exported::YES
        };
        self.alloc.exported.store(state, Ordering::Relaxed);
    }

    /// Whether work devbuf recorded on this allocation may still be running.
    #[inline]
    pub fn has_pending_work(&self) -> bool {
        !self.alloc.pending.is_empty()
    }

    /// Whether [`Buffer::synchronize`] may have to wait: work devbuf recorded may still be running,
    /// or the memory was handed out and other libraries may have work on it on queues devbuf knows
    /// of.
    #[inline]
    pub fn needs_synchronize(&self) -> bool {
        self.has_pending_work() || self.may_have_foreign_work()
    }

    /// Blocks until all pending work on this allocation has completed, and, once the memory was
    /// handed out, other libraries' work on the queues devbuf knows of.
    pub fn synchronize(&self) -> Result<()> {
        if self.may_have_foreign_work()
            && let Some(event) = self.alloc.queue.foreign_work_event()?
        {
            event.wait()?;
        }
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

    fn check_writable(&self) -> Result<()> {
        if self.alloc.read_only {
            return Err(Error::invalid(
                "buffer",
                format!(
                    "the {} bytes at {:p} are read-only (mapped for reading only)",
                    self.len,
                    self.ptr()
                ),
            ));
        }
        Ok(())
    }

    /// Whether the memory was handed to other libraries that may enqueue work devbuf does not
    /// track on queues devbuf knows of (one load: host views of exported memory are hot paths).
    #[inline]
    fn may_have_foreign_work(&self) -> bool {
        self.alloc.exported.load(Ordering::Relaxed) == exported::WITH_FOREIGN_WORK
    }

    /// Makes work enqueued on `queue` from now on wait for other libraries' work on the queues the
    /// memory's queue knows of: on that queue itself without an event where the runtime can.
    fn order_after_foreign_work(&self, queue: &Arc<dyn Queue>) -> Result<()> {
        let home = &self.alloc.queue;
        if Arc::ptr_eq(queue, home) {
            return home.order_after_foreign_work();
        }
        match home.foreign_work_event()? {
            Some(event) => queue.wait_event(&event),
            None => Ok(()),
        }
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
mod foreign_work_tests;
#[cfg(test)]
mod tests;
