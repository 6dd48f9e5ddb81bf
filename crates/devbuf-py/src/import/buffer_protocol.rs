//! The buffer protocol: host memory any Python object exposes, held until the last view is gone.

use std::ffi::CStr;

use devbuf::interface::{self};
use devbuf::{DType, Owner};
use pyo3::ffi;
use pyo3::prelude::*;

use crate::errors::IntoPyResult;
use crate::import::wrap::wrap_foreign;
use crate::objects::array::PyArray;
use crate::objects::python_owner::HeldBuffer;
use crate::objects::queue::shared_queue;

pub(crate) fn import_buffer_protocol<'py>(
    py: Python<'py>,
    obj: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyArray>> {
    // SAFETY: an all-zero Py_buffer is a valid "empty" value for PyObject_GetBuffer to fill.
    let mut view: Box<ffi::Py_buffer> = Box::new(unsafe { std::mem::zeroed() });
    // SAFETY: `obj` is live and `view` is writable.
    if unsafe { ffi::PyObject_GetBuffer(obj.as_ptr(), &mut *view, ffi::PyBUF_RECORDS_RO) } != 0 {
        return Err(PyErr::fetch(py));
    }
    let held = HeldBuffer(view);
    let view = &*held.0;
    // The exporter's count sizes the reads below: bound it first.
    let ndim = devbuf::check_ndim(view.ndim.into(), "ndim").py()?;
    // SAFETY: the exporter filled format (or null), shape and strides with `ndim` entries.
    let (format, shape, strides) = unsafe {
        let format =
            (!view.format.is_null()).then(|| CStr::from_ptr(view.format).to_str().unwrap_or("?"));
        // No shape: a scalar when ndim is 0 (NumPy's scalars), else bytes in one dimension.
        let shape: Vec<i64> = if view.shape.is_null() && ndim == 0 {
            Vec::new()
        } else if view.shape.is_null() {
            vec![(view.len / view.itemsize.max(1)) as i64]
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
    let queue = shared_queue(py, devbuf::host::HOST)?;
    wrap_foreign(py, foreign, queue, Owner::keep_alive(held), "data", None)
}
