//! `devbuf.asarray`: Python values (a scalar, nested lists and tuples of them) become a new array
//! (`creation`), anything else is imported (`import`), and `dtype` is checked against what came.

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;

use crate::objects::array::PyArray;

/// `devbuf.asarray(obj, copy=None, device=None, sync=True, *, kind=None, dtype=None)`: a devbuf
/// Array viewing `obj`'s memory (SUAI, DLPack, CAI or the buffer protocol, tried in that order).
/// `copy`, as in NumPy 2 and the array API: None copies only when it must (`device` names another
/// device), True always copies, and False never does: where the data would have to move, it is a
/// ValueError. A copy onto a named device is device memory unless `kind` ("host", "device" or
/// "shared") asks for another kind. A Python scalar or a nested list or tuple of them is a new
/// array (so `copy=False` is a ValueError), allocated as `devbuf.empty` allocates (`kind`,
/// `device`), of `dtype` or else the array API's type for the values: bool, int64, float64 or
/// complex128 by the highest kind present. An array's `dtype` is its own: another is a TypeError,
/// since devbuf converts no element types. `sync=False` skips ordering our later work after the
/// producer's stream (CAI v3's consumer opt-out; also `DEVBUF_CUDA_ARRAY_INTERFACE_SYNC=0` for
/// the process).
#[pyfunction]
#[pyo3(signature = (obj, copy = None, device = None, sync = true, *, kind = None, dtype = None))]
pub fn asarray<'py>(
    py: Python<'py>,
    obj: &Bound<'py, PyAny>,
    copy: Option<bool>,
    device: Option<&Bound<'py, PyAny>>,
    sync: bool,
    kind: Option<&str>,
    dtype: Option<&Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyArray>> {
    let dtype = match dtype {
        Some(dtype) if !dtype.is_none() => Some(crate::values::dtypes::from_python(dtype)?),
        _ => None,
    };
    // A NumPy scalar (np.float64 is a float) has memory of its own: imported, as NumPy's asarray.
    let python_value = (crate::values::literals::is_python_scalar(obj)
        && !crate::values::literals::is_numpy_scalar(obj)?)
        || crate::values::literals::is_sequence(obj);
    if python_value {
        if copy == Some(false) {
            return Err(PyValueError::new_err(
                "copy: a Python scalar or sequence has no memory to view, and copy=False forbids \
                 making an array of it",
            ));
        }
        let literal = crate::values::literals::literal(obj, "obj")?;
        return crate::creation::from_literal(py, &literal, dtype, kind, device);
    }
    let array = crate::import::asarray(py, obj, copy, device, sync, kind)?;
    let own = array.get().array(py)?.layout().dtype();
    match dtype {
        Some(dtype) if dtype != own => Err(PyTypeError::new_err(format!(
            "dtype: the data is {own}, and devbuf converts no element types (it runs no \
             kernels): convert it with the library that computes (its astype, or NumPy's on the \
             host), then import the result"
        ))),
        _ => Ok(array),
    }
}
