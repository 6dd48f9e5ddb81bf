//! What devbuf records about one allocation to order every later access to it
//! (docs/architecture.md, "The ordering invariant"): the work that may still touch its bytes
//! (devbuf's own commands on any queue, the producer's work on imported memory), the queues it was
//! handed out on, and whether it was handed out at all.

use std::ops::{Deref, DerefMut};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::{Mutex, MutexGuard};

use crate::buffer::SharedAllocation;
use crate::{Event, ForeignQueue, Queue, Result};

/// Work enqueued on an allocation that may not have completed yet.
pub(crate) struct PendingWork {
    /// The devbuf queue it runs on; `None` for another library's queue (the producer of
    /// imported memory), whose work devbuf never waits for before letting go of its memory.
    pub(crate) queue: Option<Arc<dyn Queue>>,
    /// Completes when the queue's work on the allocation (and everything before it) is done.
    pub(crate) event: Event,
    /// The allocations of the sources of copies into this one enqueued without waiting: held
    /// until the copies complete, so that dropping them never has to wait.
    pub(crate) sources: Vec<SharedAllocation>,
}

impl PendingWork {
    /// The same work, without holding the sources of its copies.
    pub(crate) fn without_sources(&self) -> PendingWork {
        PendingWork {
            queue: self.queue.clone(),
            event: self.event.clone(),
            sources: Vec::new(),
        }
    }

    pub(crate) fn on(&self, queue: &Arc<dyn Queue>) -> bool {
        self.queue
            .as_ref()
            .is_some_and(|own| Arc::ptr_eq(own, queue))
    }
}

/// The pending work of an allocation.
#[derive(Default)]
pub(crate) struct PendingList {
    pub(crate) work: Vec<PendingWork>,
    /// The queue of the library that produced imported memory while devbuf has not yet ordered
    /// anything after its work there. An event is recorded on it (a barrier: microseconds) only
    /// when devbuf first needs one, so that imports nobody waits on cost nothing; the event then
    /// covers the producer's work up to that moment, which includes its work at import. Held in
    /// place (every SUAI import sets it): a box of its own cost an allocation and a free per
    /// import.
    unordered: Option<Arc<dyn ForeignQueue>>,
    /// The other libraries' queues this allocation was handed to or from, boxed: few allocations
    /// have any, and every allocation's record is built and dropped on the hot path.
    handoffs: Option<Box<Handoffs>>,
}

/// The queues an allocation was handed over on, besides its own (see [`PendingList`]).
#[derive(Default)]
struct Handoffs {
    /// The producer's queue when its protocol asks that its later work there wait for ours (CAI
    /// v3's consumer rule). Not pending work itself.
    held_back: Option<Arc<dyn ForeignQueue>>,
    /// devbuf's queues other than the allocation's own that the memory was handed out on (a CAI
    /// `stream`, a DLPack consumer's stream that is one of devbuf's, the exchange table's work
    /// stream): other libraries may write the memory there at any time, so every later access
    /// orders after their work (docs/architecture.md, "The ordering invariant"). Held, so that a
    /// stream named in an export lives as long as the memory.
    handed_out: Vec<Arc<dyn Queue>>,
}

impl PendingList {
    /// A list whose only entry is `producer`'s queue, not yet ordered after (see
    /// [`PendingList::set_producer`]).
    pub(crate) fn produced_by(producer: Arc<dyn ForeignQueue>) -> PendingList {
        PendingList {
            work: Vec::new(),
            unordered: Some(producer),
            handoffs: None,
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.work.is_empty() && self.unordered.is_none()
    }

    /// Makes `producer` the producer's queue whose work devbuf has not yet ordered anything
    /// after.
    pub(crate) fn set_producer(&mut self, producer: Arc<dyn ForeignQueue>) {
        self.unordered = Some(producer);
    }

    /// Makes `producer` the queue whose later work must wait for devbuf's commands.
    pub(crate) fn set_held_back(&mut self, producer: Arc<dyn ForeignQueue>) {
        self.handoffs.get_or_insert_default().held_back = Some(producer);
    }

    /// The queue whose later work must wait for devbuf's commands, if any.
    pub(crate) fn held_back(&self) -> Option<&Arc<dyn ForeignQueue>> {
        self.handoffs.as_ref()?.held_back.as_ref()
    }

    /// Records that the memory was handed out on `queue`, one of devbuf's queues other than the
    /// allocation's own; whether it was new.
    pub(crate) fn add_handed_out(&mut self, queue: &Arc<dyn Queue>) -> bool {
        let handed_out = &mut self.handoffs.get_or_insert_default().handed_out;
        if handed_out.iter().any(|known| Arc::ptr_eq(known, queue)) {
            return false;
        }
        handed_out.push(Arc::clone(queue));
        true
    }

    /// devbuf's queues other than the allocation's own that the memory was handed out on.
    pub(crate) fn handed_out(&self) -> &[Arc<dyn Queue>] {
        self.handoffs
            .as_ref()
            .map_or(&[], |handoffs| handoffs.handed_out.as_slice())
    }

    /// Takes out the queues of [`PendingList::handed_out`] (when the memory is released).
    pub(crate) fn take_handed_out(&mut self) -> Vec<Arc<dyn Queue>> {
        self.handoffs
            .as_mut()
            .map(|handoffs| std::mem::take(&mut handoffs.handed_out))
            .unwrap_or_default()
    }

    /// Records the event of the producer's queue, if that has not been done yet.
    pub(crate) fn record_producer_event(&mut self) -> Result<()> {
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

    /// Takes out the work that `done` says has completed. The caller drops it after unlocking:
    /// dropping the sources it holds may release foreign memory, whose owner may be a Python
    /// object.
    pub(crate) fn take_completed(
        &mut self,
        done: impl Fn(&PendingWork) -> bool,
    ) -> Vec<PendingWork> {
        let (completed, pending) = std::mem::take(&mut self.work).into_iter().partition(done);
        self.work = pending;
        completed
    }

    /// Takes out the work whose event has completed.
    pub(crate) fn take_all_completed(&mut self) -> Vec<PendingWork> {
        self.take_completed(|w| w.event.is_complete().unwrap_or(false))
    }
}

/// The pending work of an allocation, with a lock-free answer to "is there any?" for the common
/// case of none (every export asks).
#[derive(Default)]
pub(crate) struct Pending {
    pub(crate) list: Mutex<PendingList>,
    /// Whether `list` is non-empty; updated under the lock when a guard is dropped.
    pub(crate) any: AtomicBool,
}

impl Pending {
    /// Pending work of `list`, which nothing shares yet.
    pub(crate) fn of(list: PendingList) -> Pending {
        Pending {
            any: AtomicBool::new(!list.is_empty()),
            list: Mutex::new(list),
        }
    }

    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        !self.any.load(Ordering::Acquire)
    }

    pub(crate) fn lock(&self) -> PendingGuard<'_> {
        PendingGuard {
            list: self.list.lock(),
            any: &self.any,
        }
    }
}

pub(crate) struct PendingGuard<'a> {
    pub(crate) list: MutexGuard<'a, PendingList>,
    pub(crate) any: &'a AtomicBool,
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

/// The states of [`Allocation::exported`].
pub(crate) mod exported {
    /// Never handed to another library.
    pub const NO: u8 = 0;
    /// Handed out; no other library can enqueue on the queues its queue knows of.
    pub const YES: u8 = 1;
    /// Handed out, and other libraries may enqueue work devbuf does not track on the queues its
    /// queue knows of ([`crate::Interop::untracked_foreign_work`]).
    pub const WITH_FOREIGN_WORK: u8 = 2;
    /// As [`WITH_FOREIGN_WORK`], and handed out on other devbuf queues too
    /// (`PendingList::handed_out`).
    pub const ELSEWHERE_TOO: u8 = 3;
}
