//! `Stream` (an ordered stream of work on one device and context; `Queue` is its earlier name)
//! with its methods, the queue each device shares, and the capsules that carry a queue's runtime
//! handle to other libraries.

use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::Arc;

use devbuf::dlpark::ffi::DLDevice;
use devbuf::{Buffer, ExportedHandle, MemKind, Protocol, Queue, StreamHandle};
use parking_lot::Mutex;
use pyo3::exceptions::{PyAttributeError, PyTypeError};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyCapsule;

use crate::errors::IntoPyResult;
use crate::objects::array::PyBuffer;
use crate::objects::default_device::current_default;
use crate::objects::device::PyDevice;
use crate::objects::event::PyEvent;
use crate::objects::foreign_objects::{dpctl_queue, selector_of, sycl_queue_object};

/// An ordered stream of work on one device and context: a CUDA stream, an in-order SYCL queue.
/// `devbuf.Queue` is the same class under its earlier name.
#[pyclass(frozen, module = "devbuf", name = "Stream")]
pub struct PyQueue {
    pub(crate) queue: Arc<dyn Queue>,
    pub(crate) device: Py<PyDevice>,
    /// This queue as a `dpctl.SyclQueue` (DLPack's `stream` for kDLOneAPI producers), made on
    /// first use; `None` for queues dpctl cannot wrap.
    pub(crate) dpctl_queue: PyOnceLock<Option<Py<PyAny>>>,
}

impl PyQueue {
    pub(crate) fn wrap(py: Python<'_>, queue: Arc<dyn Queue>) -> PyResult<Py<PyQueue>> {
        let device = Py::new(
            py,
            PyDevice {
                info: queue.device().clone(),
            },
        )?;
        Py::new(
            py,
            PyQueue {
                queue,
                device,
                dpctl_queue: PyOnceLock::new(),
            },
        )
    }

    pub(crate) fn backend_name(&self) -> &'static str {
        self.queue.device().backend
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

    /// Records an Event that completes once all work enqueued on this stream so far has. With
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
                    queue.record_event()
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
            py.detach(|| stream.record_event()).py()?
        } else {
            return Err(PyTypeError::new_err(format!(
                "event_or_stream: expected a devbuf.Event or a devbuf.Stream, got {}",
                other.get_type().name()?
            )));
        };
        py.detach(|| self.queue.wait_event(&event)).py()
    }

    /// Blocks until all work enqueued on this stream has completed.
    fn synchronize(&self, py: Python<'_>) -> PyResult<()> {
        py.detach(|| self.queue.wait()).py()
    }

    /// Whether all work enqueued on this stream so far has completed, without waiting.
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
        let kind: MemKind = kind.parse().py()?;
        let queue = &slf.get().queue;
        let buffer = if ipc {
            slf.py()
                .detach(|| devbuf::ipc::alloc_shareable(queue, kind, nbytes))
        // Host allocations take tens of nanoseconds: releasing the GIL would cost more.
        } else if queue.device().backend == devbuf::host::HOST {
            Buffer::alloc(queue, kind, nbytes)
        } else {
            slf.py().detach(|| Buffer::alloc(queue, kind, nbytes))
        }
        .py()?;
        PyBuffer::wrap(slf.py(), buffer, slf.clone().unbind())
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

/// Wraps a runtime handle given away by a queue in a capsule whose destructor releases it. The
/// release function rides in the capsule's context. A consumer such as dpctl renames the capsule
/// ("used_SyclQueueRef") and copies the handle; the copy we made is ours to release either way.
pub(crate) fn handle_capsule(
    py: Python<'_>,
    handle: ExportedHandle,
) -> PyResult<Bound<'_, PyCapsule>> {
    unsafe extern "C" fn release(capsule: *mut ffi::PyObject) {
        // SAFETY: called by CPython with a live capsule made below; its name, pointer and context
        // were set by us, and the context is the handle's release function.
        unsafe {
            let name = ffi::PyCapsule_GetName(capsule);
            let ptr = ffi::PyCapsule_GetPointer(capsule, name);
            let context = ffi::PyCapsule_GetContext(capsule);
            if !ptr.is_null() && !context.is_null() {
                let destroy: unsafe extern "C" fn(*mut c_void) = std::mem::transmute(context);
                destroy(ptr);
            }
            ffi::PyErr_Clear();
        }
    }
    let name = handle.name;
    let (ptr, destroy) = handle.into_raw();
    // SAFETY: `name` is a static C string; on failure we release the handle ourselves.
    unsafe {
        let capsule = ffi::PyCapsule_New(ptr.as_ptr(), name.as_ptr(), Some(release));
        if capsule.is_null() {
            destroy(ptr.as_ptr());
            return Err(PyErr::fetch(py));
        }
        if ffi::PyCapsule_SetContext(capsule, destroy as *mut c_void) != 0 {
            // Without its context the destructor would leak the handle; release it now.
            destroy(ptr.as_ptr());
            ffi::PyCapsule_SetPointer(capsule, std::ptr::dangling_mut::<c_void>());
            ffi::Py_DecRef(capsule);
            return Err(PyErr::fetch(py));
        }
        Ok(Bound::from_owned_ptr(py, capsule).cast_into_unchecked())
    }
}

/// One shared queue per device, so that every allocation on a device goes through one queue and
/// `syclobj`s compare equal (like dpctl's queue cache).
static SHARED_QUEUES: PyOnceLock<Mutex<HashMap<String, Py<PyQueue>>>> = PyOnceLock::new();

/// The shared queue for `selector` ("" = default device).
pub(crate) fn shared_queue(py: Python<'_>, selector: &str) -> PyResult<Py<PyQueue>> {
    let cache = SHARED_QUEUES.get_or_init(py, Default::default);
    if let Some(queue) = cache.lock().get(selector) {
        return Ok(queue.clone_ref(py));
    }
    let queue = py.detach(|| devbuf::open(selector)).py()?;
    let canonical = queue.device().selector.clone();
    // Python objects are made and dropped with the map unlocked: either may run Python code
    // (a garbage collection, a finalizer) that asks for a shared queue again.
    let existing = cache.lock().get(&canonical).map(|q| q.clone_ref(py));
    let wrapped = match existing {
        Some(existing) => existing,
        None => PyQueue::wrap(py, queue)?,
    };
    let (shared, displaced) = {
        let mut cache = cache.lock();
        // Another thread may have made it meanwhile: the first one stays.
        let shared = cache
            .entry(canonical)
            .or_insert_with(|| wrapped.clone_ref(py))
            .clone_ref(py);
        let displaced = cache.insert(selector.to_string(), shared.clone_ref(py));
        (shared, displaced)
    };
    drop((wrapped, displaced));
    Ok(shared)
}

/// The shared queue of the device a DLPack producer names, cached by DLPack device.
pub(crate) fn shared_queue_for_dlpack(py: Python<'_>, device: DLDevice) -> PyResult<Py<PyQueue>> {
    type ByDevice = Mutex<HashMap<(u32, i32), Py<PyQueue>>>;
    static BY_DLPACK_DEVICE: PyOnceLock<ByDevice> = PyOnceLock::new();
    let key = (device.device_type.0, device.device_id);
    let cache = BY_DLPACK_DEVICE.get_or_init(py, Default::default);
    if let Some(queue) = cache.lock().get(&key) {
        return Ok(queue.clone_ref(py));
    }
    let queue = py.detach(|| devbuf::queue_for_dlpack_device(device)).py()?;
    let shared = shared_queue(py, &queue.device().selector)?;
    let displaced = cache.lock().insert(key, shared.clone_ref(py));
    drop(displaced);
    Ok(shared)
}
