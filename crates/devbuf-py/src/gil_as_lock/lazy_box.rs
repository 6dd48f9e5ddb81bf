//! [`LazyBox`]: what an array object builds on first use (its export caches), and lets go of when
//! its array is replaced (a Buffer's `resize`).

use std::cell::UnsafeCell;
use std::ops::Deref;

use once_cell::race::OnceBox;

/// A value that starts empty: what a [`LazyBox`] makes on first use.
pub(crate) trait Empty {
    fn empty() -> Self;
}

/// A `T` on the heap, made empty on first use: one null pointer until then. An array's export
/// caches are this: most arrays (a fresh allocation) never export anything, and every object
/// made moves and zeroes what it holds inline, and checks each cache when it is freed.
pub(crate) struct LazyBox<T>(UnsafeCell<OnceBox<T>>);

// SAFETY: shared use is `OnceBox`'s, which is `Sync` for such a `T`; the one exclusive use,
// `reset`, runs with the GIL held and no borrow of the contents live (its contract), so no other
// thread is in `deref` then: every deref happens with the GIL held, under a use of the array
// (`HeldArray::open`) that outlives the borrow, and a use in progress keeps `reset` from running.
unsafe impl<T: Send + Sync> Sync for LazyBox<T> {}

impl<T> LazyBox<T> {
    pub(crate) fn new() -> LazyBox<T> {
        LazyBox(UnsafeCell::new(OnceBox::new()))
    }

    /// Empties the box: what it held is dropped, and the next use makes it anew.
    ///
    /// # Safety
    /// The GIL is held, and no borrow of the contents is live (nothing uses the array whose
    /// cache this is: `HeldArray::replace` succeeded).
    pub(crate) unsafe fn reset(&self) {
        // SAFETY: the caller's contract: nothing borrows the cell's contents, and no other
        // thread reaches the cell meanwhile.
        let emptied = unsafe { std::mem::take(&mut *self.0.get()) };
        drop(emptied);
    }
}

impl<T: Empty> Deref for LazyBox<T> {
    type Target = T;

    fn deref(&self) -> &T {
        // SAFETY: only `reset` changes the cell, never while a borrow from here is live.
        unsafe { &*self.0.get() }.get_or_init(|| Box::new(T::empty()))
    }
}
