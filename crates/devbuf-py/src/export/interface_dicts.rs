//! `__sycl_usm_array_interface__` and `__cuda_array_interface__` of an `Array` (and so a
//! `Buffer`).
//!
//! Getters build their dictionary once and hand out copies: a fresh dict per access (consumers
//! may mutate it) at the cost of one `PyDict_Copy`. A protocol the memory cannot honour raises
//! AttributeError, so that `hasattr` probes answer correctly.

use devbuf::{Array, Protocol};
use pyo3::exceptions::{PyAttributeError, PyBufferError};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};

use crate::errors::IntoPyResult;
use crate::gil_as_lock::OpenArray;
use crate::objects::array::PyArray;

/// Memory of a backend `protocol` describes, else an AttributeError naming those backends.
fn require_protocol(array: &Array, protocol: Protocol, attribute: &str) -> PyResult<()> {
    let device = array.buffer().device();
    if devbuf::speaks(device, protocol) {
        return Ok(());
    }
    let speakers: Vec<_> = devbuf::speakers(protocol).map(|b| b.name()).collect();
    let speaker = match speakers.is_empty() {
        true => "another backend's".to_string(),
        false => speakers.join(" or "),
    };
    Err(PyAttributeError::new_err(format!(
        "{attribute}: {} memory on {:?} is not {speaker} memory",
        array.buffer().kind(),
        device.selector
    )))
}

/// Exports that cannot describe this array are missing attributes, not errors.
fn as_attribute_error(err: PyErr, py: Python<'_>, attribute: &str) -> PyErr {
    if err.is_instance_of::<PyBufferError>(py) {
        PyAttributeError::new_err(format!("{attribute}: {}", err.value(py)))
    } else {
        err
    }
}

fn strides_value<'py>(py: Python<'py>, strides: Option<Vec<i64>>) -> PyResult<Bound<'py, PyAny>> {
    match strides {
        None => Ok(py.None().into_bound(py)),
        Some(strides) => Ok(PyTuple::new(py, strides)?.into_any()),
    }
}

/// SUAI and CAI consumers keep the exporting object, not a share of the memory: the first export
/// anchors the array to the object (a later `close()` leaves it there).
pub(crate) fn suai<'py>(this: &PyArray, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
    let array = this.array(py)?;
    // Built on the first access, out of line: every later one is a copy, and its code shares the
    // instruction cache with CPython's on every call (see BENCHMARKS.md).
    let cached = match this.cache.suai.get(py) {
        Some(cached) => cached,
        None => first_suai(this, &array, py)?,
    };
    order_pending_work_on_own_queue(&array, py)?;
    cached.bind(py).copy()
}

#[cold]
#[inline(never)]
fn first_suai<'a>(
    this: &'a PyArray,
    array: &OpenArray<'_>,
    py: Python<'_>,
) -> PyResult<&'a Py<PyDict>> {
    const ATTRIBUTE: &str = "__sycl_usm_array_interface__";
    this.cache.suai.get_or_try_init(py, || {
        require_protocol(array, Protocol::Suai, ATTRIBUTE)?;
        array.buffer().mark_exported();
        array.anchor();
        let build = || -> PyResult<Py<PyDict>> {
            let layout = array.layout();
            let fields = array.suai_fields().py()?;
            let dict = PyDict::new(py);
            dict.set_item(intern!(py, "data"), (fields.data, array.readonly()))?;
            dict.set_item(intern!(py, "shape"), PyTuple::new(py, layout.shape())?)?;
            dict.set_item(intern!(py, "strides"), strides_value(py, fields.strides)?)?;
            dict.set_item(intern!(py, "offset"), fields.offset)?;
            dict.set_item(intern!(py, "typestr"), layout.dtype().typestr().py()?)?;
            dict.set_item(intern!(py, "version"), devbuf::interface::SUAI_VERSION)?;
            dict.set_item(intern!(py, "syclobj"), this.queue.clone_ref(py))?;
            Ok(dict.unbind())
        };
        build().map_err(|err| as_attribute_error(err, py, ATTRIBUTE))
    })
}

/// A SYCL consumer orders its work on our queue (SUAI's `syclobj`, `sycl_queue`):
/// `devbuf::exchange::export_on_own_queue`, without the GIL when it must order anything.
pub(crate) fn order_pending_work_on_own_queue(array: &Array, py: Python<'_>) -> PyResult<()> {
    let buffer = array.buffer();
    if buffer.needs_ordering_on_own_queue() {
        py.detach(|| devbuf::exchange::export_on_own_queue(buffer))
            .py()?;
    }
    Ok(())
}

pub(crate) fn cai<'py>(this: &PyArray, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
    const ATTRIBUTE: &str = "__cuda_array_interface__";
    let array = this.array(py)?;
    let cached = this.cache.cai.get_or_try_init(py, || {
        require_protocol(&array, Protocol::Cai, ATTRIBUTE)?;
        // Marked handed out by `cai_export_stream`, after it decided what the export names.
        array.anchor();
        let build = || -> PyResult<Py<PyDict>> {
            let layout = array.layout();
            let strides = array
                .cai_strides()
                .map(|s| s.iter().map(|&b| b as i64).collect());
            let dict = PyDict::new(py);
            dict.set_item(intern!(py, "data"), (array.cai_data(), array.readonly()))?;
            dict.set_item(intern!(py, "shape"), PyTuple::new(py, layout.shape())?)?;
            dict.set_item(intern!(py, "strides"), strides_value(py, strides)?)?;
            dict.set_item(intern!(py, "typestr"), layout.dtype().typestr().py()?)?;
            dict.set_item(intern!(py, "version"), 3)?;
            dict.set_item(intern!(py, "stream"), py.None())?;
            Ok(dict.unbind())
        };
        build().map_err(|err| as_attribute_error(err, py, ATTRIBUTE))
    })?;
    let dict = cached.bind(py).copy()?;
    if let Some(stream) = devbuf::exchange::cai_export_stream(array.buffer()).py()? {
        dict.set_item(intern!(py, "stream"), stream)?;
    }
    Ok(dict)
}
