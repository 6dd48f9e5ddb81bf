//! `Device` (a device of one backend) with its methods, and what `devbuf.backends()` and
//! `devbuf.devices()` list.

use devbuf::{Availability, DeviceInfo};
use pyo3::prelude::*;

use crate::errors::IntoPyResult;
use crate::objects::default_device::{current_default, enter_default, exit_default};
use crate::objects::queue::{PyQueue, shared_queue};

/// A device of one backend, usable or not.
#[pyclass(frozen, module = "devbuf", name = "Device")]
pub struct PyDevice {
    pub(crate) info: DeviceInfo,
}

#[pymethods]
impl PyDevice {
    /// The device a selector names: "host", "sycl", "sycl:<filter string>", "cuda", "cuda:N",
    /// "opencl", "opencl:P:D", or nothing for the default device.
    #[new]
    #[pyo3(signature = (selector = None))]
    fn new(py: Python<'_>, selector: Option<&str>) -> PyResult<Py<PyDevice>> {
        let queue = match selector {
            None | Some("") => current_default(py)?,
            Some(selector) => shared_queue(py, selector)?,
        };
        Ok(queue.get().device.clone_ref(py))
    }

    /// `with device:` makes this device the default of the current thread until the block ends
    /// (as `with cupy.cuda.Device(n):` does); blocks nest.
    fn __enter__(slf: &Bound<'_, Self>) -> PyResult<Py<PyDevice>> {
        enter_default(slf.py(), slf.get())?;
        Ok(slf.clone().unbind())
    }

    /// Ends the `with` block: the default goes back to what it was before it.
    #[pyo3(signature = (*_exc_info))]
    fn __exit__(&self, _exc_info: &Bound<'_, pyo3::types::PyTuple>) -> PyResult<bool> {
        exit_default(self)?;
        Ok(false)
    }

    /// Backend name: "host", "sycl", "cuda", "opencl".
    #[getter]
    fn backend(&self) -> &'static str {
        self.info.backend
    }

    /// Index within the backend (dpctl's device index, the CUDA ordinal).
    #[getter]
    fn index(&self) -> u32 {
        self.info.index
    }

    /// The device's own name, as its runtime reports it.
    #[getter]
    fn name(&self) -> &str {
        &self.info.name
    }

    /// The vendor's name, as the runtime reports it.
    #[getter]
    fn vendor(&self) -> &str {
        &self.info.vendor
    }

    /// The driver's (or runtime's) version.
    #[getter]
    fn driver(&self) -> &str {
        &self.info.driver
    }

    /// What stands in for the hardware when a test double of its runtime does (the CUDA driver
    /// double); `None` for real hardware.
    #[getter]
    fn test_double(&self) -> Option<&str> {
        self.info.test_double.as_deref()
    }

    /// The selector that opens this device.
    #[getter]
    fn selector(&self) -> &str {
        &self.info.selector
    }

    /// Global memory in bytes (0 when unknown).
    #[getter]
    fn global_mem_size(&self) -> u64 {
        self.info.global_mem_bytes
    }

    /// The kinds of memory devbuf can allocate here.
    #[getter]
    fn kinds(&self) -> Vec<&'static str> {
        self.info.kinds.iter().map(|k| k.as_str()).collect()
    }

    /// Whether devbuf can allocate memory on this device.
    #[getter]
    fn usable(&self) -> bool {
        self.info.unusable_reason.is_none()
    }

    /// Why devbuf cannot use this device, or None.
    #[getter]
    fn reason(&self) -> Option<&str> {
        self.info.unusable_reason.as_deref()
    }

    /// The shared queue of this device (what `alloc(device=...)` uses).
    #[getter]
    fn queue(&self, py: Python<'_>) -> PyResult<Py<PyQueue>> {
        shared_queue(py, &self.info.selector)
    }

    /// The device's default stream: its shared queue, on which devbuf's work runs when no
    /// `stream=` is given (cuda.core's `Device.default_stream`).
    #[getter]
    fn default_stream(&self, py: Python<'_>) -> PyResult<Py<PyQueue>> {
        shared_queue(py, &self.info.selector)
    }

    /// A new stream on this device: `devbuf.Stream(device, non_blocking=..., priority=...)`, by
    /// cuda.core's name.
    #[pyo3(signature = (*, non_blocking = true, priority = None))]
    fn create_stream(
        &self,
        py: Python<'_>,
        non_blocking: bool,
        priority: Option<i32>,
    ) -> PyResult<Py<PyQueue>> {
        let options = devbuf::StreamOptions {
            non_blocking,
            priority,
        };
        let queue = py
            .detach(|| devbuf::open_stream(&self.info.selector, options))
            .py()?;
        PyQueue::wrap(py, queue)
    }

    fn __eq__(&self, other: &Bound<'_, PyAny>) -> bool {
        other
            .cast::<PyDevice>()
            .is_ok_and(|other| other.get().info.selector == self.info.selector)
    }

    fn __hash__(&self) -> u64 {
        use std::hash::{Hash, Hasher};
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        self.info.selector.hash(&mut hasher);
        hasher.finish()
    }

    fn __repr__(&self) -> String {
        let mut repr = format!(
            "<devbuf.Device {:?} {:?}",
            self.info.selector, self.info.name
        );
        match &self.info.unusable_reason {
            Some(reason) => repr += &format!(" unusable: {reason}"),
            None => repr += &format!(" kinds={:?}", self.kinds()),
        }
        repr + ">"
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
