//! What a `Device` (a device of one backend) holds, and what `devbuf.backends()` and
//! `devbuf.devices()` list. Its Python methods are in `crate::device`.

use std::collections::BTreeMap;

use devbuf::{Availability, DeviceInfo, MemKind};
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
    /// The kinds of memory its devices may allocate (each device's `kinds` says which it does).
    #[pyo3(get)]
    kinds: Vec<&'static str>,
    /// The DLPack device types its memory is exported as, each with the kind devbuf allocates
    /// for a consumer that asks for it (DLPack's C exchange table), or None.
    #[pyo3(get)]
    dlpack_device_types: BTreeMap<u32, Option<&'static str>>,
    /// The array-interface protocols that describe its memory, as the attribute each is read
    /// from (`"__cuda_array_interface__"`, `"__sycl_usm_array_interface__"`).
    #[pyo3(get)]
    protocols: Vec<String>,
    /// Whether it makes streams of its own on a device (`devbuf.Stream(device)`).
    #[pyo3(get)]
    makes_streams: bool,
    /// Whether its default device may be the default device (`device=None`); a backend that may
    /// not is skipped wherever it ranks.
    #[pyo3(get)]
    may_be_default: bool,
    /// Its place in the order the default device is looked for (lower first).
    #[pyo3(get)]
    default_rank: u8,
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

/// Every backend compiled into devbuf, in the default order: whether its runtime is usable, why
/// not, its devices, and what its descriptor states.
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
            let descriptor = backend.descriptor();
            Ok(PyBackendInfo {
                name: descriptor.name,
                kinds: descriptor.kinds.iter().map(|kind| kind.as_str()).collect(),
                dlpack_device_types: descriptor
                    .dlpack_device_types
                    .iter()
                    .map(|entry| (entry.device_type.0, entry.allocates.map(MemKind::as_str)))
                    .collect(),
                protocols: descriptor.protocols.iter().map(|p| p.to_string()).collect(),
                makes_streams: descriptor.makes_streams,
                may_be_default: descriptor.may_be_default,
                default_rank: descriptor.default_rank,
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
