//! A value shared by every thread but only ever touched with the GIL held: the Python layer's
//! small caches (selector strs, `syclobj` queues, producer types' routes). A lock around them
//! would cost two atomic operations per hit on the hottest calls, for an exclusion the GIL
//! already gives.

use std::cell::{Cell, UnsafeCell};

use pyo3::Python;

pub(crate) struct GilCell<T> {
    value: UnsafeCell<T>,
    /// Set while `with` runs, so that a nested `with` (a finalizer run from inside it, say) gets
    /// nothing instead of a second `&mut`.
    busy: Cell<bool>,
}

// SAFETY: every access takes a `Python` token, so it runs with the GIL held, one thread at a time
// (the module is built for the stable ABI, which free-threaded interpreters do not load, and
// pyo3 declares that it uses the GIL); `busy` turns a nested access away, and `with`'s callers
// never let go of the GIL inside it. `T: Send`: the value may be touched from any thread.
unsafe impl<T: Send> Sync for GilCell<T> {}

impl<T> GilCell<T> {
    pub(crate) const fn new(value: T) -> GilCell<T> {
        GilCell {
            value: UnsafeCell::new(value),
            busy: Cell::new(false),
        }
    }

    /// `f` on the value; `None`, without calling `f`, when called from inside another `with` on
    /// the same cell. `f` must not release the GIL (`Python::detach`).
    pub(crate) fn with<R>(&self, _gil: Python<'_>, f: impl FnOnce(&mut T) -> R) -> Option<R> {
        if self.busy.replace(true) {
            return None;
        }
        struct Release<'a>(&'a Cell<bool>);
        impl Drop for Release<'_> {
            fn drop(&mut self) {
                self.0.set(false);
            }
        }
        let _release = Release(&self.busy);
        // SAFETY: the GIL is held and `busy` was clear: no other reference to the value exists.
        Some(f(unsafe { &mut *self.value.get() }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_nested_access_gets_nothing_and_the_cell_is_free_again_after_a_panic() {
        Python::initialize();
        Python::attach(|py| {
            let cell = GilCell::new(vec![1]);
            let nested = cell.with(py, |outer| {
                outer.push(2);
                cell.with(py, |inner| inner.push(3))
            });
            assert_eq!(nested, Some(None));
            assert_eq!(cell.with(py, |v| v.clone()), Some(vec![1, 2]));
            let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                cell.with(py, |_| panic!("inside"))
            }));
            assert!(unwound.is_err());
            assert_eq!(cell.with(py, |v| v.len()), Some(2));
        });
    }
}
