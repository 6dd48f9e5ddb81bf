//! The attributes dpctl's and dpnp's own arrays carry, on SYCL arrays: `sycl_queue`,
//! `sycl_device`, `sycl_context`, `usm_type`, and dpnp.tensor's `__usm_ndarray__`. They exist
//! only where dpctl imports (and, for `__usm_ndarray__`, where dpnp is imported); elsewhere they
//! raise AttributeError, so `hasattr` probes answer False. Nothing here imports dpctl before an
//! attribute is asked for.
//!
//! Why one dpctl memory object per array: `dpnp.asarray(obj)` takes the queue from
//! `obj.sycl_queue` and imports zero-copy only when the imported memory's queue *is* that very
//! object; dpctl gives every memory it wraps from a SUAI a new queue object. So `sycl_queue` is
//! the queue of the array's own dpctl memory view, and `__usm_ndarray__` is built on that view.
//! That queue is a copy of the devbuf queue's `sycl::queue`, equal to it for dpctl and dpnp.

use pyo3::exceptions::PyAttributeError;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyTuple};

use devbuf::MemKind;

use crate::objects::array::{DpctlView, PyArray};

/// SYCL memory of a kind dpctl names, with dpctl importable: the devbuf queue as a
/// `dpctl.SyclQueue`.
fn dpctl_queue_of(this: &PyArray, py: Python<'_>, attribute: &str) -> PyResult<Py<PyAny>> {
    let array = this.array(py)?;
    let buffer = array.buffer();
    let missing = |why: &str| {
        PyAttributeError::new_err(format!(
            "{attribute}: {} memory on {:?} {why}",
            buffer.kind(),
            buffer.device().selector
        ))
    };
    if !crate::objects::foreign_objects::speaks_suai(buffer.queue()) {
        return Err(missing("is not SYCL memory"));
    }
    if buffer.kind() == MemKind::Unknown {
        return Err(missing("is not USM its context knows"));
    }
    crate::objects::foreign_objects::dpctl_queue(py, this.queue.get())?
        .ok_or_else(|| missing("has no dpctl queue (dpctl cannot be imported)"))
}

/// The array's dpctl memory view (`dpctl.memory.as_usm_memory`), made once; `None` where dpctl
/// cannot describe the array (no SUAI for it, nothing to view).
fn dpctl_view<'a>(
    this: &'a PyArray,
    py: Python<'_>,
    attribute: &str,
) -> PyResult<Option<&'a DpctlView>> {
    dpctl_queue_of(this, py, attribute)?;
    let view = this.dpctl_view.get_or_try_init(py, || -> PyResult<_> {
        // A twin of this array owns the view: the view keeping `this` alive while `this` caches
        // it would be a cycle the collector cannot see. The twin holds the memory for as long as
        // this object keeps the view: `close()` leaves the array to the object from now on.
        let array = this.array(py)?;
        array.anchor();
        let twin = PyArray::wrap(py, array.clone(), this.queue.clone_ref(py))?;
        let as_usm_memory = py
            .import(intern!(py, "dpctl.memory"))?
            .getattr(intern!(py, "as_usm_memory"))?;
        Ok(as_usm_memory.call1((twin,)).ok().map(|memory| {
            Box::new(DpctlView {
                memory: memory.unbind(),
                usm_ndarray: PyOnceLock::new(),
            })
        }))
    })?;
    Ok(view.as_deref())
}

/// `sycl_queue`: the queue of the array's dpctl memory view, or the devbuf queue's dpctl queue
/// where there is no view (an empty array).
pub(crate) fn sycl_queue(this: &PyArray, py: Python<'_>) -> PyResult<Py<PyAny>> {
    const ATTRIBUTE: &str = "sycl_queue";
    match dpctl_view(this, py, ATTRIBUTE)? {
        Some(view) => Ok(view
            .memory
            .bind(py)
            .getattr(intern!(py, "sycl_queue"))?
            .unbind()),
        None => dpctl_queue_of(this, py, ATTRIBUTE),
    }
}

/// `sycl_device`: the `dpctl.SyclDevice` of the memory's queue.
pub(crate) fn sycl_device(this: &PyArray, py: Python<'_>) -> PyResult<Py<PyAny>> {
    let queue = dpctl_queue_of(this, py, "sycl_device")?;
    Ok(queue.bind(py).getattr(intern!(py, "sycl_device"))?.unbind())
}

/// `sycl_context`: the `dpctl.SyclContext` the memory is bound to.
pub(crate) fn sycl_context(this: &PyArray, py: Python<'_>) -> PyResult<Py<PyAny>> {
    let queue = dpctl_queue_of(this, py, "sycl_context")?;
    Ok(queue
        .bind(py)
        .getattr(intern!(py, "sycl_context"))?
        .unbind())
}

/// `usm_type`: "device", "shared" or "host", as dpctl names USM kinds.
pub(crate) fn usm_type(this: &PyArray, py: Python<'_>) -> PyResult<&'static str> {
    dpctl_queue_of(this, py, "usm_type")?;
    Ok(this.array(py)?.buffer().kind().as_str())
}

/// `__usm_ndarray__`: a new `dpnp.tensor.usm_ndarray` over the array's dpctl memory view (what
/// dpnp.tensor asks of foreign arrays before SUAI), read-only when the array is. Only where
/// dpnp.tensor is already imported: a probe must not import dpnp.
pub(crate) fn usm_ndarray(this: &PyArray, py: Python<'_>) -> PyResult<Py<PyAny>> {
    const ATTRIBUTE: &str = "__usm_ndarray__";
    let Some(view) = dpctl_view(this, py, ATTRIBUTE)? else {
        return Err(PyAttributeError::new_err(format!(
            "{ATTRIBUTE}: dpctl cannot view this array"
        )));
    };
    let (constructor, args, kwargs) = view
        .usm_ndarray
        .get_or_try_init(py, || usm_ndarray_call(this, py, view))?;
    let array = constructor
        .bind(py)
        .call(args.bind(py), Some(kwargs.bind(py)))?;
    if this.array(py)?.readonly() {
        array
            .getattr(intern!(py, "flags"))?
            .set_item(intern!(py, "W"), false)?;
    }
    crate::export::interface_dicts::order_pending_work_on_own_queue(&*this.array(py)?, py)?;
    Ok(array.unbind())
}

/// `dpnp.tensor.usm_ndarray` and the arguments that make one viewing the array in `view`.
fn usm_ndarray_call(
    this: &PyArray,
    py: Python<'_>,
    view: &DpctlView,
) -> PyResult<(Py<PyAny>, Py<PyTuple>, Py<PyDict>)> {
    const ATTRIBUTE: &str = "__usm_ndarray__";
    let modules = py
        .import(intern!(py, "sys"))?
        .getattr(intern!(py, "modules"))?;
    let Some(tensor) = modules.get_item(intern!(py, "dpnp.tensor")).ok() else {
        return Err(PyAttributeError::new_err(format!(
            "{ATTRIBUTE}: dpnp.tensor is not imported"
        )));
    };
    let memory = view.memory.bind(py);
    let array = this.array(py)?;
    let layout = array.layout();
    let view_start: usize = memory.getattr(intern!(py, "_pointer"))?.extract()?;
    let offset = (array.data_ptr() - view_start) / layout.dtype().itemsize();
    let invalid = |err: devbuf::Error| PyAttributeError::new_err(format!("{ATTRIBUTE}: {err}"));
    // SUAI's element strides: None for C-contiguous arrays, as dpctl's own SUAI says.
    let strides = array.suai_fields().map_err(invalid)?.strides;
    let kwargs = PyDict::new(py);
    kwargs.set_item(
        intern!(py, "dtype"),
        layout.dtype().typestr().map_err(invalid)?,
    )?;
    kwargs.set_item(intern!(py, "strides"), strides)?;
    kwargs.set_item(intern!(py, "buffer"), memory)?;
    kwargs.set_item(intern!(py, "offset"), offset)?;
    let args = PyTuple::new(py, [PyTuple::new(py, layout.shape())?])?;
    let constructor = tensor.getattr(intern!(py, "usm_ndarray"))?;
    Ok((constructor.unbind(), args.unbind(), kwargs.unbind()))
}
