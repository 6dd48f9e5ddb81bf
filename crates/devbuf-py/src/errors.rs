//! devbuf errors as Python exceptions: one class per kind of failure (see the design page).

use devbuf::Error;
use pyo3::PyErr;
use pyo3::exceptions::{PyBufferError, PyMemoryError, PyRuntimeError, PyTypeError, PyValueError};

/// The Python exception for a devbuf error.
pub fn to_py(err: Error) -> PyErr {
    let message = err.to_string();
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
