//! [`Shared`]: the counted reference every view of an allocation holds
//! ([`super::allocation::SharedAllocation`]).

use std::alloc::Layout;
use std::ops::Deref;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicUsize, Ordering, fence};

use crate::spare::{self, Spare};

/// A counted reference to a `T`, in `std::sync::Arc`'s shape but cheaper on the
/// allocate-and-drop path, the hottest a buffer has: there are no weak references (nothing needs
/// them), so freeing the record touches no weak count; and the last reference, when an acquire
/// load of the count shows no other left, frees it without an atomic read-modify-write at all.
/// Neither `std::sync::Arc` nor `triomphe::Arc` offers that drop without moving the record out
/// first. The memory of the record last freed on a thread is kept for the next one made there
/// ([`SPARE`]).
pub(super) struct Shared<T>(NonNull<Counted<T>>);

struct Counted<T> {
    count: AtomicUsize,
    value: T,
}

// SAFETY: a reference hands out only `&T`, and the last one drops the `T` on whichever thread
// that is, after every other reference's release (the count's orderings below): `Arc<T>`'s
// conditions.
unsafe impl<T: Send + Sync> Send for Shared<T> {}
// SAFETY: as for Send.
unsafe impl<T: Send + Sync> Sync for Shared<T> {}

thread_local! {
    /// The memory of the record last freed on this thread, for the next one made here
    /// (malloc and free were ~130 of the ~540 instructions a host allocate+free took).
    static SPARE: Spare = const { Spare::new(SPARE_LAYOUT) };
}

/// The layout of every record (a buffer's allocation's fits it: checked where a record is
/// made), so that any spare serves any record without a check at run time.
const SPARE_LAYOUT: Layout = Layout::new::<[u128; 9]>();

/// More references than this is a leak of references in a loop: abort, as `Arc` does, rather
/// than let the count wrap.
const MAX_COUNT: usize = isize::MAX as usize;

impl<T> Shared<T> {
    /// The record `value` makes, built in its place on the heap (rather than built, then moved
    /// there: for a buffer's allocation, a 150-byte `memcpy` call).
    #[inline]
    pub(super) fn new(value: impl FnOnce() -> T) -> Self {
        const {
            assert!(
                size_of::<Counted<T>>() <= SPARE_LAYOUT.size()
                    && align_of::<Counted<T>>() <= SPARE_LAYOUT.align(),
                "a record must fit the spare's layout"
            )
        };
        let memory = spare::allocate(&SPARE, SPARE_LAYOUT);
        let memory = memory.cast::<Counted<T>>();
        // SAFETY: the memory fits a `Counted<T>` and holds nothing (fresh, or spare).
        unsafe {
            memory.as_ptr().write(Counted {
                count: AtomicUsize::new(1),
                value: value(),
            })
        };
        Shared(memory)
    }

    /// Whether two references share one record.
    pub(super) fn ptr_eq(a: &Self, b: &Self) -> bool {
        a.0 == b.0
    }

    /// Whether this is the only reference to the record (as `Arc::strong_count(..) == 1`: no
    /// other can appear meanwhile except by cloning this one).
    pub(super) fn is_unique(&self) -> bool {
        self.counted().count.load(Ordering::Acquire) == 1
    }

    fn counted(&self) -> &Counted<T> {
        // SAFETY: the record lives while any reference does, and this is one.
        unsafe { self.0.as_ref() }
    }
}

impl<T> Clone for Shared<T> {
    #[inline]
    fn clone(&self) -> Self {
        // Relaxed, as in `Arc::clone`: a new reference made from an existing one needs no
        // ordering; only the last drop does.
        if self.counted().count.fetch_add(1, Ordering::Relaxed) > MAX_COUNT {
            std::process::abort();
        }
        Shared(self.0)
    }
}

impl<T> Deref for Shared<T> {
    type Target = T;

    #[inline]
    fn deref(&self) -> &T {
        &self.counted().value
    }
}

impl<T> Drop for Shared<T> {
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
        // SAFETY: the memory came from `spare::allocate` with this spare and layout (in `new`),
        // and the record in it was dropped.
        unsafe { spare::free(&SPARE, memory.cast(), SPARE_LAYOUT) };
    }
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
