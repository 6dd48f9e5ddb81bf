//! `Device`'s Python methods (its streams, `with device:`) and `set_default_device`: they reach
//! the shared queues, the default device and other libraries' device objects, so they sit above
//! those modules (what a Device holds is in `crate::objects::device`).

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use std::sync::Arc;

use pyo3::types::{PyDict, PyInt, PyString};

use crate::errors::IntoPyResult;
use crate::objects::default_device::{
    current_default, enter_default, exit_default, set_process_default,
};
use crate::objects::device::PyDevice;
use crate::objects::foreign_objects::resolve_queue;
use crate::objects::queue::{PyQueue, shared_queue};

#[pymethods]
impl PyDevice {
    /// The device a selector names: a backend's name (one of `devbuf.backends()`'s) for its
    /// default device, or followed by `:` and what that backend reads ("cuda:1", "sycl:gpu"; each
    /// backend's forms in the Devices guide), or nothing for the default device.
    /// A Device is taken as it is. An int is refused with the selector it likely means:
    /// cuda.core's and CuPy's `Device(0)` is `Device("cuda:0")` here, where every backend numbers
    /// its own devices.
    #[new]
    #[pyo3(signature = (selector = None))]
    fn new(py: Python<'_>, selector: Option<&Bound<'_, PyAny>>) -> PyResult<Py<PyDevice>> {
        let selector = match selector {
            None => None,
            Some(device) if device.is_instance_of::<PyDevice>() => {
                return Ok(device.cast::<PyDevice>()?.clone().unbind());
            }
            Some(text) if text.is_instance_of::<PyString>() => Some(text.extract::<String>()?),
            Some(number) if number.is_instance_of::<PyInt>() => {
                return Err(PyTypeError::new_err(format!(
                    "selector: Device takes a selector string, not the int {number}: \
                     Device(\"cuda:{number}\") for CUDA device {number} (cuda.core's and CuPy's \
                     Device({number})), \"sycl:gpu\", \"opencl:0:{number}\", \"host\"; \
                     devbuf.devices() lists them"
                )));
            }
            // Another library's device or queue (a dpctl.SyclDevice or SyclQueue): its device.
            Some(other) => match crate::objects::foreign_objects::selector_of(other) {
                Ok(selector) => Some(selector),
                Err(_) => {
                    return Err(PyTypeError::new_err(format!(
                        "selector: expected a selector string (\"cuda:0\", \"sycl:gpu\", \
                         \"host\"), a Device, a dpctl.SyclDevice or a dpctl.SyclQueue, got {}",
                        other.get_type().name()?
                    )));
                }
            },
        };
        let queue = match selector.as_deref() {
            None | Some("") => current_default(py)?,
            Some(selector) => shared_queue(py, selector)?,
        };
        Ok(queue.get().device.clone_ref(py))
    }

    /// Blocks until the work on this device that devbuf can see is done, on every backend alike:
    /// every devbuf stream of the device (its shared stream, the streams you made or adopted on
    /// it), other libraries' work on the streams and queues devbuf handed out, and what else the
    /// runtime lets it wait for (on CUDA every stream of the device's primary context, as
    /// cuda.core's `Device.sync()`).
    fn sync(&self, py: Python<'_>) -> PyResult<()> {
        let queue = shared_queue(py, &self.info.selector)?;
        let queue = Arc::clone(queue.get().queue()?);
        py.detach(|| devbuf::ordering::synchronize_device(&queue))
            .py()
    }

    /// `(free, total)` bytes of the device's memory now, CuPy's `Device.mem_info` (CUDA's
    /// `cuMemGetInfo`; the host's available and total memory). Absent (AttributeError, naming
    /// why) where the runtime does not report free memory: dpctl's C API, for SYCL, does not.
    #[getter]
    fn mem_info(&self, py: Python<'_>) -> PyResult<(usize, usize)> {
        let queue = shared_queue(py, &self.info.selector)?;
        let queue = Arc::clone(queue.get().queue()?);
        py.detach(|| queue.memory_info()).map_err(|err| match err {
            devbuf::Error::Unsupported { .. } => {
                pyo3::exceptions::PyAttributeError::new_err(format!("mem_info: {err}"))
            }
            err => crate::errors::to_py(err),
        })
    }

    /// `sync()` under CuPy's name (`cupy.cuda.Device.synchronize`).
    fn synchronize(&self, py: Python<'_>) -> PyResult<()> {
        self.sync(py)
    }

    /// What the runtime says of the device, as a dict (cuda.core's `Device.properties` holds
    /// more, from the driver): "name", "vendor", "driver", "backend", "index", "selector",
    /// "global_mem_size" (bytes; 0 when unknown), "kinds", "test_double".
    #[getter]
    fn properties<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let info = &self.info;
        let properties = PyDict::new(py);
        properties.set_item("name", &info.name)?;
        properties.set_item("vendor", &info.vendor)?;
        properties.set_item("driver", &info.driver)?;
        properties.set_item("backend", info.backend)?;
        properties.set_item("index", info.index)?;
        properties.set_item("selector", &info.selector)?;
        properties.set_item("global_mem_size", info.global_mem_bytes)?;
        let kinds: Vec<&str> = info.kinds.iter().map(|kind| kind.as_str()).collect();
        properties.set_item("kinds", kinds)?;
        properties.set_item("test_double", info.test_double.as_deref())?;
        Ok(properties)
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

    /// Backend name (one of `devbuf.backends()`'s), the first word of its selectors.
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

    /// A new stream on this device: `devbuf.Stream(device, non_blocking=..., priority=...,
    /// timing=...)`, by cuda.core's name.
    #[pyo3(signature = (*, non_blocking = true, priority = None, timing = false))]
    fn create_stream(
        &self,
        py: Python<'_>,
        non_blocking: bool,
        priority: Option<i32>,
        timing: bool,
    ) -> PyResult<Py<PyQueue>> {
        let options = devbuf::StreamOptions {
            non_blocking,
            priority,
            timing,
        };
        let queue = py
            .detach(|| devbuf::open_stream(&self.info.selector, options))
            .py()?;
        PyQueue::wrap_made(py, queue, options)
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

/// Sets the default device of every thread (a selector, a Device, a Queue or a
/// `dpctl.SyclQueue`); `None` goes back to devbuf's choice. Returns the previous setting, or None.
/// Inside a `with devbuf.Device(...)` block that block's device still wins on its thread.
#[pyfunction]
#[pyo3(signature = (device, /))]
pub fn set_default_device(
    py: Python<'_>,
    device: Option<&Bound<'_, PyAny>>,
) -> PyResult<Option<Py<PyDevice>>> {
    let queue = device.map(|d| resolve_queue(py, Some(d))).transpose()?;
    let previous = set_process_default(py, queue);
    Ok(previous.map(|q| q.get().device.clone_ref(py)))
}
