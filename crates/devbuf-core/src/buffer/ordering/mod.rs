//! Every access to a [`Buffer`]'s bytes, ordered after the work pending on its allocation
//! (docs/architecture.md, "The ordering invariant"): devbuf's own work on several queues, a
//! producer's work devbuf waits for, and other libraries' work on every queue the memory was
//! handed out on, through one function, [`Buffer::order_access`]; what a hand-out records; and
//! what devbuf's commands record, and make other libraries' next work there wait for. The
//! allocation-level half of [`crate::ordering`]; `release` is an allocation's release after
//! that work.

pub(super) mod release;

use std::sync::Arc;
use std::sync::atomic::Ordering;

use smallvec::SmallVec;

use super::Buffer;
use super::allocation::{Allocation, PendingGuard, PendingList, PendingWork, exported};
use crate::{Event, ForeignQueue, Queue, Result};

/// Where devbuf is about to touch an allocation's bytes ([`Buffer::order_access`]).
#[derive(Clone, Copy)]
pub enum Access<'a> {
    /// The host reads or writes them (a host view, a pickle, an IPC export): blocks.
    Host,
    /// A command devbuf enqueues on this queue.
    Queue(&'a Arc<dyn Queue>),
    /// Another library's queue, handed the memory (a DLPack consumer's `stream`).
    Consumer(&'a dyn ForeignQueue),
}

impl Buffer {
    /// Records that work on this allocation was enqueued on `queue` and completes with `event`
    /// (for work devbuf did not enqueue itself, e.g. a consumer's kernel).
    pub fn record_work(&self, queue: &Arc<dyn Queue>, event: Event) {
        let home = self.alloc.queue();
        set_latest(&mut self.alloc.pending.lock(), home, queue, event, None);
    }

    /// Orders the release of this allocation (and every later access) after all work enqueued so
    /// far on `queue`, whoever enqueued it ([`crate::ordering::all_work_event`]): `close(stream=)`.
    pub fn release_after_stream(&self, queue: &Arc<dyn Queue>) -> Result<()> {
        let event = crate::ordering::all_work_event(queue)?;
        self.record_work(queue, event);
        Ok(())
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

    /// Makes work enqueued on `queue` from now on wait for everything that may still touch this
    /// allocation: [`Buffer::order_access`] for a command on `queue`.
    pub fn order_on(&self, queue: &Arc<dyn Queue>) -> Result<()> {
        self.order_access(Access::Queue(queue))
    }

    /// Makes work another library enqueues on `queue` from now on wait for everything that may
    /// still touch this allocation (a DLPack consumer's `stream`): [`Buffer::order_access`] for
    /// another library's queue.
    pub fn order_on_foreign(&self, queue: &dyn ForeignQueue) -> Result<()> {
        self.order_access(Access::Consumer(queue))
    }

    /// The ordering invariant, in one place: orders `access` after every piece of work that may
    /// still touch this allocation's bytes. That is devbuf's own pending work on any queue, the
    /// producer's work on imported memory, and, once the memory was handed out, other libraries'
    /// work on every queue devbuf handed out with it (its own queue, the streams named in
    /// exports, CUDA's legacy default stream: [`crate::Interop::untracked_foreign_work`]).
    /// Without blocking the host where the runtime allows it, except for [`Access::Host`], which
    /// blocks. Every path that touches the bytes (host views, commands, copies, `get`, pickling,
    /// IPC exports, re-exports to another consumer) calls this; the release of the memory
    /// counts the same work as pending (`Allocation`'s `Drop`).
    pub fn order_access(&self, access: Access<'_>) -> Result<()> {
        if let Access::Host = access {
            return self.wait_on_host();
        }
        if self.may_have_foreign_work() {
            self.order_after_handed_out(&access)?;
        }
        // The allocation's own queue follows its in-order allocation without an event.
        let own_queue =
            matches!(access, Access::Queue(queue) if Arc::ptr_eq(queue, self.alloc.queue()));
        self.for_each_pending(own_queue, |work| match access {
            Access::Queue(queue) if work.on(queue) => Ok(()),
            Access::Queue(queue) => queue.wait_event(&work.event),
            Access::Consumer(consumer) => consumer.wait_event(&work.event),
            Access::Host => work.event.wait(),
        })
    }

    /// Records that the memory was handed to another library together with `queue` (a CAI
    /// `stream`, a DLPack consumer's stream that is one of devbuf's, the exchange table's work
    /// stream, SUAI's `syclobj`): from now on every access orders after other libraries' work
    /// there ([`Buffer::order_access`]), and the queue lives as long as the memory. The
    /// allocation's own queue is recorded by [`Buffer::mark_exported`] alone.
    pub fn hand_out_on(&self, queue: &Arc<dyn Queue>) {
        self.mark_exported();
        if Arc::ptr_eq(queue, self.alloc.queue()) || !queue.interop().untracked_foreign_work() {
            return;
        }
        if self.alloc.pending.lock().add_handed_out(queue) {
            self.alloc
                .exported
                .store(exported::ELSEWHERE_TOO, Ordering::Relaxed);
        }
    }

    /// Records a DLPack consumer's queue that is one of devbuf's own (a devbuf stream passed as
    /// `stream`) as a queue the memory was handed out on: the consumer writes there.
    pub(crate) fn record_consumer(&self, consumer: &dyn ForeignQueue) {
        if let Some(queue) = crate::ordering::devbuf_queue_of(consumer) {
            self.hand_out_on(queue);
        }
    }

    /// Makes `consumer` wait for an event recorded now on the queue that sees all pending work on
    /// this allocation (joined there when it is on several: [`Buffer::sync_queue`]), else on
    /// `home`: the rule of runtimes whose queues are streams ([`crate::interop::ConsumerOrder`]).
    pub(crate) fn order_consumer_after_queue(
        &self,
        consumer: &dyn ForeignQueue,
        home: &Arc<dyn Queue>,
    ) -> Result<()> {
        let pending = self.sync_queue(home)?;
        let producer = pending.as_ref().unwrap_or(home);
        consumer.wait_event(&producer.record_event()?)
    }

    /// Waits for `queue` and forgets its completed work on this and `others`' allocations (work
    /// another thread enqueued after the wait stays recorded): a command devbuf waits for.
    pub(crate) fn finish_on(&self, queue: &Arc<dyn Queue>, others: &[&Buffer]) -> Result<()> {
        queue.wait()?;
        for buffer in std::iter::once(self).chain(others.iter().copied()) {
            if !buffer.alloc.pending.is_empty() {
                let mut pending = buffer.alloc.pending.lock();
                // The queue's work is done: its in-order allocations too.
                if Arc::ptr_eq(queue, buffer.queue()) {
                    pending.allocation_covered();
                }
                // Another library's work was ordered before ours (order_on), so it is done too.
                let completed = pending.take_completed(|w| {
                    (w.queue.is_none() || w.on(queue)) && w.event.is_complete().unwrap_or(false)
                });
                drop(pending);
                drop(completed);
            }
        }
        Ok(())
    }

    /// The allocation's own queue when other libraries may work on it, and the other queues the
    /// memory was handed out on.
    fn handed_out_queues(&self) -> SmallVec<[Arc<dyn Queue>; 2]> {
        let home = self.alloc.queue();
        let mut queues: SmallVec<[Arc<dyn Queue>; 2]> = SmallVec::new();
        if home.interop().untracked_foreign_work() {
            queues.push(Arc::clone(home));
        }
        // Locked only where other queues were recorded: host views of exported memory are hot.
        if self.alloc.exported.load(Ordering::Relaxed) == exported::ELSEWHERE_TOO {
            queues.extend(self.alloc.pending.lock().handed_out().iter().cloned());
        }
        queues
    }

    /// Orders `access` after other libraries' work on every queue the memory was handed out on:
    /// on the accessing queue itself without an event where the runtime can.
    fn order_after_handed_out(&self, access: &Access<'_>) -> Result<()> {
        for queue in self.handed_out_queues() {
            match access {
                Access::Queue(target) if Arc::ptr_eq(target, &queue) => {
                    queue.interop().order_after_foreign_work()?;
                }
                // The libraries working on that very queue order their own work there.
                Access::Consumer(consumer)
                    if crate::ordering::devbuf_queue_of(*consumer)
                        .is_some_and(|theirs| Arc::ptr_eq(theirs, &queue)) => {}
                _ => {
                    let Some(event) = queue.interop().foreign_work_event()? else {
                        continue;
                    };
                    match access {
                        Access::Queue(target) => target.wait_event(&event)?,
                        Access::Consumer(consumer) => consumer.wait_event(&event)?,
                        Access::Host => event.wait()?,
                    }
                }
            }
        }
        Ok(())
    }

    /// Runs `wait` on each piece of work still pending on this allocation (the producer's among
    /// them, and the in-order allocation unless `own_queue` asks, which follows it anyway), after
    /// forgetting what has completed. The waits run with the allocation unlocked: ordering
    /// another library's queue may call into the embedding language ([`crate::ecosystem`]), whose
    /// own lock another thread may hold while it waits for ours.
    fn for_each_pending(
        &self,
        own_queue: bool,
        mut wait: impl FnMut(&PendingWork) -> Result<()>,
    ) -> Result<()> {
        if self.alloc.pending.is_empty() {
            return Ok(());
        }
        let (completed, pending): (Vec<PendingWork>, SmallVec<[PendingWork; 2]>) = {
            let mut pending = self.alloc.pending.lock();
            pending.record_producer_event()?;
            if !own_queue {
                pending.record_allocation_event(self.alloc.queue())?;
            }
            let completed = pending.take_all_completed();
            let still = pending
                .work
                .iter()
                .map(PendingWork::without_sources)
                .collect();
            (completed, still)
        };
        drop(completed);
        pending.iter().try_for_each(&mut wait)
    }

    /// The queue a consumer must synchronize with to see every write that may still be pending on
    /// this allocation (CAI v3's producer rule; a re-export to another consumer), made to follow
    /// everything [`Buffer::order_access`] orders after: `None` when nothing can be pending; else
    /// the one queue with pending work while it takes work ([`Queue::takes_work`]), or `home`
    /// when there is none, several, or that one's stream is gone (pending work on other queues
    /// joined there by its events).
    pub fn sync_queue(&self, home: &Arc<dyn Queue>) -> Result<Option<Arc<dyn Queue>>> {
        let consumers = self.may_have_foreign_work();
        if self.alloc.pending.is_empty() {
            if !consumers {
                return Ok(None);
            }
            self.order_after_handed_out(&Access::Queue(home))?;
            return Ok(Some(Arc::clone(home)));
        }
        // Declared first, so dropped after the guard.
        let completed: Vec<PendingWork>;
        let mut pending = self.alloc.pending.lock();
        pending.record_producer_event()?;
        // An in-order allocation its queue has run is no work to sync with (a consumer handed
        // memory with nothing pending works where it likes: Numba on its default stream). A
        // consumer that syncs with the allocation's own queue follows the allocation; any other
        // queue needs its event.
        if pending.allocation_unrecorded() && self.alloc.queue().is_idle().unwrap_or(false) {
            pending.allocation_covered();
        }
        if !Arc::ptr_eq(home, self.alloc.queue()) {
            pending.record_allocation_event(self.alloc.queue())?;
        }
        completed = pending.take_all_completed();
        let target = match pending.work.as_slice() {
            _ if pending.allocation_unrecorded() => Some(Arc::clone(home)),
            [] if !consumers => None,
            // A queue whose stream its owner destroyed takes no more work: its event is joined
            // on `home` below.
            [
                PendingWork {
                    queue: Some(only), ..
                },
            ] if only.takes_work() => Some(Arc::clone(only)),
            _ => Some(Arc::clone(home)),
        };
        if let Some(target) = &target
            && pending.work.iter().any(|w| !w.on(target))
        {
            // Several queues, or another library's: joined on `target` (home).
            for work in pending.work.iter().filter(|w| !w.on(target)) {
                target.wait_event(&work.event)?;
            }
            let joined = target.record_event()?;
            let sources = pending.work.iter().flat_map(|w| w.sources.iter().cloned());
            let joined = PendingWork {
                queue: Some(Arc::clone(target)),
                event: joined,
                sources: sources.collect(),
            };
            drop(std::mem::replace(&mut pending.work, vec![joined]));
            // Recorded on the allocation's own queue when its allocation was unrecorded.
            pending.allocation_covered();
        }
        drop(pending);
        drop(completed);
        if consumers && let Some(target) = &target {
            self.order_after_handed_out(&Access::Queue(target))?;
        }
        Ok(target)
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
        // Only from "never": another thread may have recorded other queues meanwhile.
        let _ = self.alloc.exported.compare_exchange(
            exported::NO,
            state,
            Ordering::Relaxed,
            Ordering::Relaxed,
        );
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

    /// Blocks until everything that may still touch this allocation has completed:
    /// [`Buffer::order_access`] for the host.
    pub fn synchronize(&self) -> Result<()> {
        self.order_access(Access::Host)
    }

    /// [`Buffer::order_access`] for the host: blocks.
    fn wait_on_host(&self) -> Result<()> {
        if self.may_have_foreign_work() {
            self.order_after_handed_out(&Access::Host)?;
        }
        if self.alloc.pending.is_empty() {
            return Ok(());
        }
        // The work stays recorded while the host waits: a thread that orders new work after it
        // meanwhile must still see it.
        let events: SmallVec<[Event; 2]> = {
            let mut pending = self.alloc.pending.lock();
            pending.record_producer_event()?;
            pending.record_allocation_event(self.alloc.queue())?;
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
        self.alloc.exported.load(Ordering::Relaxed) >= exported::WITH_FOREIGN_WORK
    }

    /// Whether work devbuf enqueues on the memory's own queue may have to wait for something
    /// that queue does not already order (it runs in order, other libraries' copies of it
    /// included): pending work, or other queues the memory was handed out on. One load when
    /// neither (exports that name the own queue are hot paths).
    #[inline]
    pub fn needs_ordering_on_own_queue(&self) -> bool {
        self.has_pending_work()
            || self.alloc.exported.load(Ordering::Relaxed) == exported::ELSEWHERE_TOO
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
        set_latest(pending, alloc.queue(), queue, event.clone(), keep);
    }
    let mut held_back: SmallVec<[Arc<dyn ForeignQueue>; 1]> = SmallVec::new();
    let mut handed_out: SmallVec<[Arc<dyn Queue>; 2]> = SmallVec::new();
    for (alloc, pending) in allocations.iter().zip(&guards) {
        held_back.extend(pending.held_back().cloned());
        handed_out.extend(queues_handed_out(alloc, pending, queue));
    }
    // Unlocked first: ordering another library's queue may call into the embedding language.
    drop(guards);
    for producer in held_back {
        producer.wait_event(&event)?;
    }
    for other in handed_out {
        other.interop().order_handed_out_after(&event)?;
    }
    Ok(event)
}

/// The queues `alloc` was handed out on whose other libraries' later work does not follow
/// devbuf's commands on `queue` by itself: each is made to wait for them (the other direction of
/// [`Buffer::order_access`], for memory already handed out), as an in-order queue shared with
/// them does by itself.
fn queues_handed_out<'a>(
    alloc: &'a Allocation,
    pending: &'a PendingList,
    queue: &'a Arc<dyn Queue>,
) -> impl Iterator<Item = Arc<dyn Queue>> + 'a {
    let state = alloc.exported.load(Ordering::Relaxed);
    let home = (state >= exported::WITH_FOREIGN_WORK).then(|| alloc.queue());
    let others = match state == exported::ELSEWHERE_TOO {
        true => pending.handed_out(),
        false => &[],
    };
    home.into_iter()
        .chain(others)
        .filter(move |handed_out| {
            !(Arc::ptr_eq(handed_out, queue) && handed_out.interop().hands_out_command_queue())
        })
        .cloned()
}

/// Makes `event` the latest work of `queue` in the pending list of an allocation of `home`, which
/// also holds `source` until then. Work on `home` covers its in-order allocation.
fn set_latest(
    pending: &mut PendingGuard<'_>,
    home: &Arc<dyn Queue>,
    queue: &Arc<dyn Queue>,
    event: Event,
    source: Option<Buffer>,
) {
    if Arc::ptr_eq(queue, home) {
        pending.allocation_covered();
    }
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

impl PendingList {
    /// Records the event of the producer's queue, if that has not been done yet.
    pub(super) fn record_producer_event(&mut self) -> Result<()> {
        if let Some(producer) = &self.unordered {
            let event = producer.record_event()?;
            self.unordered = None;
            self.work.push(PendingWork {
                queue: None,
                event,
                sources: Vec::new(),
            });
        }
        Ok(())
    }
}

impl PendingGuard<'_> {
    /// Records the in-order allocation as work on `home`, the allocation's own queue, if nothing
    /// covers it yet: `home`'s later work recorded in the list does (a queue runs in order).
    pub(super) fn record_allocation_event(&mut self, home: &Arc<dyn Queue>) -> Result<()> {
        if !self.allocation_unrecorded() {
            return Ok(());
        }
        if !self.list.work.iter().any(|work| work.on(home)) {
            let event = home.record_event()?;
            self.list.work.push(PendingWork {
                queue: Some(Arc::clone(home)),
                event,
                sources: Vec::new(),
            });
        }
        self.allocation_unrecorded.store(false, Ordering::Relaxed);
        Ok(())
    }
}
