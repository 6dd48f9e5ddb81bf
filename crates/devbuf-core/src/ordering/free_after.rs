//! Memory given back after the work that may still touch it, decided here for every memory
//! resource ([`crate::mr`]): when it may be handed out again ([`FreeAfter`]), how a queue frees it
//! ([`release_to_queue`], what [`crate::mr::QueueResource`] and so every adaptor over it does),
//! and the waits of resources that hold blocks back. Where a queue frees in stream order
//! ([`Queue::frees_in_order`]) it first waits for the work on the device; elsewhere the host waits
//! first. Memory whose wait fails is leaked: freeing it would be worse.

use std::ptr::NonNull;
use std::sync::Arc;

use crate::blocking::blocking;
use crate::{Event, Queue, Result};

/// What may still use memory given back to a resource, and so when it may be handed out again.
#[derive(Debug, Clone)]
pub enum FreeAfter {
    /// Nothing: at once.
    Now,
    /// Work done once the event has completed: on the resource's queue, or on any other (a free
    /// "after the work on stream S", RMM's `deallocate(ptr, bytes, stream)`).
    Event(Event),
    /// Work of other libraries that were given the memory, on queues devbuf cannot wait for
    /// ([`crate::Interop::wait_device_covers_every_queue`] is false): only the runtime's own free waits for
    /// it, so the memory goes back to the runtime and is never handed out by devbuf again.
    ForeignWork,
}

impl From<Option<Event>> for FreeAfter {
    fn from(event: Option<Event>) -> Self {
        event.map_or(FreeAfter::Now, FreeAfter::Event)
    }
}

/// Frees memory `queue` allocated once `after` says nothing else may use it, in the one way no
/// resource can misread: where the queue frees in stream order ([`Queue::frees_in_order`]), it
/// first waits for `after`'s work on the device; elsewhere the host first waits for it and for
/// the queue's own work, or, after [`FreeAfter::ForeignWork`], leaves the wait to the runtime's
/// free. `after` may be an event of any queue (a free "after the work on stream S"). Memory whose
/// wait fails is leaked.
///
/// # Safety
/// `ptr`, `kind`, `size` and `align` are exactly those of one earlier successful
/// `queue.allocate`, released once; work on the memory may still run only on `queue` and as
/// `after` says.
pub unsafe fn release_to_queue(
    queue: &Arc<dyn Queue>,
    ptr: NonNull<u8>,
    kind: crate::MemKind,
    size: usize,
    align: usize,
    after: FreeAfter,
) {
    if queue.frees_in_order(ptr, kind) {
        let ready = match &after {
            FreeAfter::Event(event) => queue
                .wait_event(event)
                .or_else(|_| blocking(|| event.wait())),
            // The runtime's stream-ordered free follows the queue's own work.
            FreeAfter::Now | FreeAfter::ForeignWork => Ok(()),
        };
        if ready.is_ok() {
            // SAFETY: the caller's guarantees; the work on the memory is ordered before this
            // stream-ordered free.
            unsafe { queue.deallocate(ptr, kind, size, align) };
        }
        return;
    }
    // Without the GIL: the runtime's own free of memory handed out may wait for other
    // libraries' work on it too.
    blocking(|| {
        let done = match &after {
            FreeAfter::Event(event) => event.wait().and_then(|()| queue.wait()),
            FreeAfter::Now => queue.wait(),
            // Devbuf's work is ordered into the queue, whose commands on the memory the runtime's
            // free waits for with other libraries' (a wait for the whole queue here could wait
            // behind the very host task of another library that let go of the memory).
            FreeAfter::ForeignWork => Ok(()),
        };
        if done.is_ok() {
            // SAFETY: the caller's guarantees; the work on the memory is done, or the runtime's
            // free waits for it.
            unsafe { queue.deallocate(ptr, kind, size, align) };
        }
    });
}

/// Waits on the host until memory given back with `after` may be handed out again by a resource
/// that cannot order its reuse itself (one written in Python): the event's work, or, for
/// [`FreeAfter::ForeignWork`], all the work devbuf can see on the device of `queue` (other
/// libraries' own queues stay the user's part: docs/guide/ordering.md, "The user's part").
pub fn wait_before_handing_back(queue: &Arc<dyn Queue>, after: &FreeAfter) -> Result<()> {
    match after {
        FreeAfter::Now => Ok(()),
        FreeAfter::Event(event) => blocking(|| event.wait()),
        FreeAfter::ForeignWork => blocking(|| queue.wait_device()),
    }
}

/// Waits on the host, without blocking other threads of the embedding language, until the work on
/// each block given back to a resource is done (a full pool waiting for blocks whose free is
/// pending, a resource letting go of its blocks): each block with whether its wait succeeded. A
/// block whose wait failed may still be in use, and is never handed out or freed.
pub(crate) fn wait_for_freed_blocks<T>(blocks: Vec<(T, Event)>) -> Vec<(T, bool)> {
    blocking(|| {
        blocks
            .into_iter()
            .map(|(block, event)| (block, event.wait().is_ok()))
            .collect()
    })
}
