//! Other libraries' streams adopted as devbuf Streams: anything with `__cuda_stream__` (cuda.core,
//! CuPy, devbuf's own) and raw handles with an owner. The backend that speaks CUDA's protocols
//! makes the queue; the Python object that keeps the stream alive rides inside it.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use devbuf::{Error, HandleSource, Protocol};
use pyo3::exceptions::{PyNotImplementedError, PyTypeError};
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
        return Err(PyNotImplementedError::new_err(format!(
            "__cuda_stream__: unsupported protocol version: '{version}' (devbuf reads version 0)"
        )));
    }
    let owner = Some(obj.clone().unbind());
    adopt_handle(
        py,
        handle,
        HandleSource::StreamProtocol,
        device,
        owner,
        "__cuda_stream__",
    )
    .map(Some)
}

/// A Stream on `handle` (a `CUstream` as `__cuda_stream__` numbers it) on `device` (default: the
/// stream's own device), holding `owner` while devbuf uses the stream. A handle the stream
/// protocol refuses is an error naming `key`, what the caller passed it as.
pub(crate) fn adopt_handle(
    py: Python<'_>,
    handle: usize,
    source: HandleSource,
    device: Option<&Bound<'_, PyAny>>,
    owner: Option<Py<PyAny>>,
    key: &'static str,
) -> PyResult<Py<PyQueue>> {
    let selector = device.map(selector_of).transpose()?;
    let promise = owner.is_none().then(|| Arc::new(AtomicBool::new(true)));
    let owner: devbuf::StreamOwner = match (owner, &promise) {
        (Some(object), _) => Box::new(PythonStreamOwner { object, handle }),
        (None, Some(promise)) => Box::new(PromisedWhileHeld(Arc::clone(promise))),
        (None, None) => Box::new(()),
    };
    let queue = py
        .detach(|| {
            // SAFETY: `owner` keeps the stream alive (`__cuda_stream__`'s object, or the
            // caller's promise for a bare handle, as `Stream.from_handle` documents).
            unsafe {
                devbuf::adopt_stream(Protocol::Cai, selector.as_deref(), handle, source, owner)
            }
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
    match promise {
        Some(promise) => PyQueue::wrap_promised(py, queue, promise),
        None => PyQueue::wrap(py, queue),
    }
}

/// A bare stream handle's keeper: the caller promised the stream lives as long as the devbuf
/// Stream made of it (`Stream.from_handle` without an owner), whose end (or `close()`) ends the
/// promise; records of memory handed out on the stream then stop asking it.
#[derive(Debug)]
struct PromisedWhileHeld(Arc<AtomicBool>);

impl devbuf::KeepsStream for PromisedWhileHeld {
    fn stream_alive(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}

/// A `stream=` argument: a devbuf Stream, or another library's stream or queue adopted as
/// `devbuf.Stream(obj)` adopts it (anything with `__cuda_stream__`, a `dpctl.SyclQueue`), so
/// every call that takes a stream takes the ones users hold.
pub(crate) struct StreamArg<'py>(Bound<'py, PyQueue>);

impl<'py> std::ops::Deref for StreamArg<'py> {
    type Target = Bound<'py, PyQueue>;
    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl<'a, 'py> FromPyObject<'a, 'py> for StreamArg<'py> {
    type Error = PyErr;

    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        stream_argument(&obj).map(StreamArg)
    }
}

/// The devbuf Stream a `stream=` argument names ([`StreamArg`]); a TypeError naming `stream`
/// for anything else.
pub(crate) fn stream_argument<'py>(obj: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyQueue>> {
    let py = obj.py();
    if let Ok(ours) = obj.cast::<PyQueue>() {
        return Ok(ours.clone());
    }
    if let Some(adopted) = adopt_cuda_stream(py, obj, None)? {
        return Ok(adopted.into_bound(py));
    }
    if !obj.is_instance_of::<pyo3::types::PyString>()
        && let Some(queue) = crate::objects::foreign_objects::queue_from_device_object(py, obj)?
    {
        return Ok(queue.into_bound(py));
    }
    let got = obj
        .get_type()
        .name()
        .map_or_else(|_| "?".into(), |name| name.to_string());
    Err(PyTypeError::new_err(format!(
        "stream: expected None, a devbuf.Stream, an object with __cuda_stream__ (cuda.core, CuPy) \
         or a dpctl.SyclQueue, got {got}"
    )))
}

/// The Python object that keeps an adopted stream alive, asked whether it still does: a stream
/// protocol object (cuda.core's `Stream`, CuPy's) names its stream through `__cuda_stream__` until
/// it is closed, which destroys the stream however many hold the object.
#[derive(Debug)]
struct PythonStreamOwner {
    object: Py<PyAny>,
    handle: usize,
}

impl devbuf::KeepsStream for PythonStreamOwner {
    fn stream_alive(&self) -> bool {
        // Past the interpreter's end the object can no longer be asked: the stream was promised
        // alive while it is held.
        Python::try_attach(|py| {
            let object = self.object.bind(py);
            match object.getattr_opt(intern!(py, "__cuda_stream__")) {
                Ok(Some(protocol)) => protocol
                    .call0()
                    .and_then(|named| named.extract::<(i64, usize)>())
                    .is_ok_and(|(_, handle)| handle == self.handle),
                // No stream protocol: the object's being held is the caller's promise.
                Ok(None) | Err(_) => true,
            }
        })
        .unwrap_or(true)
    }
}
