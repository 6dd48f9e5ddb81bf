//! `Stream`'s (`Queue`'s) Python methods: making, adopting and exporting streams, recording and
//! waiting for events, allocating on a stream. They reach the default device, other libraries'
//! objects and events, so they sit above those modules (what a stream holds is in
//! `crate::objects::queue`).

use std::sync::Arc;

use devbuf::{Buffer, HandleSource, MemKind, Protocol, StreamHandle};
use pyo3::exceptions::{PyAttributeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyCFunction, PyCapsule};

use crate::errors::IntoPyResult;
use crate::objects::array::PyBuffer;
use crate::objects::default_device::current_default;
use crate::objects::device::PyDevice;
use crate::objects::event::PyEvent;
use crate::objects::foreign_objects::{dpctl_queue, selector_of, sycl_queue_object};
use crate::objects::queue::{PyQueue, handle_capsule};

impl PyQueue {
    /// `Queue.alloc` on `queue`, which the new Buffer keeps: a caller that owns a reference
    /// (`devbuf.alloc`'s resolved queue) hands it over instead of taking one and dropping its own.
    pub(crate) fn alloc_on(
        py: Python<'_>,
        queue: Py<PyQueue>,
        nbytes: usize,
        kind: &str,
        ipc: bool,
    ) -> PyResult<Py<PyBuffer>> {
        let kind: MemKind = kind.parse().py()?;
        let inner = queue.get().queue()?;
        let buffer = if ipc {
            py.detach(|| devbuf::ipc::alloc_shareable(inner, kind, nbytes))
        // Releasing the GIL would cost more than such an allocation.
        } else if inner.allocates_cheaply() {
            Buffer::alloc(inner, kind, nbytes)
        } else {
            py.detach(|| Buffer::alloc(inner, kind, nbytes))
        }
        .py()?;
        PyBuffer::wrap(py, buffer, queue)
    }
}

impl PyQueue {
    fn cuda_stream_handle(&self) -> PyResult<usize> {
        let queue = self.queue()?;
        let cuda = devbuf::speaks(queue.device(), Protocol::Cai);
        match (cuda, queue.interop().native_stream()) {
            (true, Some(stream)) => Ok(stream.get()),
            _ => Err(PyAttributeError::new_err(format!(
                "{} streams have no CUDA stream handle",
                self.backend_name()
            ))),
        }
    }

    fn made_with(&self) -> PyResult<devbuf::StreamOptions> {
        self.made_with.ok_or_else(|| {
            PyAttributeError::new_err(
                "another library's stream, adopted as it was made: devbuf was not told its \
                 options (ask its own object)",
            )
        })
    }
}

#[pymethods]
impl PyQueue {
    /// A new stream on `device` (a selector string, a Device, or None for the default device),
    /// made as cuda.core's `Device.create_stream` and CuPy's `Stream` make theirs: `non_blocking`
    /// (CUDA: no synchronisation with the legacy default stream) and `priority` (CUDA: lower is
    /// more urgent; SYCL has none); `timing` is taken for cuda.core's spelling: every stream
    /// devbuf makes keeps time. Or another library's stream adopted, kept alive while devbuf
    /// uses it: anything with `__cuda_stream__` (cuda.core, CuPy, devbuf's own), or a
    /// `dpctl.SyclQueue` (that very queue is handed out with the memory; devbuf's own commands
    /// run on it when it is in order, else on an in-order queue beside it). An existing stream
    /// keeps the options it was made with: giving any with one is a ValueError (`non_blocking`
    /// None: True for a new stream).
    #[new]
    #[pyo3(signature = (device = None, *, non_blocking = None, priority = None, timing = None))]
    fn new(
        py: Python<'_>,
        device: Option<&Bound<'_, PyAny>>,
        non_blocking: Option<bool>,
        priority: Option<i32>,
        timing: Option<bool>,
    ) -> PyResult<Py<PyQueue>> {
        if let Some(device) = device {
            let existing = existing_stream(py, device)?;
            if let Some(existing) = existing {
                if non_blocking.is_some() || priority.is_some() || timing.is_some() {
                    return Err(PyValueError::new_err(
                        "non_blocking, priority, timing: a stream's flags may only be specified \
                         when making a new one; device is an existing stream, which keeps its own",
                    ));
                }
                return Ok(existing);
            }
        }
        let selector = match device {
            None => current_default(py)?
                .get()
                .queue()?
                .device()
                .selector
                .clone(),
            Some(device) => selector_of(device)?,
        };
        let options = devbuf::StreamOptions {
            non_blocking: non_blocking.unwrap_or(true),
            priority,
            timing: timing.unwrap_or(false),
        };
        let queue = py.detach(|| devbuf::open_stream(&selector, options)).py()?;
        PyQueue::wrap_made(py, queue, options)
    }

    /// A stream for `handle`, another library's stream as `__cuda_stream__` numbers it (a
    /// `CUstream` as an int), on `device` (default: the device the stream belongs to; only a
    /// CUDA device can own the handle, any other is a ValueError naming `device`). `owner`,
    /// which keeps the stream alive, is held while devbuf uses it: without one, the caller keeps
    /// the stream alive for as long as this Stream and the memory allocated on it live.
    #[staticmethod]
    #[pyo3(signature = (handle, device = None, *, owner = None))]
    fn from_handle(
        py: Python<'_>,
        #[pyo3(from_py_with = crate::values::int_args::handle)] handle: usize,
        device: Option<&Bound<'_, PyAny>>,
        owner: Option<Py<PyAny>>,
    ) -> PyResult<Py<PyQueue>> {
        crate::objects::streams::adopt_handle(
            py,
            handle,
            HandleSource::Bare,
            device,
            owner,
            "handle",
        )
    }

    /// Records an Event that completes once all work enqueued on this stream so far has, other
    /// libraries' included (on SYCL a barrier, not devbuf's last command). With `timing=True`
    /// the event also keeps when it completed, for `end - start` (every stream devbuf makes; a
    /// ValueError for another library's queue made without timing).
    #[pyo3(signature = (*, timing = false))]
    fn record(slf: &Bound<'_, Self>, timing: bool) -> PyResult<Py<PyEvent>> {
        let queue = slf.get().queue()?;
        let event = slf
            .py()
            .detach(|| {
                if timing {
                    devbuf::ordering::timed_event(queue)
                } else {
                    devbuf::ordering::all_work_event(queue)
                }
            })
            .py()?;
        Py::new(
            slf.py(),
            PyEvent {
                event,
                stream: slf.clone().unbind(),
            },
        )
    }

    /// With an Event (or another Stream): makes work enqueued on this stream from now on wait for
    /// it on the device, without blocking the host (cuda.core's `Stream.wait`). Without one:
    /// blocks the host until all work enqueued on this stream has completed (`synchronize()`).
    #[pyo3(signature = (event_or_stream = None))]
    fn wait(&self, py: Python<'_>, event_or_stream: Option<&Bound<'_, PyAny>>) -> PyResult<()> {
        let Some(other) = event_or_stream else {
            return self.synchronize(py);
        };
        let event = if let Ok(event) = other.cast::<PyEvent>() {
            event.get().event.clone()
        } else if let Ok(stream) = other.cast::<PyQueue>() {
            let stream = stream.get().queue()?;
            py.detach(|| devbuf::ordering::all_work_event(stream))
                .py()?
        } else {
            return Err(PyTypeError::new_err(format!(
                "event_or_stream: expected a devbuf.Event or a devbuf.Stream, got {}",
                other.get_type().name()?
            )));
        };
        let queue = self.queue()?;
        py.detach(|| devbuf::ordering::stream_waits_for(queue, &event))
            .py()
    }

    /// Blocks until all work enqueued on this stream has completed, other libraries' included.
    fn synchronize(&self, py: Python<'_>) -> PyResult<()> {
        let queue = self.queue()?;
        py.detach(|| devbuf::ordering::synchronize_stream(queue))
            .py()
    }

    /// Whether all work enqueued on this stream so far has completed (other libraries' included),
    /// without waiting.
    fn query(&self, py: Python<'_>) -> PyResult<bool> {
        let queue = self.queue()?;
        py.detach(|| devbuf::ordering::stream_is_idle(queue)).py()
    }

    /// The device this queue runs on.
    #[getter]
    fn device(&self, py: Python<'_>) -> Py<PyDevice> {
        self.device.clone_ref(py)
    }

    /// The backend's name (one of `devbuf.backends()`'s).
    #[getter]
    fn backend(&self) -> &'static str {
        self.backend_name()
    }

    /// This SYCL queue as a `dpctl.SyclQueue` (the same `sycl::queue`), where dpctl imports.
    #[getter]
    fn sycl_queue(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        dpctl_queue(py, self)?.ok_or_else(|| {
            PyAttributeError::new_err(format!(
                "sycl_queue: a {} queue has no dpctl queue (not SYCL, or dpctl cannot be imported)",
                self.backend_name()
            ))
        })
    }

    /// The native stream handle (a CUstream as an int) for backends that have one, else None.
    #[getter]
    fn stream(&self) -> PyResult<Option<usize>> {
        Ok(self
            .queue()?
            .interop()
            .native_stream()
            .map(StreamHandle::get))
    }

    /// Allocates `nbytes` of `kind` memory ("host", "device" or "shared") on this queue. With
    /// `ipc=True` the memory can be opened by other processes (`Buffer.ipc_handle()`), where the
    /// backend can share memory (host, CUDA device memory); else ValueError says why not.
    #[pyo3(signature = (nbytes, kind = "shared", *, ipc = false))]
    pub(crate) fn alloc(
        slf: &Bound<'_, Self>,
        #[pyo3(from_py_with = crate::values::int_args::nbytes)] nbytes: usize,
        kind: &str,
        ipc: bool,
    ) -> PyResult<Py<PyBuffer>> {
        PyQueue::alloc_on(slf.py(), slf.clone().unbind(), nbytes, kind, ipc)
    }

    /// A new "SyclQueueRef" capsule holding a copy of this SYCL queue (what dpctl expects of a
    /// `syclobj`). Only SYCL queues have one. Memory allocated on a stream since closed still
    /// hands its queue to consumers this way.
    fn _get_capsule<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyCapsule>> {
        match self.held().interop().export_handle() {
            Some(handle) => handle_capsule(py, handle),
            None => Err(PyAttributeError::new_err(format!(
                "{} queues have no SYCL queue capsule",
                self.backend_name()
            ))),
        }
    }

    /// The CUDA stream protocol (cuda.core, CuPy): a callable returning `(0, stream handle)`, on
    /// CUDA streams only. Elsewhere the attribute is absent (AttributeError), so that
    /// `hasattr(stream, "__cuda_stream__")` answers as consumers probe it.
    #[getter]
    fn __cuda_stream__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyCFunction>> {
        let handle = self.cuda_stream_handle()?;
        PyCFunction::new_closure(
            py,
            Some(c"__cuda_stream__"),
            Some(c"(0, the CUstream handle)"),
            move |_args, _kwargs| -> PyResult<(u32, usize)> { Ok((0, handle)) },
        )
    }

    /// cuda.core's `Stream.handle`: the `CUstream` as an int, on CUDA streams only
    /// (AttributeError elsewhere; `sycl_queue` is a SYCL stream's).
    #[getter]
    fn handle(&self) -> PyResult<usize> {
        self.cuda_stream_handle()
    }

    /// The priority the stream was made with (cuda.core's and CuPy's `Stream.priority`): None
    /// for the default priority, and for backends without priorities, where it changed nothing.
    /// AttributeError for another library's stream, whose priority devbuf was not told.
    #[getter]
    fn priority(&self) -> PyResult<Option<i32>> {
        Ok(self.made_with()?.priority)
    }

    /// Whether the stream was made non-blocking (cuda.core's `Stream.is_nonblocking`: on CUDA,
    /// no synchronisation with the legacy default stream). AttributeError for another library's
    /// stream.
    #[getter]
    fn is_nonblocking(&self) -> PyResult<bool> {
        Ok(self.made_with()?.non_blocking)
    }

    /// Whether the stream's events can keep time (`record(timing=True)`): every stream devbuf
    /// makes, and another library's stream where its runtime keeps time for it.
    #[getter]
    fn timing(&self) -> PyResult<bool> {
        Ok(self.queue()?.keeps_time())
    }

    /// Closes the stream, as cuda.core's `Stream.close()`: later calls that use it, or name it as
    /// `stream=`, raise ValueError. Like `cuStreamDestroy`, it neither waits nor cancels: work
    /// already enqueued runs to its end, and memory allocated on the stream stays usable and
    /// ordered (devbuf lets go of the runtime stream when this object and the last such buffer or
    /// event are gone). A device's shared stream cannot be closed; closing twice is allowed.
    fn close(&self) -> PyResult<()> {
        self.mark_closed()
    }

    /// `with stream:` makes this the stream of the calls in the block that name none (`alloc`,
    /// `copy_from`, `fill`, `get`, `to_bytes`), for memory of its device, as CuPy's
    /// `with stream:`; blocks nest.
    fn __enter__(slf: &Bound<'_, Self>) -> PyResult<Py<PyQueue>> {
        slf.get().queue()?;
        crate::objects::current_stream::enter(slf.clone().unbind());
        Ok(slf.clone().unbind())
    }

    /// Ends the `with` block: the stream before it is current again.
    #[pyo3(signature = (*_exc_info))]
    fn __exit__(
        slf: &Bound<'_, Self>,
        _exc_info: &Bound<'_, pyo3::types::PyTuple>,
    ) -> PyResult<bool> {
        crate::objects::current_stream::exit(slf)?;
        Ok(false)
    }

    fn __eq__(&self, other: &Bound<'_, PyAny>) -> bool {
        other
            .cast::<PyQueue>()
            .is_ok_and(|other| Arc::ptr_eq(other.get().held(), self.held()))
    }

    fn __hash__(&self) -> usize {
        Arc::as_ptr(self.held()).cast::<u8>() as usize
    }

    fn __repr__(&self) -> String {
        self.describe()
    }
}

/// `device` as a stream that exists already: devbuf's own, another library's with
/// `__cuda_stream__` (adopted), or a `dpctl.SyclQueue`; `None` when it names a device instead.
fn existing_stream(py: Python<'_>, device: &Bound<'_, PyAny>) -> PyResult<Option<Py<PyQueue>>> {
    if let Ok(ours) = device.cast::<PyQueue>() {
        return Ok(Some(ours.clone().unbind()));
    }
    if let Some(adopted) = crate::objects::streams::adopt_cuda_stream(py, device, None)? {
        return Ok(Some(adopted));
    }
    sycl_queue_object(py, device)
}
