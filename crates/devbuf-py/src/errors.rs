//! devbuf errors as Python exceptions: one class per kind of failure (see the design page).

use devbuf::Error;
use pyo3::exceptions::{
    PyBufferError, PyIndexError, PyMemoryError, PyRecursionError, PyRuntimeError, PyTypeError,
    PyValueError,
};
use pyo3::prelude::*;
use pyo3::{PyErr, Python};

/// The devbuf error that carries `raised` (what Python code devbuf called, a memory resource
/// written in Python, raised) out through devbuf, `context` saying what devbuf was doing:
/// `to_py` raises `raised` itself when the error reaches Python.
/// A `MemoryError` is carried as running out of memory, which a failure-callback adaptor acts on.
pub(crate) fn carry(py: Python<'_>, context: String, raised: PyErr) -> Error {
    let source = if raised.is_instance_of::<PyMemoryError>(py) {
        devbuf::Raised::out_of_memory(raised)
    } else {
        devbuf::Raised::new(raised)
    };
    Error::Raised { context, source }
}

/// The Python exception for a devbuf error: for one that carries what Python code raised, that
/// very exception.
pub fn to_py(err: Error) -> PyErr {
    match err {
        Error::Raised { source, .. } => match source.downcast_ref::<PyErr>() {
            Some(raised) => Python::attach(|py| raised.clone_ref(py)),
            None => PyRuntimeError::new_err(source.to_string()),
        },
        Error::InvalidDescriptor { .. }
        | Error::DeviceNotFound { .. }
        | Error::Unsupported { .. } => PyValueError::new_err(err.to_string()),
        Error::InvalidType { .. } => PyTypeError::new_err(err.to_string()),
        Error::IndexOutOfBounds { .. } => PyIndexError::new_err(err.to_string()),
        Error::Unexportable(_) => PyBufferError::new_err(err.to_string()),
        Error::OutOfMemory { .. } => PyMemoryError::new_err(err.to_string()),
        Error::Recursion { .. } => PyRecursionError::new_err(err.to_string()),
        Error::Unavailable { .. } | Error::Runtime { .. } => {
            PyRuntimeError::new_err(err.to_string())
        }
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

/// The TypeError of an argument of the wrong type: its name, what it takes, and the type it got.
pub(crate) fn wrong_type(value: &Bound<'_, PyAny>, name: &str, expected: &str) -> PyErr {
    let got = value
        .get_type()
        .name()
        .map_or_else(|_| "?".into(), |name| name.to_string());
    PyTypeError::new_err(format!("{name}: expected {expected}, got {got}"))
}
