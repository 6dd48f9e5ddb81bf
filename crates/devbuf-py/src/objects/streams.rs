//! Other libraries' streams adopted as devbuf Streams: anything with `__cuda_stream__` (cuda.core,
//! CuPy, devbuf's own) and raw handles with an owner. The backend that speaks CUDA's protocols
//! makes the queue; the Python object that keeps the stream alive rides inside it.

use devbuf::{Error, Protocol};
use pyo3::exceptions::PyTypeError;
use pyo3::intern;
use pyo3::prelude::*;

use crate::errors::IntoPyResult;
use crate::objects::foreign_objects::selector_of;
use crate::objects::queue::PyQueue;

/// The stream of `obj`'s `__cuda_stream__` (`(0, handle)`), adopted with `obj` as its owner;
/// `None` when `obj` has no `__cuda_stream__`.
pub(crate) fn adopt_cuda_stream(
    py: Python<'_>,
    obj: &Bound<'_, PyAny>,
    device: Option<&Bound<'_, PyAny>>,
) -> PyResult<Option<Py<PyQueue>>> {
    let Some(protocol) = obj.getattr_opt(intern!(py, "__cuda_stream__"))? else {
        return Ok(None);
    };
    let returned = crate::shutdown::call(&protocol, (), None)?;
    let (version, handle): (i64, usize) = returned.extract().map_err(|_| {
        PyTypeError::new_err(format!(
            "__cuda_stream__: {} returned no (version, stream handle) pair of ints",
            obj.get_type()
                .name()
                .map_or_else(|_| "?".into(), |n| n.to_string())
        ))
    })?;
    if version != 0 {
        return Err(PyTypeError::new_err(format!(
            "__cuda_stream__: version {version} is unknown (devbuf reads version 0)"
        )));
    }
    let owner = Some(obj.clone().unbind());
    adopt_handle(py, handle, device, owner, "__cuda_stream__").map(Some)
}

/// A Stream on `handle` (a `CUstream` as `__cuda_stream__` numbers it) on `device` (default: the
/// stream's own device), holding `owner` while devbuf uses the stream. A handle the stream
/// protocol refuses is an error naming `key`, what the caller passed it as.
pub(crate) fn adopt_handle(
    py: Python<'_>,
    handle: usize,
    device: Option<&Bound<'_, PyAny>>,
    owner: Option<Py<PyAny>>,
    key: &'static str,
) -> PyResult<Py<PyQueue>> {
    let selector = device.map(selector_of).transpose()?;
    let owner: devbuf::StreamOwner = match owner {
        Some(owner) => Box::new(owner),
        None => Box::new(()),
    };
    let queue = py
        .detach(|| {
            // SAFETY: `owner` keeps the stream alive (`__cuda_stream__`'s object, or the
            // caller's promise for a bare handle, as `Stream.from_handle` documents).
            unsafe { devbuf::adopt_stream(Protocol::Cai, selector.as_deref(), handle, owner) }
        })
        .map_err(|err| match err {
            // The protocols call the handle `stream`; the caller passed it as `key`.
            Error::InvalidDescriptor {
                key: "stream",
                message,
            } => Error::InvalidDescriptor { key, message },
            err => err,
        })
        .py()?;
    PyQueue::wrap(py, queue)
}
