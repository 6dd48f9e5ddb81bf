//! The last Python object a hot path read, remembered by identity with what it said: call sites
//! pass the same immutable object on every call (a keyword-name tuple, NumPy's `max_version`
//! tuple), so the next call with that object takes the answer without reading it again.

use std::sync::atomic::{AtomicPtr, AtomicU32, Ordering};

use pyo3::ffi;

/// One kept object (a strong reference, so that its address names that object while it is kept)
/// and a 32-bit answer about it. Read and written only with the GIL held (the crate refuses to build
/// or load without it: `gil_as_lock`), so the two fields are consistent; atomics only make them `Sync`.
pub(crate) struct LastObject {
    object: AtomicPtr<ffi::PyObject>,
    answer: AtomicU32,
}

impl LastObject {
    pub(crate) const fn new() -> Self {
        LastObject {
            object: AtomicPtr::new(std::ptr::null_mut()),
            answer: AtomicU32::new(0),
        }
    }

    /// The answer kept for `object`, if `object` is the one kept.
    #[inline]
    pub(crate) fn answer_for(&self, object: *mut ffi::PyObject) -> Option<u32> {
        (self.object.load(Ordering::Relaxed) == object).then(|| self.answer.load(Ordering::Relaxed))
    }

    /// Keeps `object` (a reference of its own) with `answer`, in place of the one kept before,
    /// which loses its reference.
    ///
    /// # Safety
    /// The GIL is held, `object` is live, and nothing `answer` says of it can change while it
    /// lives (a tuple's items, for instance).
    pub(crate) unsafe fn keep(&self, object: *mut ffi::PyObject, answer: u32) {
        // SAFETY: the caller's: the GIL is held and the object is live.
        unsafe {
            ffi::Py_INCREF(object);
            self.answer.store(answer, Ordering::Relaxed);
            let replaced = self.object.swap(object, Ordering::Relaxed);
            if !replaced.is_null() {
                ffi::Py_DECREF(replaced);
            }
        }
    }
}
