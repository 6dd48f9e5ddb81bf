//! [`SharedAllocation`]: the counted reference every view of an allocation holds.

use std::alloc::{Layout, alloc, dealloc, handle_alloc_error};
use std::cell::Cell;
use std::ops::Deref;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicUsize, Ordering, fence};

use super::allocation::Allocation;

/// A counted reference to an [`Allocation`], in `std::sync::Arc`'s shape but cheaper on the
/// allocate-and-drop path, the hottest a buffer has: there are no weak references (nothing needs
/// them), so freeing the record touches no weak count; and the last reference, when an acquire
/// load of the count shows no other left, frees it without an atomic read-modify-write at all.
/// Neither `std::sync::Arc` nor `triomphe::Arc` offers that drop without moving the record out
/// first. The memory of the record last freed on a thread is kept for the next one made there
/// ([`SPARE`]).
pub(super) struct SharedAllocation(NonNull<Counted>);

struct Counted {
    count: AtomicUsize,
    allocation: Allocation,
}

// SAFETY: a reference hands out only `&Allocation`, which is Sync, and the last one drops the
// Allocation, which is Send, on whichever thread that is, after every other reference's
// release (the count's orderings below): the conditions under which `Arc<Allocation>` is both.
unsafe impl Send for SharedAllocation where Allocation: Send + Sync {}
// SAFETY: as for Send.
unsafe impl Sync for SharedAllocation where Allocation: Send + Sync {}

thread_local! {
    /// The memory of the record last freed on this thread, for the next one made here: a
    /// one-entry cache in front of the allocator (as malloc's thread caches are, without their
    /// size classes and checks), so that a loop that allocates and drops buffers does not
    /// allocate and free their records (malloc and free: ~130 of the ~540 instructions a host
    /// allocate+free took).
    static SPARE: Spare = const { Spare(Cell::new(None)) };
}

/// Memory for one [`Counted`], holding none; freed when its thread exits.
struct Spare(Cell<Option<NonNull<Counted>>>);

impl Drop for Spare {
    fn drop(&mut self) {
        if let Some(memory) = self.0.take() {
            // SAFETY: the memory came from `alloc` with this layout and holds no record.
            unsafe { dealloc(memory.as_ptr().cast(), Layout::new::<Counted>()) };
        }
    }
}

/// More references than this is a leak of references in a loop: abort, as `Arc` does, rather
/// than let the count wrap.
const MAX_COUNT: usize = isize::MAX as usize;

impl SharedAllocation {
    /// The record `allocation` makes, built in its place on the heap (rather than built, then
    /// moved there: a 150-byte `memcpy` call).
    #[inline]
    pub(super) fn new(allocation: impl FnOnce() -> Allocation) -> Self {
        let layout = Layout::new::<Counted>();
        let memory = SPARE
            .try_with(|spare| spare.0.take())
            .ok()
            .flatten()
            .unwrap_or_else(|| {
                // SAFETY: `Counted` is not zero-sized.
                let memory = unsafe { alloc(layout) }.cast::<Counted>();
                NonNull::new(memory).unwrap_or_else(|| handle_alloc_error(layout))
            });
        // SAFETY: the memory is `Counted`'s layout, and holds nothing (fresh, or spare).
        unsafe {
            memory.as_ptr().write(Counted {
                count: AtomicUsize::new(1),
                allocation: allocation(),
            })
        };
        SharedAllocation(memory)
    }

    /// Whether two references share one allocation.
    pub(super) fn ptr_eq(a: &Self, b: &Self) -> bool {
        a.0 == b.0
    }

    fn counted(&self) -> &Counted {
        // SAFETY: the record lives while any reference does, and this is one.
        unsafe { self.0.as_ref() }
    }
}

impl Clone for SharedAllocation {
    #[inline]
    fn clone(&self) -> Self {
        // Relaxed, as in `Arc::clone`: a new reference made from an existing one needs no
        // ordering; only the last drop does.
        if self.counted().count.fetch_add(1, Ordering::Relaxed) > MAX_COUNT {
            std::process::abort();
        }
        SharedAllocation(self.0)
    }
}

impl Deref for SharedAllocation {
    type Target = Allocation;

    #[inline]
    fn deref(&self) -> &Allocation {
        &self.counted().allocation
    }
}

impl Drop for SharedAllocation {
    #[inline]
    fn drop(&mut self) {
        let count = &self.counted().count;
        // A count of one cannot grow meanwhile (a clone needs a reference, and this is the
        // last), and the acquire load that reads it follows every other reference's release
        // decrement: the record is freed without touching the count.
        if count.load(Ordering::Acquire) != 1 {
            // As in `Arc`'s drop: release so that this reference's uses happen before the free,
            // acquire (the fence) by whoever frees.
            if count.fetch_sub(1, Ordering::Release) != 1 {
                return;
            }
            fence(Ordering::Acquire);
        }
        let memory = self.0;
        // SAFETY: no other reference is left; the record is dropped once, here.
        unsafe { std::ptr::drop_in_place(memory.as_ptr()) };
        // Kept for this thread's next record, unless it keeps one already (or is exiting).
        let kept = SPARE.try_with(|spare| match spare.0.get() {
            None => spare.0.set(Some(memory)),
            Some(_) => free(memory),
        });
        if kept.is_err() {
            free(memory);
        }
    }
}

/// Frees the memory of a dropped record.
fn free(memory: NonNull<Counted>) {
    // SAFETY: every record's memory comes from `alloc` with this layout (in `new`), and the
    // record in it was dropped.
    unsafe { dealloc(memory.as_ptr().cast(), Layout::new::<Counted>()) }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::thread;

    use crate::{Buffer, HostQueue, MemKind, Queue};

    /// Views dropped on two threads at once free the allocation exactly once, after the last,
    /// whichever path the last drop takes (the count decremented by both racing drops, or read as
    /// 1 by the later one): the host queue keeps a freed block for reuse, so a double free would
    /// hand it out twice, a lost free would not hand it out again, and an early one would fail
    /// the other thread's read.
    #[test]
    fn views_dropped_on_two_threads_free_once_after_the_last() {
        let queue: std::sync::Arc<dyn Queue> = std::sync::Arc::new(HostQueue::new());
        for _ in 0..1000 {
            let buffer = Buffer::alloc(&queue, MemKind::Host, 64).unwrap();
            buffer.fill(1).unwrap();
            let address = buffer.ptr();
            // Both threads spin until released together, so that their drops overlap often.
            let (ready, go) = (AtomicUsize::new(0), AtomicBool::new(false));
            thread::scope(|scope| {
                for view in [buffer.clone(), buffer] {
                    let (ready, go) = (&ready, &go);
                    scope.spawn(move || {
                        assert_eq!(view.to_vec().unwrap(), [1; 64]);
                        ready.fetch_add(1, Ordering::AcqRel);
                        while !go.load(Ordering::Acquire) {
                            std::hint::spin_loop();
                        }
                        drop(view);
                    });
                }
                while ready.load(Ordering::Acquire) < 2 {
                    thread::yield_now();
                }
                go.store(true, Ordering::Release);
            });
            let first = Buffer::alloc(&queue, MemKind::Host, 64).unwrap();
            let second = Buffer::alloc(&queue, MemKind::Host, 64).unwrap();
            assert_eq!(first.ptr(), address, "the block went back to the queue");
            assert_ne!(second.ptr(), address, "and only once");
        }
    }
}
