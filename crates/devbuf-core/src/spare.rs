//! [`Spare`]: the memory a thread keeps of the last object of one layout it freed, for the next
//! one it makes: a one-entry cache in front of the allocator (as malloc's thread caches are,
//! without their size classes and checks) for the hottest make-and-free loops, a buffer's
//! record and a DLPack export block. Per thread, because those objects are freed on any thread:
//! the memory becomes that thread's spare, and each thread frees its own when it exits.

use std::alloc::{Layout, alloc, dealloc, handle_alloc_error};
use std::cell::Cell;
use std::ptr::NonNull;
use std::thread::LocalKey;

/// A thread's spare memory of one layout (the one [`allocate`] and [`free`] are given with its
/// key), holding nothing.
pub(crate) struct Spare {
    memory: Cell<Option<NonNull<u8>>>,
    layout: Layout,
}

impl Spare {
    /// An empty spare for memory of `layout` (not zero-sized).
    pub(crate) const fn new(layout: Layout) -> Spare {
        Spare {
            memory: Cell::new(None),
            layout,
        }
    }
}

impl Drop for Spare {
    fn drop(&mut self) {
        if let Some(memory) = self.memory.take() {
            // SAFETY: the memory came from `alloc` with this layout and holds nothing.
            unsafe { dealloc(memory.as_ptr(), self.layout) };
        }
    }
}

/// Memory of `layout`, the spare's own: this thread's spare, or fresh from the allocator.
#[inline]
pub(crate) fn allocate(spare: &'static LocalKey<Spare>, layout: Layout) -> NonNull<u8> {
    let kept = spare.try_with(|spare| spare.memory.take()).ok().flatten();
    kept.unwrap_or_else(|| {
        // SAFETY: the spare's layout is not zero-sized.
        let memory = unsafe { alloc(layout) };
        NonNull::new(memory).unwrap_or_else(|| handle_alloc_error(layout))
    })
}

/// Keeps `memory` as this thread's spare, or frees it when the thread keeps one already (or is
/// exiting).
///
/// # Safety
/// `memory` came from [`allocate`] with the same spare and layout, holds nothing, and nobody
/// uses it again.
#[inline]
pub(crate) unsafe fn free(spare: &'static LocalKey<Spare>, memory: NonNull<u8>, layout: Layout) {
    let kept = spare
        .try_with(|spare| match spare.memory.get() {
            None => {
                spare.memory.set(Some(memory));
                true
            }
            Some(_) => false,
        })
        .unwrap_or(false);
    if !kept {
        // SAFETY: the caller's promise: memory from `alloc` with this layout, holding nothing.
        unsafe { dealloc(memory.as_ptr(), layout) };
    }
}
