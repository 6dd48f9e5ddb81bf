//! One allocation shared by every view: its memory, how it is released, and what the ordering
//! module records about it (the work that may still touch its bytes, where it was handed out).
//! The release itself, after that work, is the ordering module's (`ordering/release.rs`).

use std::ops::{Deref, DerefMut};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};

use parking_lot::{Mutex, MutexGuard};

use super::shared::Shared;
use crate::Owner;
use crate::mr::MemoryResource;
use crate::{Error, Event, ForeignQueue, MemKind, Queue, Result};

/// How an allocation is released when its last view is dropped, with the queue that can reach
/// it (for memory from a resource, the resource's: a buffer holds no second count of it).
pub(super) enum Release {
    /// devbuf allocated it: back to the queue that made it.
    Queue {
        queue: Arc<dyn Queue>,
        size: usize,
        align: usize,
    },
    /// devbuf allocated it through a memory resource: back to that resource.
    Resource {
        resource: Arc<dyn MemoryResource>,
        size: usize,
        align: usize,
    },
    /// Foreign memory: drop the owner (taken out exactly once, in `Drop`; read through `&self`
    /// only as a keep-alive object, which is `Sync`).
    Foreign {
        queue: Arc<dyn Queue>,
        owner: Option<Owner>,
        /// The bytes the owner gave devbuf, from the allocation's base.
        size: usize,
    },
}

impl Release {
    /// The queue that allocated (or can reach) the memory.
    #[inline]
    pub(super) fn queue(&self) -> &Arc<dyn Queue> {
        match self {
            Release::Queue { queue, .. } | Release::Foreign { queue, .. } => queue,
            Release::Resource { resource, .. } => resource.queue(),
        }
    }

    /// The owner of foreign memory, taken out (to be leaked when its memory may still be in use).
    pub(super) fn take_owner(&mut self) -> Option<Owner> {
        match self {
            Release::Foreign { owner, .. } => owner.take(),
            Release::Queue { .. } | Release::Resource { .. } => None,
        }
    }
}

/// The counted reference to an allocation that every view holds.
pub(super) type SharedAllocation = Shared<Allocation>;

/// Work enqueued on an allocation that may not have completed yet.
pub(super) struct PendingWork {
    /// The devbuf queue it runs on; `None` for another library's queue (the producer of
    /// imported memory), whose work devbuf never waits for before letting go of its memory.
    pub(super) queue: Option<Arc<dyn Queue>>,
    /// Completes when the queue's work on the allocation (and everything before it) is done.
    pub(super) event: Event,
    /// The allocations of the sources of copies into this one enqueued without waiting: held
    /// until the copies complete, so that dropping them never has to wait.
    pub(super) sources: Vec<SharedAllocation>,
}

impl PendingWork {
    /// The same work, without holding the sources of its copies.
    pub(super) fn without_sources(&self) -> PendingWork {
        PendingWork {
            queue: self.queue.clone(),
            event: self.event.clone(),
            sources: Vec::new(),
        }
    }

    pub(super) fn on(&self, queue: &Arc<dyn Queue>) -> bool {
        self.queue
            .as_ref()
            .is_some_and(|own| Arc::ptr_eq(own, queue))
    }
}

/// The pending work of an allocation.
#[derive(Default)]
pub(super) struct PendingList {
    pub(super) work: Vec<PendingWork>,
    /// The queue of the library that produced imported memory while devbuf has not yet ordered
    /// anything after its work there. An event is recorded on it (a barrier: microseconds) only
    /// when devbuf first needs one, so that imports nobody waits on cost nothing; the event then
    /// covers the producer's work up to that moment, which includes its work at import. Held in
    /// place (every SUAI import sets it): a box of its own cost an allocation and a free per
    /// import.
    pub(super) unordered: Option<Arc<dyn ForeignQueue>>,
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
    pub(super) fn produced_by(producer: Arc<dyn ForeignQueue>) -> PendingList {
        PendingList {
            unordered: Some(producer),
            ..PendingList::default()
        }
    }

    pub(super) fn is_empty(&self) -> bool {
        self.work.is_empty() && self.unordered.is_none()
    }

    /// Makes `producer` the producer's queue whose work devbuf has not yet ordered anything
    /// after.
    pub(super) fn set_producer(&mut self, producer: Arc<dyn ForeignQueue>) {
        self.unordered = Some(producer);
    }

    /// Makes `producer` the queue whose later work must wait for devbuf's commands.
    pub(super) fn set_held_back(&mut self, producer: Arc<dyn ForeignQueue>) {
        self.handoffs.get_or_insert_default().held_back = Some(producer);
    }

    /// The queue whose later work must wait for devbuf's commands, if any.
    pub(super) fn held_back(&self) -> Option<&Arc<dyn ForeignQueue>> {
        self.handoffs.as_ref()?.held_back.as_ref()
    }

    /// Records that the memory was handed out on `queue`, one of devbuf's queues other than the
    /// allocation's own; whether it was new.
    pub(super) fn add_handed_out(&mut self, queue: &Arc<dyn Queue>) -> bool {
        let handed_out = &mut self.handoffs.get_or_insert_default().handed_out;
        if handed_out.iter().any(|known| Arc::ptr_eq(known, queue)) {
            return false;
        }
        handed_out.push(Arc::clone(queue));
        true
    }

    /// devbuf's queues other than the allocation's own that the memory was handed out on.
    pub(super) fn handed_out(&self) -> &[Arc<dyn Queue>] {
        self.handoffs
            .as_ref()
            .map_or(&[], |handoffs| handoffs.handed_out.as_slice())
    }

    /// Takes out the queues of [`PendingList::handed_out`] (when the memory is released).
    pub(super) fn take_handed_out(&mut self) -> Vec<Arc<dyn Queue>> {
        self.handoffs
            .as_mut()
            .map(|handoffs| std::mem::take(&mut handoffs.handed_out))
            .unwrap_or_default()
    }

    /// Takes out the work that `done` says has completed. The caller drops it after unlocking:
    /// dropping the sources it holds may release foreign memory, whose owner may be a Python
    /// object.
    pub(super) fn take_completed(
        &mut self,
        done: impl Fn(&PendingWork) -> bool,
    ) -> Vec<PendingWork> {
        let (completed, pending) = std::mem::take(&mut self.work).into_iter().partition(done);
        self.work = pending;
        completed
    }

    /// Takes out the work whose event has completed.
    pub(super) fn take_all_completed(&mut self) -> Vec<PendingWork> {
        self.take_completed(|w| w.event.is_complete().unwrap_or(false))
    }
}

/// The pending work of an allocation, with a lock-free answer to "is there any?" for the common
/// case of none (every export asks).
#[derive(Default)]
pub(super) struct Pending {
    pub(super) list: Mutex<PendingList>,
    /// Whether `list` is non-empty or the allocation unrecorded; updated under the lock when a
    /// guard is dropped.
    pub(super) any: AtomicBool,
    /// Whether the allocation's own queue allocated the memory in order (CUDA's stream-ordered
    /// allocator) and no event covers that yet. Nothing may touch the memory before the
    /// allocation, but the queue's own later work follows it anyway: an event is recorded only
    /// when something else first orders after it (another queue, a consumer's stream, the host:
    /// [`PendingGuard::record_allocation_event`]), so memory allocated, used on its queue and
    /// freed costs no event (the driver-call budgets of `tests/python/test_cuda_driver_calls.py`).
    /// Changed under the lock only; beside `any` rather than in the list, where it fits the
    /// allocation's record.
    allocation_unrecorded: AtomicBool,
}

impl Pending {
    /// Pending work of `list`, which nothing shares yet.
    pub(super) fn of(list: PendingList) -> Pending {
        Pending {
            any: AtomicBool::new(!list.is_empty()),
            list: Mutex::new(list),
            allocation_unrecorded: AtomicBool::new(false),
        }
    }

    /// The pending work of memory its own queue just allocated in order (see
    /// [`Pending::allocation_unrecorded`]).
    pub(super) fn allocated_in_order() -> Pending {
        Pending {
            any: AtomicBool::new(true),
            list: Mutex::new(PendingList::default()),
            allocation_unrecorded: AtomicBool::new(true),
        }
    }

    #[inline]
    pub(super) fn is_empty(&self) -> bool {
        !self.any.load(Ordering::Acquire)
    }

    pub(super) fn lock(&self) -> PendingGuard<'_> {
        PendingGuard {
            list: self.list.lock(),
            any: &self.any,
            allocation_unrecorded: &self.allocation_unrecorded,
        }
    }
}

pub(super) struct PendingGuard<'a> {
    pub(super) list: MutexGuard<'a, PendingList>,
    pub(super) any: &'a AtomicBool,
    pub(super) allocation_unrecorded: &'a AtomicBool,
}

impl PendingGuard<'_> {
    /// Whether the in-order allocation on the allocation's own queue is still unrecorded.
    pub(super) fn allocation_unrecorded(&self) -> bool {
        self.allocation_unrecorded.load(Ordering::Relaxed)
    }

    /// Forgets the in-order allocation: `home`'s work recorded in the list covers it.
    pub(super) fn allocation_covered(&mut self) {
        self.allocation_unrecorded.store(false, Ordering::Relaxed);
    }
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
        let any = !self.list.is_empty() || self.allocation_unrecorded();
        self.any.store(any, Ordering::Release);
    }
}

/// One allocation, shared by every [`Buffer`] that views it.
pub(super) struct Allocation {
    /// Address of the first byte (0 only for empty foreign memory).
    pub(super) base: usize,
    pub(super) kind: MemKind,
    pub(super) release: Release,
    /// At most one entry per queue: queues are in order, so a queue's latest event covers its
    /// earlier work.
    pub(super) pending: Pending,
    /// Whether the memory was handed to another library (DLPack, CAI, SUAI), whose work on it is
    /// not ordered with ours: one of the [`exported`] states.
    pub(super) exported: AtomicU8,
    /// Whether the memory may only be read (it is mapped read-only, e.g. from a read-only IPC
    /// handle): every write through a [`Buffer`] is refused.
    pub(super) read_only: bool,
}

/// The states of [`Allocation::exported`].
pub(super) mod exported {
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

impl Allocation {
    /// The queue that allocated (or can reach) the memory.
    #[inline]
    pub(super) fn queue(&self) -> &Arc<dyn Queue> {
        self.release.queue()
    }
}

/// Drops the owner of foreign memory after its last view. A panicking deleter must not unwind
/// into a C caller (DLPack deleters run this from `extern "C"` code); the panic message has
/// already been printed.
pub(super) fn let_go(owner: Owner) {
    let _ = catch_unwind(AssertUnwindSafe(move || {
        let ended = WaitIfTheThreadIsEnded;
        drop(owner);
        std::mem::forget(ended);
    }));
}

/// Dropped only while unwinding out of an owner's drop. A Rust panic goes on to `let_go`'s catch;
/// any other unwind is the thread being ended under us (CPython 3.11 to 3.13 end a thread that
/// takes the GIL once finalization began with a forced unwind: a Python owner, or a DLPack
/// producer's deleter, let go of on devbuf's release thread at exit), which a catch may not stop
/// (glibc aborts the process with "exception not rethrown"): the thread waits for the process to
/// end instead, as CPython 3.14 makes such a thread wait.
struct WaitIfTheThreadIsEnded;

impl Drop for WaitIfTheThreadIsEnded {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            loop {
                std::thread::park();
            }
        }
    }
}

/// Refuses allocations `queue` cannot make.
#[inline]
pub(super) fn check_allocation(queue: &Arc<dyn Queue>, kind: MemKind, align: usize) -> Result<()> {
    if align.is_power_of_two() && kind != MemKind::Unknown && queue.supports(kind) {
        return Ok(());
    }
    Err(refusal(queue, kind, align))
}

/// Why `check_allocation` refused.
#[cold]
fn refusal(queue: &Arc<dyn Queue>, kind: MemKind, align: usize) -> Error {
    if !align.is_power_of_two() {
        return Error::invalid("alignment", format!("{align} is not a power of two"));
    }
    if kind == MemKind::Unknown {
        return Error::invalid("kind", "\"unknown\" memory cannot be allocated");
    }
    let device = queue.device();
    Error::Unsupported {
        device: device.selector.clone(),
        what: format!("{kind} allocation"),
        reason: device
            .unusable_reason
            .clone()
            .unwrap_or_else(|| format!("the device has no {kind} memory")),
    }
}
