//! What a `Device` (a device of one backend) holds, and what `devbuf.backends()` and
//! `devbuf.devices()` list. Its Python methods are in `device_methods`.

use devbuf::{Availability, DeviceInfo};
use pyo3::prelude::*;

use crate::errors::IntoPyResult;

/// A device of one backend, usable or not.
#[pyclass(frozen, module = "devbuf", name = "Device")]
pub struct PyDevice {
    pub(crate) info: DeviceInfo,
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
