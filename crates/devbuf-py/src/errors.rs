//! devbuf errors as Python exceptions: one class per kind of failure (see the design page).

use devbuf::Error;
use pyo3::exceptions::{PyBufferError, PyMemoryError, PyRuntimeError, PyTypeError, PyValueError};
use pyo3::{PyErr, Python};

/// The Python exception for a devbuf error: for one that carries what a memory resource written
/// in Python raised, that very exception.
pub fn to_py(err: Error) -> PyErr {
    let message = err.to_string();
    if let Some(raised) = crate::mr_python::take_raised(&message) {
        return raised;
    }
    match err {
        Error::InvalidDescriptor { .. }
        | Error::DeviceNotFound { .. }
        | Error::Unsupported { .. } => PyValueError::new_err(message),
        Error::InvalidType { .. } => PyTypeError::new_err(message),
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
