//! What an `Array` object holds of its memory, and how `close()` lets go of it.
//!
//! The object's `Array` (its share of the allocation, with the layout) stays put while anything
//! may still use it through this object: Rust code running on it now (each use holds an
//! [`OpenArray`]), and, once the memory was handed out through a protocol whose consumers keep
//! this very object instead of a share of their own (the buffer protocol: NumPy's `frombuffer`
//! releases its view at once and keeps the object; CAI, SUAI, the dpctl attributes, the exchange
//! table's bare DLTensor), the object itself. `close()` marks the object closed at once (every
//! later use is a ValueError) and lets go of the array when the last of those ends; the memory
//! goes when the last of its other users (views, other arrays, DLPack exports, pickles) does.

use std::cell::{Cell, UnsafeCell};
use std::marker::PhantomData;
use std::ops::Deref;

use devbuf::Array;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

/// An array that `close()` can let go of.
pub(crate) struct HeldArray {
    /// `Some` until released; taken out only when `uses` is zero, so no borrow of it is live.
    array: UnsafeCell<Option<Array>>,
    closed: Cell<bool>,
    /// Uses of `array` in progress: open guards.
    uses: Cell<u32>,
    /// Handed to a consumer that keeps this object, not a share of the memory: the array then
    /// goes with the object.
    anchored: Cell<bool>,
}

// SAFETY: every access takes a `Python` token, so it runs with the GIL held, one thread at a time
// (the crate refuses to build or load without the GIL: `gil_as_lock`); no access calls into Python or lets go of the GIL while it
// touches a field, and `array` is replaced only while nothing borrows it (`uses` is zero).
unsafe impl Sync for HeldArray {}

impl HeldArray {
    pub(crate) fn new(array: Array) -> HeldArray {
        HeldArray {
            array: UnsafeCell::new(Some(array)),
            closed: Cell::new(false),
            uses: Cell::new(0),
            anchored: Cell::new(false),
        }
    }

    /// The array, for the length of one use; a ValueError once the object is closed.
    #[inline]
    pub(crate) fn open<'a>(&'a self, _gil: Python<'a>) -> PyResult<OpenArray<'a>> {
        if self.closed.get() {
            return Err(closed());
        }
        self.uses.set(self.uses.get() + 1);
        Ok(OpenArray {
            held: self,
            _gil: PhantomData,
        })
    }

    /// The array, for the garbage collector's `__traverse__` (which may not use a `Python`
    /// token); `None` once released.
    pub(crate) fn for_traversal(&self) -> Option<&Array> {
        // SAFETY: the collector holds the GIL while it traverses; the array is only replaced
        // with the GIL held and outside any traversal (`release` takes it out before dropping
        // it, and the drop, which may collect, sees the cell empty).
        unsafe { (*self.array.get()).as_ref() }
    }

    pub(crate) fn is_closed(&self, _gil: Python<'_>) -> bool {
        self.closed.get()
    }

    /// Whether a consumer that keeps this object was handed the memory ([`OpenArray::anchor`]).
    pub(crate) fn is_anchored(&self, _gil: Python<'_>) -> bool {
        self.anchored.get()
    }

    /// Marks the object closed; its array goes now if nothing uses it, else when the last use
    /// ends (or with the object, once anchored). A second close does nothing.
    pub(crate) fn close(&self, _gil: Python<'_>) {
        if self.closed.replace(true) {
            return;
        }
        if self.uses.get() == 0 {
            self.release();
        }
    }

    /// Puts `array` in place of the held one (a Buffer's `resize`) and returns that one, to be
    /// dropped once the caller leaves every borrow of the object (its last share of foreign
    /// memory may run Python code). Refused while the array is closed, in use (a use in progress
    /// holds a borrow of it), or anchored: a consumer that keeps this object reads the memory it
    /// was handed through it, and would lose it.
    pub(crate) fn replace(&self, _gil: Python<'_>, array: Array) -> Result<Array, Refusal> {
        if self.closed.get() {
            return Err(Refusal::Closed);
        }
        if self.uses.get() != 0 {
            return Err(Refusal::InUse);
        }
        if self.anchored.get() {
            return Err(Refusal::Anchored);
        }
        // SAFETY: nothing uses the array (no open guard borrows it); the GIL is held (the token),
        // and nothing here calls into Python.
        let old = unsafe { (*self.array.get()).replace(array) };
        Ok(old.expect("an array that is not closed is held"))
    }

    #[cold]
    fn release(&self) {
        if self.anchored.get() {
            return;
        }
        // SAFETY: nothing uses the array (no open guard borrows it); the GIL is held (callers).
        let array = unsafe { (*self.array.get()).take() };
        // Dropped after the cell is left: the last share of foreign memory may run Python code,
        // which may come back to this object.
        drop(array);
    }
}

/// Why [`HeldArray::replace`] refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    Closed,
    InUse,
    Anchored,
}

/// One use of an open array; derefs to it. Made and dropped with the GIL held, on one thread
/// (neither `Send` nor `Sync`: code that lets go of the GIL takes the `&Array` along instead).
pub(crate) struct OpenArray<'a> {
    held: &'a HeldArray,
    _gil: PhantomData<*const ()>,
}

impl OpenArray<'_> {
    /// Records that a consumer now relies on this object, not on a share of its own, to keep the
    /// memory alive: a later `close()` leaves the array to the object.
    #[inline]
    pub(crate) fn anchor(&self) {
        self.held.anchored.set(true);
    }
}

impl Deref for OpenArray<'_> {
    type Target = Array;

    #[inline]
    fn deref(&self) -> &Array {
        // SAFETY: this use keeps `uses` above zero, so the array is still there and not replaced.
        unsafe { (*self.held.array.get()).as_ref().unwrap_unchecked() }
    }
}

impl Drop for OpenArray<'_> {
    #[inline]
    fn drop(&mut self) {
        let uses = self.held.uses.get() - 1;
        self.held.uses.set(uses);
        if uses == 0 && self.held.closed.get() {
            self.held.release();
        }
    }
}

#[cold]
fn closed() -> PyErr {
    PyValueError::new_err("the array is closed (close() let go of its memory)")
}
