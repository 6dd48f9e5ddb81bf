//! The Python objects that keep imported memory alive (an import's owner), and how Python's
//! garbage collector is shown them: an `Array` whose memory is kept alive by a Python object
//! reports that object from `__traverse__`, so that a cycle through it (an exporter that keeps
//! the array it exported into) is collected.

use devbuf::Buffer;
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::{PyTraverseError, PyVisit};

/// A Py_buffer held until the last view of its memory is gone, released under the GIL (the owner
/// of buffer-protocol imports and of pickled bytes rebuilt in place).
pub(crate) struct HeldBuffer(pub(crate) Box<ffi::Py_buffer>);

// SAFETY: the view is only touched again in Drop, under the GIL, and by the garbage collector
// (which holds the GIL), which only reads its exporter.
unsafe impl Send for HeldBuffer {}
// SAFETY: as above; shared references only read the exporter.
unsafe impl Sync for HeldBuffer {}

impl HeldBuffer {
    /// The object whose buffer this is, if the exporter named one.
    fn exporter(&self) -> Option<&Py<PyAny>> {
        let obj: &*mut ffi::PyObject = &self.0.obj;
        // SAFETY: `Py<PyAny>` is a transparent non-null object pointer, and `obj` is either null
        // (handled by `Option`'s niche) or the strong reference the view holds until released.
        unsafe { &*(obj as *const *mut ffi::PyObject).cast::<Option<Py<PyAny>>>() }.as_ref()
    }
}

impl Drop for HeldBuffer {
    fn drop(&mut self) {
        // After interpreter shutdown there is nothing left to release to.
        // SAFETY: Py_IsInitialized may be called at any time.
        if unsafe { ffi::Py_IsInitialized() } != 0 {
            // SAFETY: the view was filled by PyObject_GetBuffer and is released once.
            Python::attach(|_| unsafe { ffi::PyBuffer_Release(&mut *self.0) });
        }
    }
}

/// Visits the Python object that keeps `buffer`'s memory alive, when it is held through this
/// buffer alone (a share of the allocation that other views or pending work also hold is not
/// reported: the collector would count its one reference more than once).
pub(crate) fn visit_owner(buffer: &Buffer, visit: &PyVisit<'_>) -> Result<(), PyTraverseError> {
    let Some(owner) = buffer.sole_keep_alive() else {
        return Ok(());
    };
    if let Some(object) = owner.downcast_ref::<Py<PyAny>>() {
        visit.call(object)?;
    } else if let Some(held) = owner.downcast_ref::<HeldBuffer>() {
        visit.call(held.exporter())?;
    }
    Ok(())
}
