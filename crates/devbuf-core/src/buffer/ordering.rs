//! The work pending on a [`Buffer`]'s allocation, and the ordering rules around it
//! (docs/architecture.md, "The ordering invariant"): devbuf's own work on several queues, a
//! producer's work devbuf waits for, and other libraries' work once the memory was handed out.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use smallvec::SmallVec;

use super::Buffer;
use super::allocation::{Allocation, PendingGuard, PendingList, PendingWork, exported};
use crate::{Event, ForeignQueue, Queue, Result};

impl Buffer {
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
        pending.set_producer(producer);
        Ok(())
    }

    /// Makes `producer`, the queue of the library that produced this (imported) memory, wait for
    /// every command devbuf enqueues on it from now on without waiting for it (copies, fills)
    /// before it runs more of its own work: CAI v3's rule for a consumer that works on its own
    /// stream. The producer's queue must stay alive while the memory is viewed.
    pub fn hold_back(&self, producer: Arc<dyn ForeignQueue>) {
        self.alloc.pending.lock().set_held_back(producer);
    }

    /// Makes work enqueued on `queue` from now on wait for pending work on this allocation from
    /// other queues (on the device where the runtime can, else by blocking), and, once the memory
    /// was handed out, for other libraries' work on the queues devbuf knows of
    /// ([`crate::Interop::untracked_foreign_work`]).
    pub fn order_on(&self, queue: &Arc<dyn Queue>) -> Result<()> {
        if self.may_have_foreign_work() {
            self.order_after_foreign_work(queue)?;
        }
        self.for_each_pending(|work| {
            if work.on(queue) {
                Ok(())
            } else {
                queue.wait_event(&work.event)
            }
        })
    }

    /// Makes work another library enqueues on `queue` from now on wait for all pending work on
    /// this allocation (a DLPack consumer's `stream`), without blocking the host where the
    /// runtime allows it.
    pub fn order_on_foreign(&self, queue: &dyn ForeignQueue) -> Result<()> {
        self.for_each_pending(|work| queue.wait_event(&work.event))
    }

    /// Runs `wait` on each piece of work still pending on this allocation (the producer's among
    /// them), after forgetting what has completed.
    fn for_each_pending(&self, mut wait: impl FnMut(&PendingWork) -> Result<()>) -> Result<()> {
        if self.alloc.pending.is_empty() {
            return Ok(());
        }
        // Declared first, so dropped after the guard.
        let _completed: Vec<PendingWork>;
        let mut pending = self.alloc.pending.lock();
        pending.record_producer_event()?;
        _completed = pending.take_all_completed();
        for work in &pending.work {
            wait(work)?;
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
    /// queues it knows of ([`crate::Interop::untracked_foreign_work`]), and when devbuf frees it, it first
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
        let state = if self.alloc.queue().interop().untracked_foreign_work() {
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
            && let Some(event) = self.alloc.queue().interop().foreign_work_event()?
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

    /// Whether the memory was handed to other libraries that may enqueue work devbuf does not
    /// track on queues devbuf knows of (one load: host views of exported memory are hot paths).
    #[inline]
    fn may_have_foreign_work(&self) -> bool {
        self.alloc.exported.load(Ordering::Relaxed) == exported::WITH_FOREIGN_WORK
    }

    /// Makes work enqueued on `queue` from now on wait for other libraries' work on the queues the
    /// memory's queue knows of: on that queue itself without an event where the runtime can.
    fn order_after_foreign_work(&self, queue: &Arc<dyn Queue>) -> Result<()> {
        let home = self.alloc.queue();
        if Arc::ptr_eq(queue, home) {
            return home.interop().order_after_foreign_work();
        }
        match home.interop().foreign_work_event()? {
            Some(event) => queue.wait_event(&event),
            None => Ok(()),
        }
    }
}

/// Records work just enqueued on `queue` on the allocations of `buffers`, and returns its event;
/// the first buffer's allocation also holds `source` until the work completes.
/// The event is recorded while every allocation's pending list is locked (in address order, so
/// threads never deadlock): a thread that enqueued later records later, and never replaces a
/// queue's latest event by an earlier one.
pub(super) fn record_enqueued(
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
        if let Some(producer) = pending.held_back() {
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
            work.sources.extend(source.map(|source| source.alloc));
        }
        None => pending.work.push(PendingWork {
            queue: Some(Arc::clone(queue)),
            event,
            sources: source.map(|source| source.alloc).into_iter().collect(),
        }),
    }
}
