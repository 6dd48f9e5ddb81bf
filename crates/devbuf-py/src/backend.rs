//! The backend-specific parts of the protocols: which queue a `syclobj` or a CUDA pointer means.
//! Everything else reaches Python through the core traits.

use devbuf::dlpark::ffi::{DLDevice, DLDeviceType};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use std::sync::Arc;

use devbuf::Queue;
use devbuf::cuda::CudaQueue;

use crate::device::{PyQueue, shared_queue};
use crate::errors::IntoPyResult;

/// A DLPack device from `__dlpack_device__`'s pair.
pub(crate) fn dl_device(device_type: i32, device_id: i32) -> DLDevice {
    DLDevice {
        device_type: DLDeviceType(device_type as _),
        device_id,
    }
}

/// The queue a SUAI `syclobj` names.
pub(crate) fn queue_from_syclobj(
    py: Python<'_>,
    syclobj: &Bound<'_, PyAny>,
) -> PyResult<Py<PyQueue>> {
    if let Ok(queue) = syclobj.cast::<PyQueue>() {
        return Ok(queue.clone().unbind());
    }
    let _ = py;
    Err(PyValueError::new_err(format!(
        "syclobj: {} does not name a SYCL queue or context devbuf can open",
        syclobj.repr()?
    )))
}

/// The shared queue of the CUDA device that owns `ptr` (CAI's `data`).
pub(crate) fn queue_for_cuda_pointer(py: Python<'_>, ptr: usize) -> PyResult<Py<PyQueue>> {
    let found = py.detach(|| devbuf::cuda::queue_for_pointer(ptr)).py()?;
    match found {
        Some((queue, _)) => shared_queue(py, &queue.device().selector),
        None => Err(PyValueError::new_err(format!(
            "data: {ptr:#x} is not CUDA memory (the driver does not know the pointer)"
        ))),
    }
}

/// The CUDA queue behind a devbuf queue, if it is one.
pub(crate) fn cuda_queue(queue: &Arc<dyn Queue>) -> Option<&CudaQueue> {
    queue.as_any().downcast_ref::<CudaQueue>()
}
