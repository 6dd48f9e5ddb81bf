//! devbuf errors as Python exceptions: one class per kind of failure (see the design page).

use std::cell::RefCell;

use devbuf::Error;
use pyo3::exceptions::{
    PyBufferError, PyIndexError, PyMemoryError, PyRuntimeError, PyTypeError, PyValueError,
};
use pyo3::{PyErr, Python};

thread_local! {
    /// What Python code called by devbuf (a memory resource written in Python) raised, with the
    /// message of the devbuf error that carries it out: `to_py` raises the original when that
    /// error reaches Python.
    static CARRIED: RefCell<Vec<(String, PyErr)>> = const { RefCell::new(Vec::new()) };
}

/// The most exceptions kept for `to_py` (one per call an adaptor retried before giving up).
const CARRIED_KEPT: usize = 4;

/// Has `error`, on its way out through devbuf, raise `raised` when it reaches Python.
pub(crate) fn carry(error: &Error, raised: PyErr) {
    let _ = CARRIED.try_with(|carried| {
        let mut carried = carried.borrow_mut();
        if carried.len() == CARRIED_KEPT {
            carried.remove(0);
        }
        carried.push((error.to_string(), raised));
    });
}

/// The exception carried by the devbuf error whose message is `message`, if it carries one;
/// anything else carried on this thread was dropped on the way and is let go.
fn take_carried(message: &str) -> Option<PyErr> {
    CARRIED
        .try_with(|carried| {
            let mut carried = carried.borrow_mut();
            let at = carried.iter().position(|(known, _)| known == message);
            let found = at.map(|at| carried.swap_remove(at).1);
            carried.clear();
            found
        })
        .ok()
        .flatten()
}

/// The Python exception for a devbuf error: for one that carries what a memory resource written
/// in Python raised, that very exception.
pub fn to_py(err: Error) -> PyErr {
    let message = err.to_string();
    if let Some(raised) = take_carried(&message) {
        return raised;
    }
    match err {
        Error::InvalidDescriptor { .. }
        | Error::DeviceNotFound { .. }
        | Error::Unsupported { .. } => PyValueError::new_err(message),
        Error::InvalidType { .. } => PyTypeError::new_err(message),
        Error::IndexOutOfBounds { .. } => PyIndexError::new_err(message),
        Error::Unexportable(_) => PyBufferError::new_err(message),
        Error::OutOfMemory { .. } => PyMemoryError::new_err(message),
        Error::Unavailable { .. } | Error::Runtime { .. } => PyRuntimeError::new_err(message),
    }
}

/// `?` for devbuf results in code returning `PyResult`.
pub trait IntoPyResult<T> {
    fn py(self) -> pyo3::PyResult<T>;
}

impl<T> IntoPyResult<T> for devbuf::Result<T> {
    fn py(self) -> pyo3::PyResult<T> {
        self.map_err(to_py)
    }
}

/// Raises `err`, attached the way pyo3 counts it. Under `assume_attached` pyo3 does not count the
/// thread as attached, so every Python reference an error drops (its type and message once
/// raised, the errors it replaced) would wait in pyo3's pending pool until some later call
/// attaches: a failing call would hold its references and bytes until then. Attaching releases
/// what the call deferred, and the error's own references are released at once.
pub(crate) fn restore_attached(err: PyErr) {
    Python::attach(|py| err.restore(py));
}
