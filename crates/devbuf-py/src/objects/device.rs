//! `Queue`'s methods, `BackendInfo`, `backends()`, `devices()` and `alloc()`.

use std::sync::Arc;

use devbuf::{Availability, Buffer, MemKind, Protocol};
use pyo3::exceptions::{PyAttributeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyCapsule;

use crate::errors::IntoPyResult;
use crate::objects::array::PyBuffer;

use crate::objects::foreign_objects::{resolve_queue, selector_of, sycl_queue_object};
use crate::objects::queue::{PyDevice, PyQueue, handle_capsule};

#[pymethods]
impl PyQueue {
    /// A new queue on `device` (a selector string, a Device, or None for the default device), or
    /// the queue of a `dpctl.SyclQueue` (the same `sycl::queue` when it is in order).
    #[new]
    #[pyo3(signature = (device = None))]
    fn new(py: Python<'_>, device: Option<&Bound<'_, PyAny>>) -> PyResult<Py<PyQueue>> {
        if let Some(device) = device
            && let Some(queue) = sycl_queue_object(py, device)?
        {
            return Ok(queue);
        }
        let selector = match device {
            None => crate::objects::queue::current_default(py)?
                .get()
                .queue
                .device()
                .selector
                .clone(),
            Some(device) => selector_of(device)?,
        };
        let queue = py.detach(|| devbuf::open(&selector)).py()?;
        PyQueue::wrap(py, queue)
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
        crate::objects::foreign_objects::dpctl_queue(py, self)?.ok_or_else(|| {
            PyAttributeError::new_err(format!(
                "sycl_queue: a {} queue has no dpctl queue (not SYCL, or dpctl cannot be imported)",
                self.backend_name()
            ))
        })
    }

    /// The native stream handle (a CUstream as an int) for backends that have one, else None.
    #[getter]
    fn stream(&self) -> Option<usize> {
        self.queue.native_stream()
    }

    /// Blocks until all work enqueued on this queue has completed.
    fn wait(&self, py: Python<'_>) -> PyResult<()> {
        py.detach(|| self.queue.wait()).py()
    }

    /// Allocates `nbytes` of `kind` memory ("host", "device" or "shared") on this queue. With
    /// `ipc=True` the memory can be opened by other processes (`Buffer.ipc_handle()`), where the
    /// backend can share memory (host, CUDA device memory); else ValueError says why not.
    #[pyo3(signature = (nbytes, kind = "shared", *, ipc = false))]
    fn alloc(
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
        match self.queue.export_handle() {
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
        match (cuda, self.queue.native_stream()) {
            (true, Some(stream)) => Ok((0, stream)),
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
        format!("<devbuf.Queue on {:?} {:?}>", device.selector, device.name)
    }
}

/// What `devbuf.backends()` returns for each backend compiled in.
#[pyclass(frozen, module = "devbuf", name = "BackendInfo")]
pub struct PyBackendInfo {
    /// The backend's name, also the first part of its selectors.
    #[pyo3(get)]
    name: &'static str,
    /// Whether its runtime is usable in this process.
    #[pyo3(get)]
    available: bool,
    /// Why the backend is unavailable, or None.
    #[pyo3(get)]
    reason: Option<String>,
    /// Every device the runtime reports, usable or not.
    #[pyo3(get)]
    devices: Vec<Py<PyDevice>>,
}

#[pymethods]
impl PyBackendInfo {
    fn __repr__(&self) -> String {
        match &self.reason {
            None => format!(
                "BackendInfo(name={:?}, available=True, devices={})",
                self.name,
                self.devices.len()
            ),
            Some(reason) => format!(
                "BackendInfo(name={:?}, available=False, reason={reason:?})",
                self.name
            ),
        }
    }
}

/// Every backend compiled into devbuf, whether its runtime is usable, why not, and its devices.
#[pyfunction]
pub fn backends(py: Python<'_>) -> PyResult<Vec<PyBackendInfo>> {
    devbuf::backends()
        .iter()
        .map(|backend| {
            let availability = py.detach(|| backend.availability());
            let (devices, reason) = match availability {
                Availability::Available => match py.detach(|| backend.devices()) {
                    Ok(devices) => (devices, None),
                    Err(err) => (Vec::new(), Some(err.to_string())),
                },
                Availability::Unavailable(reason) => (Vec::new(), Some(reason)),
            };
            Ok(PyBackendInfo {
                name: backend.name(),
                available: reason.is_none(),
                reason,
                devices: devices
                    .into_iter()
                    .map(|info| Py::new(py, PyDevice { info }))
                    .collect::<PyResult<_>>()?,
            })
        })
        .collect()
}

/// The devices of one backend (or of all available backends), usable or not.
#[pyfunction]
#[pyo3(signature = (backend = None))]
pub fn devices(py: Python<'_>, backend: Option<&str>) -> PyResult<Vec<Py<PyDevice>>> {
    let mut all = Vec::new();
    for info in backends(py)? {
        if backend.is_none_or(|name| name == info.name) {
            all.extend(info.devices);
        }
    }
    if let Some(name) = backend {
        devbuf::backend(name).py()?;
    }
    Ok(all)
}

/// Allocates `nbytes` of `kind` memory ("host", "device" or "shared") on `device` (a selector,
/// a Device, a Queue, or None for the default device); `ipc=True` makes it shareable with other
/// processes (see `Queue.alloc`); `mr=` allocates from that memory resource, on its own device:
/// a `device` other than the resource's is a ValueError naming both, and so is `ipc=True` (memory
/// for sharing comes from the device, not from a resource).
#[pyfunction]
#[pyo3(signature = (nbytes, kind = "shared", device = None, *, ipc = false, mr = None))]
pub fn alloc(
    py: Python<'_>,
    nbytes: usize,
    kind: &str,
    device: Option<&Bound<'_, PyAny>>,
    ipc: bool,
    mr: Option<&Bound<'_, PyAny>>,
) -> PyResult<Py<PyBuffer>> {
    if let Some(mr) = mr {
        let mr = crate::mr::memory_resource::resource_arg(mr)?;
        if ipc {
            return Err(PyValueError::new_err(
                "ipc: memory for sharing is allocated by the device itself, not by a memory \
                 resource; leave out mr= or ipc=True",
            ));
        }
        if let Some(device) = device {
            let asked = resolve_queue(py, Some(device))?;
            let asked = &asked.get().queue.device().selector;
            let own = crate::mr::memory_resource::PyMemoryResource::selector(&mr)?;
            if *asked != own {
                return Err(PyValueError::new_err(format!(
                    "device: {asked:?} is not the device of mr, a {} on {own:?}; allocate from a \
                     resource of {asked:?}, or leave device out",
                    mr.get_type().name()?
                )));
            }
        }
        return crate::mr::memory_resource::PyMemoryResource::alloc(&mr, nbytes, kind);
    }
    let queue = resolve_queue(py, device)?;
    PyQueue::alloc(queue.bind(py), nbytes, kind, ipc)
}
