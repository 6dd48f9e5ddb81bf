//! `Stream`'s (`Queue`'s) Python methods: making, adopting and exporting streams, recording and
//! waiting for events, allocating on a stream. They reach the default device, other libraries'
//! objects and events, so they sit above those modules (what a stream holds is in `queue`).

use std::sync::Arc;

use devbuf::{Buffer, MemKind, Protocol, StreamHandle};
use pyo3::exceptions::{PyAttributeError, PyTypeError};
use pyo3::prelude::*;
use pyo3::types::PyCapsule;

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
        let inner = &queue.get().queue;
        let buffer = if ipc {
            py.detach(|| devbuf::ipc::alloc_shareable(inner, kind, nbytes))
        // Host allocations take tens of nanoseconds: releasing the GIL would cost more.
        } else if inner.device().backend == devbuf::host::HOST {
            Buffer::alloc(inner, kind, nbytes)
        } else {
            py.detach(|| Buffer::alloc(inner, kind, nbytes))
        }
        .py()?;
        PyBuffer::wrap(py, buffer, queue)
    }
}

#[pymethods]
impl PyQueue {
    /// A new stream on `device` (a selector string, a Device, or None for the default device),
    /// made as cuda.core's `Device.create_stream` and CuPy's `Stream` make theirs: `non_blocking`
    /// (CUDA: no synchronisation with the legacy default stream) and `priority` (CUDA: lower is
    /// more urgent; SYCL has none). Or another library's stream adopted, kept alive while devbuf
    /// uses it: anything with `__cuda_stream__` (cuda.core, CuPy, devbuf's own), or a
    /// `dpctl.SyclQueue` (the same `sycl::queue` when it is in order).
    #[new]
    #[pyo3(signature = (device = None, *, non_blocking = true, priority = None))]
    fn new(
        py: Python<'_>,
        device: Option<&Bound<'_, PyAny>>,
        non_blocking: bool,
        priority: Option<i32>,
    ) -> PyResult<Py<PyQueue>> {
        if let Some(device) = device {
            if let Ok(ours) = device.cast::<PyQueue>() {
                return Ok(ours.clone().unbind());
            }
            if let Some(adopted) = crate::objects::streams::adopt_cuda_stream(py, device, None)? {
                return Ok(adopted);
            }
            if let Some(queue) = sycl_queue_object(py, device)? {
                return Ok(queue);
            }
        }
        let selector = match device {
            None => current_default(py)?.get().queue.device().selector.clone(),
            Some(device) => selector_of(device)?,
        };
        let options = devbuf::StreamOptions {
            non_blocking,
            priority,
        };
        let queue = py.detach(|| devbuf::open_stream(&selector, options)).py()?;
        PyQueue::wrap(py, queue)
    }

    /// A stream for `handle`, another library's stream as `__cuda_stream__` numbers it (a
    /// `CUstream` as an int), on `device` (default: the device the stream belongs to). `owner`,
    /// which keeps the stream alive, is held while devbuf uses it: without one, the caller keeps
    /// the stream alive for as long as this Stream and the memory allocated on it live.
    #[staticmethod]
    #[pyo3(signature = (handle, device = None, *, owner = None))]
    fn from_handle(
        py: Python<'_>,
        handle: usize,
        device: Option<&Bound<'_, PyAny>>,
        owner: Option<Py<PyAny>>,
    ) -> PyResult<Py<PyQueue>> {
        crate::objects::streams::adopt_handle(py, handle, device, owner)
    }

    /// Records an Event that completes once all work enqueued on this stream so far has, other
    /// libraries' included (on SYCL a barrier, not devbuf's last command). With
    /// `timing=True` the event also keeps when it completed, for `end - start` (CUDA, host; a
    /// ValueError on backends whose events have no timing).
    #[pyo3(signature = (*, timing = false))]
    fn record(slf: &Bound<'_, Self>, timing: bool) -> PyResult<Py<PyEvent>> {
        let queue = &slf.get().queue;
        let event = slf
            .py()
            .detach(|| {
                if timing {
                    queue.record_timed_event()
                } else {
                    devbuf::stream::all_work_event(queue)
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
            let stream = &stream.get().queue;
            py.detach(|| devbuf::stream::all_work_event(stream)).py()?
        } else {
            return Err(PyTypeError::new_err(format!(
                "event_or_stream: expected a devbuf.Event or a devbuf.Stream, got {}",
                other.get_type().name()?
            )));
        };
        py.detach(|| self.queue.wait_event(&event)).py()
    }

    /// Blocks until all work enqueued on this stream has completed, other libraries' included.
    fn synchronize(&self, py: Python<'_>) -> PyResult<()> {
        py.detach(|| devbuf::stream::synchronize_stream(&self.queue))
            .py()
    }

    /// Whether all work enqueued on this stream so far has completed (other libraries' included),
    /// without waiting.
    fn query(&self, py: Python<'_>) -> PyResult<bool> {
        py.detach(|| self.queue.is_idle()).py()
    }

    /// The device this queue runs on.
    #[getter]
    fn device(&self, py: Python<'_>) -> Py<PyDevice> {
        self.device.clone_ref(py)
    }

    /// The backend's name: "host", "sycl", "cuda" or "opencl".
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
    fn stream(&self) -> Option<usize> {
        self.queue.interop().native_stream().map(StreamHandle::get)
    }

    /// Allocates `nbytes` of `kind` memory ("host", "device" or "shared") on this queue. With
    /// `ipc=True` the memory can be opened by other processes (`Buffer.ipc_handle()`), where the
    /// backend can share memory (host, CUDA device memory); else ValueError says why not.
    #[pyo3(signature = (nbytes, kind = "shared", *, ipc = false))]
    pub(crate) fn alloc(
        slf: &Bound<'_, Self>,
        nbytes: usize,
        kind: &str,
        ipc: bool,
    ) -> PyResult<Py<PyBuffer>> {
        PyQueue::alloc_on(slf.py(), slf.clone().unbind(), nbytes, kind, ipc)
    }

    /// A new "SyclQueueRef" capsule holding a copy of this SYCL queue (what dpctl expects of a
    /// `syclobj`). Only SYCL queues have one.
    fn _get_capsule<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyCapsule>> {
        match self.queue.interop().export_handle() {
            Some(handle) => handle_capsule(py, handle),
            None => Err(PyAttributeError::new_err(format!(
                "{} queues have no SYCL queue capsule",
                self.backend_name()
            ))),
        }
    }

    /// The CUDA stream protocol (cuda.core, CuPy): `(0, stream handle)`.
    fn __cuda_stream__(&self) -> PyResult<(u32, usize)> {
        let cuda = devbuf::speaks(self.queue.device(), Protocol::Cai);
        match (cuda, self.queue.interop().native_stream()) {
            (true, Some(stream)) => Ok((0, stream.get())),
            _ => Err(PyAttributeError::new_err(format!(
                "{} queues have no CUDA stream",
                self.backend_name()
            ))),
        }
    }

    fn __eq__(&self, other: &Bound<'_, PyAny>) -> bool {
        other
            .cast::<PyQueue>()
            .is_ok_and(|other| Arc::ptr_eq(&other.get().queue, &self.queue))
    }

    fn __hash__(&self) -> usize {
        Arc::as_ptr(&self.queue).cast::<u8>() as usize
    }

    fn __repr__(&self) -> String {
        let device = self.queue.device();
        format!("<devbuf.Stream on {:?} {:?}>", device.selector, device.name)
    }
}
