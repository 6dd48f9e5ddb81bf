//! The default device of `device=None` as Python sees it: `default_device()`,
//! `set_default_device()` (for the process, as `torch.set_default_device`) and the reason `info`
//! prints. The choice itself, with `with devbuf.Device(...)` per thread, is in `queues`.

use pyo3::prelude::*;

use crate::objects::foreign_objects::resolve_queue;
use crate::objects::queue::{
    PyDevice, current_default, current_default_with_reason, set_process_default,
};

/// The default device: the device of the innermost `with devbuf.Device(...)` block on this
/// thread, else the one `set_default_device()` set, else devbuf's choice: the device
/// `DEVBUF_DEVICE` names, else the first of cuda, sycl, opencl and host whose default device
/// allocates host, device and shared memory.
#[pyfunction]
pub fn default_device(py: Python<'_>) -> PyResult<Py<PyDevice>> {
    Ok(current_default(py)?.get().device.clone_ref(py))
}

/// Why the default device is the one it is (what `python -m devbuf info` prints).
#[pyfunction]
pub fn _default_device_reason(py: Python<'_>) -> PyResult<String> {
    current_default_with_reason(py).map(|(_, reason)| reason)
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
