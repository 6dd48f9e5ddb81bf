//! [`Owner`]: what keeps foreign memory alive, or frees it.

use std::any::Any;
use std::fmt;
use std::mem::MaybeUninit;

/// What keeps foreign memory alive, or frees it.
pub enum Owner {
    /// An object that keeps the memory alive while held (a Python producer, an Arc of a runtime
    /// allocation...). It is dropped after the last view.
    KeepAlive(KeptAlive),
    /// A deleter run exactly once, after the last view.
    Deleter(RunOnDrop),
}

/// A deleter that runs when dropped: after the last view of a buffer, or, for an owner that never
/// reached a buffer (an import refused after it took ownership), right away instead of leaking.
pub struct RunOnDrop(Option<Box<dyn FnOnce() + Send>>);

// SAFETY: a `RunOnDrop` offers nothing through a shared reference (no method takes `&self`): it
// is only ever run, by value, when dropped. Sharing one between threads can therefore not call
// its deleter from two of them, and an allocation that holds one may be shared.
unsafe impl Sync for RunOnDrop {}

impl Drop for RunOnDrop {
    fn drop(&mut self) {
        if let Some(delete) = self.0.take() {
            delete();
        }
    }
}

impl Owner {
    /// Keeps `owner` alive as long as the memory is viewed.
    pub fn keep_alive(owner: impl Any + Send + Sync) -> Self {
        Owner::KeepAlive(KeptAlive::new(owner))
    }

    /// Runs `deleter` once, after the last view.
    pub fn deleter(deleter: impl FnOnce() + Send + 'static) -> Self {
        Owner::Deleter(RunOnDrop(Some(Box::new(deleter))))
    }
}

impl fmt::Debug for Owner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Owner::KeepAlive(_) => "KeepAlive",
            Owner::Deleter(_) => "Deleter",
        })
    }
}

/// A keep-alive object of any type, held in place when it is no larger than a pointer (a Python
/// object's reference, an `Arc`: every import's owner) and boxed otherwise. A box of its own cost
/// every import an allocation and a free; this is the size of `Box<dyn Any>` either way.
///
/// Not the `smallbox` crate: its `SmallBox<dyn Any, S1>` keeps the inline space beside a whole
/// fat pointer (24 bytes, not 16), which would push foreign memory's record past the 144-byte
/// per-thread spare it is made in (`buffer/shared.rs`).
pub struct KeptAlive {
    /// The object itself when it fits, else a `Box` of it: what `vtable` was made for.
    slot: MaybeUninit<usize>,
    vtable: &'static KeptVtable,
}

/// How to reach and drop what a [`KeptAlive`] slot holds.
struct KeptVtable {
    /// The object, given the slot.
    get: unsafe fn(*const MaybeUninit<usize>) -> *const (dyn Any + Send + Sync),
    /// Drops what the slot holds.
    drop: unsafe fn(*mut MaybeUninit<usize>),
}

/// The vtables for a `T` kept in place (`INLINE`) or boxed (`BOXED`).
struct VtableOf<T>(std::marker::PhantomData<T>);

impl<T: Any + Send + Sync> VtableOf<T> {
    const INLINE: KeptVtable = KeptVtable {
        // SAFETY: the slot holds a live `T` (`KeptAlive::new`).
        get: |slot| unsafe { &*slot.cast::<T>() },
        // SAFETY: as above; `KeptAlive`'s drop runs this once.
        drop: |slot| unsafe { slot.cast::<T>().drop_in_place() },
    };
    const BOXED: KeptVtable = KeptVtable {
        // SAFETY: the slot holds a live `Box<T>` (`KeptAlive::new`).
        get: |slot| unsafe { &**slot.cast::<Box<T>>() },
        // SAFETY: as above; `KeptAlive`'s drop runs this once.
        drop: |slot| unsafe { slot.cast::<Box<T>>().drop_in_place() },
    };
}

impl KeptAlive {
    fn new<T: Any + Send + Sync>(object: T) -> KeptAlive {
        let mut slot = MaybeUninit::<usize>::uninit();
        let fits = size_of::<T>() <= size_of::<usize>() && align_of::<T>() <= align_of::<usize>();
        let vtable = if fits {
            // SAFETY: the slot is large and aligned enough for a `T` (checked above).
            unsafe { slot.as_mut_ptr().cast::<T>().write(object) };
            &VtableOf::<T>::INLINE
        } else {
            // SAFETY: a `Box` is the size and alignment of a `usize`.
            unsafe { slot.as_mut_ptr().cast::<Box<T>>().write(Box::new(object)) };
            &VtableOf::<T>::BOXED
        };
        KeptAlive { slot, vtable }
    }

    /// The object, when it is a `T`.
    pub fn downcast_ref<T: Any>(&self) -> Option<&T> {
        // SAFETY: the slot holds what `vtable` was made for, alive while `self` is.
        let object: &(dyn Any + Send + Sync) = unsafe { &*(self.vtable.get)(&self.slot) };
        object.downcast_ref()
    }
}

impl Drop for KeptAlive {
    fn drop(&mut self) {
        // SAFETY: the slot holds what `vtable` was made for, dropped once, here.
        unsafe { (self.vtable.drop)(&mut self.slot) }
    }
}

// SAFETY: the object is `Send + Sync` (`KeptAlive::new`'s bound), and nothing else is held.
unsafe impl Send for KeptAlive {}
// SAFETY: as for Send.
unsafe impl Sync for KeptAlive {}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    /// Counts its drops.
    struct Dropped<const N: usize>(Arc<AtomicUsize>, [u8; N]);

    impl<const N: usize> Drop for Dropped<N> {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn kept(owner: &Owner) -> &KeptAlive {
        match owner {
            Owner::KeepAlive(kept) => kept,
            Owner::Deleter(_) => unreachable!(),
        }
    }

    #[test]
    fn kept_objects_are_found_by_type_and_dropped_once_in_place_or_boxed() {
        let drops = Arc::new(AtomicUsize::new(0));
        // An `Arc` fits in place; 64 bytes are boxed; a zero-sized object fits too.
        let small = Owner::keep_alive(Arc::clone(&drops));
        let large = Owner::keep_alive(Dropped(Arc::clone(&drops), [7; 64]));
        let inline = Owner::keep_alive(Dropped(Arc::clone(&drops), []));
        let found = kept(&small).downcast_ref::<Arc<AtomicUsize>>().unwrap();
        assert!(Arc::ptr_eq(found, &drops));
        assert!(kept(&small).downcast_ref::<Dropped<64>>().is_none());
        assert_eq!(
            kept(&large).downcast_ref::<Dropped<64>>().unwrap().1,
            [7; 64]
        );
        assert!(kept(&large).downcast_ref::<Arc<AtomicUsize>>().is_none());
        assert!(kept(&inline).downcast_ref::<Dropped<0>>().is_some());
        assert_eq!(Arc::strong_count(&drops), 4);
        drop(small);
        assert_eq!(Arc::strong_count(&drops), 3);
        drop(large);
        assert_eq!(drops.load(Ordering::SeqCst), 1);
        drop(inline);
        assert_eq!(drops.load(Ordering::SeqCst), 2);
        assert_eq!(Arc::strong_count(&drops), 1);
    }
}
