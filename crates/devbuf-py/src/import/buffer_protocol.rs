//! The buffer protocol: host memory any Python object exposes, held until the last view is gone.

use std::ffi::CStr;

use devbuf::interface::{self};
use devbuf::{DType, Owner};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use pyo3::{ffi, intern};

use crate::errors::IntoPyResult;
use crate::import::wrap::wrap_foreign;
use crate::objects::array::PyArray;
use crate::objects::python_owner::HeldBuffer;
use crate::objects::queue::host_memory_queue;

pub(crate) fn import_buffer_protocol<'py>(
    py: Python<'py>,
    obj: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyArray>> {
    // SAFETY: an all-zero Py_buffer is a valid "empty" value for PyObject_GetBuffer to fill.
    let mut view: Box<ffi::Py_buffer> = Box::new(unsafe { std::mem::zeroed() });
    // SAFETY: `obj` is live and `view` is writable.
    if unsafe { ffi::PyObject_GetBuffer(obj.as_ptr(), &mut *view, ffi::PyBUF_RECORDS_RO) } != 0 {
        let refused = PyErr::fetch(py);
        return import_array_interface(py, obj)?.ok_or(refused);
    }
    let held = HeldBuffer(view);
    let view = &*held.0;
    // The exporter's count sizes the reads below: bound it first.
    let ndim = devbuf::check_ndim(view.ndim.into(), "ndim").py()?;
    // SAFETY: the exporter filled format (or null), shape and strides with `ndim` entries.
    let (format, shape, strides) = unsafe {
        let format =
            (!view.format.is_null()).then(|| CStr::from_ptr(view.format).to_str().unwrap_or("?"));
        let shape: Vec<i64> = if view.shape.is_null() && ndim == 0 {
            // A 0-d exporter (a NumPy 0-d array): one element, no dimensions.
            Vec::new()
        } else if view.shape.is_null() {
            vec![view.len.checked_div(view.itemsize).unwrap_or(view.len) as i64]
        } else {
            std::slice::from_raw_parts(view.shape, ndim)
                .iter()
                .map(|&n| n as i64)
                .collect()
        };
        let strides = (!view.strides.is_null()).then(|| {
            std::slice::from_raw_parts(view.strides, ndim)
                .iter()
                .map(|&s| s as i64)
                .collect::<Vec<_>>()
        });
        (format, shape, strides)
    };
    let dtype = DType::from_buffer_format(format, view.itemsize as usize).py()?;
    let foreign = interface::import_strided(
        dtype,
        &shape,
        strides.as_deref(),
        view.buf as usize,
        view.readonly != 0,
        "data",
    )
    .py()?;
    let queue = host_memory_queue(py)?;
    wrap_foreign(py, foreign, queue, Owner::keep_alive(held), "data", None)
}

/// An array whose element type has no buffer-protocol format (ml_dtypes' bfloat16, which NumPy
/// refuses to put in a buffer) through NumPy's `__array_interface__` (version 3: `data`, `shape`,
/// `strides`), with the type its `dtype` names; `None` when it has neither or devbuf does not
/// know the type. Checked as every import is; the array is held while devbuf uses its memory.
fn import_array_interface<'py>(
    py: Python<'py>,
    obj: &Bound<'py, PyAny>,
) -> PyResult<Option<Bound<'py, PyArray>>> {
    let Some(dtype) = obj.getattr_opt(intern!(py, "dtype"))? else {
        return Ok(None);
    };
    let Ok(dtype) = crate::values::dtypes::from_python(&dtype) else {
        return Ok(None);
    };
    if dtype.buffer_format().is_some() {
        // The buffer protocol describes such an array: its refusal stands.
        return Ok(None);
    }
    let Some(interface) = obj.getattr_opt(intern!(py, "__array_interface__"))? else {
        return Ok(None);
    };
    let interface = interface.cast_into::<PyDict>().map_err(|_| {
        PyTypeError::new_err("__array_interface__: expected a dict (NumPy's array interface)")
    })?;
    let field = |key: &'static str| -> PyResult<Bound<'py, PyAny>> {
        interface
            .get_item(key)?
            .ok_or_else(|| PyValueError::new_err(format!("__array_interface__: has no {key:?}")))
    };
    let (ptr, readonly): (usize, bool) = field("data")?.extract().map_err(|_| {
        PyTypeError::new_err("data: expected (address, read-only flag) in __array_interface__")
    })?;
    let shape: Vec<i64> = field("shape")?.extract().map_err(|_| {
        PyTypeError::new_err("shape: expected a tuple of ints in __array_interface__")
    })?;
    let strides: Option<Vec<i64>> = match interface.get_item("strides")? {
        Some(strides) if !strides.is_none() => Some(strides.extract().map_err(|_| {
            PyTypeError::new_err("strides: expected None or a tuple of ints in __array_interface__")
        })?),
        _ => None,
    };
    devbuf::check_ndim(shape.len() as i64, "shape").py()?;
    let foreign =
        interface::import_strided(dtype, &shape, strides.as_deref(), ptr, readonly, "data").py()?;
    let queue = host_memory_queue(py)?;
    let owner = Owner::keep_alive(obj.clone().unbind());
    wrap_foreign(py, foreign, queue, owner, "data", None).map(Some)
}
