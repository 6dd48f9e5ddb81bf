//! Python values as elements: a scalar (Python's bool, int, float and complex, and NumPy's
//! scalars) as `devbuf::Scalar`, and lists and tuples of them as `devbuf::Literal`, for
//! `asarray(obj)`, `x.fill(value)` and `x[...] = value`. What they mean (shape, dtype,
//! conversion) is `devbuf::Literal`'s and `devbuf::DType`'s.

use devbuf::{Literal, MAX_NDIM, Scalar};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyComplex, PyFloat, PyInt, PyList, PyTuple};

/// Whether `value` is a Python scalar: bool, int, float or complex (subclasses included).
pub(crate) fn is_python_scalar(value: &Bound<'_, PyAny>) -> bool {
    value.is_instance_of::<PyInt>()
        || value.is_instance_of::<PyFloat>()
        || value.is_instance_of::<PyComplex>()
}

/// Whether `value` is a NumPy scalar (`numpy.generic`), without importing NumPy where the
/// program has not.
pub(crate) fn is_numpy_scalar(value: &Bound<'_, PyAny>) -> PyResult<bool> {
    let py = value.py();
    let modules = py
        .import(intern!(py, "sys"))?
        .getattr(intern!(py, "modules"))?;
    match modules.get_item(intern!(py, "numpy")) {
        Ok(numpy) => value.is_instance(&numpy.getattr(intern!(py, "generic"))?),
        Err(_) => Ok(false),
    }
}

/// Whether `value` is a list or a tuple: a nested sequence of values.
pub(crate) fn is_sequence(value: &Bound<'_, PyAny>) -> bool {
    value.is_instance_of::<PyList>() || value.is_instance_of::<PyTuple>()
}

/// A scalar as core takes it (NumPy's scalars too, through `__index__`, `__float__` and
/// `__complex__`); a TypeError naming `key` for anything else.
pub(crate) fn scalar(value: &Bound<'_, PyAny>, key: &str) -> PyResult<Scalar> {
    if value.is_instance_of::<PyBool>() {
        return Ok(Scalar::Bool(value.is_truthy()?));
    }
    if value.is_instance_of::<PyInt>() {
        return value.extract::<i128>().map(Scalar::Int).map_err(|_| {
            PyValueError::new_err(format!("{key}: {value} is out of range for every dtype"))
        });
    }
    if let Ok(complex) = value.cast::<PyComplex>() {
        return Ok(Scalar::Complex(complex.real(), complex.imag()));
    }
    if let Ok(float) = value.cast::<PyFloat>() {
        return Ok(Scalar::Float(float.value()));
    }
    if let Ok(n) = value.extract::<i128>() {
        return Ok(Scalar::Int(n));
    }
    let name = value.get_type().name()?;
    if name.to_str()?.contains("bool") {
        return Ok(Scalar::Bool(value.is_truthy()?));
    }
    if name.to_str()?.contains("complex") {
        let complex = value
            .call_method0("__complex__")?
            .cast_into::<PyComplex>()?;
        return Ok(Scalar::Complex(complex.real(), complex.imag()));
    }
    value.extract::<f64>().map(Scalar::Float).map_err(|_| {
        PyTypeError::new_err(format!(
            "{key}: expected a bool, int, float or complex, got {name}"
        ))
    })
}

/// `value` (a Python scalar, or lists and tuples nested at most `MAX_NDIM` deep, of Python or
/// NumPy scalars) as a literal; a TypeError naming `key` for an entry that is neither.
pub(crate) fn literal(value: &Bound<'_, PyAny>, key: &str) -> PyResult<Literal> {
    nested(value, key, 0)
}

fn nested(value: &Bound<'_, PyAny>, key: &str, depth: usize) -> PyResult<Literal> {
    if !is_sequence(value) {
        if is_python_scalar(value) || is_numpy_scalar(value)? {
            return scalar(value, key).map(Literal::Scalar);
        }
        return Err(PyTypeError::new_err(format!(
            "{key}: a nested sequence holds a {}; devbuf reads bool, int, float and complex \
             values in lists and tuples (arrays inside a list: stack them with their library \
             first)",
            value.get_type().name()?
        )));
    }
    // A list that holds itself would nest forever: the depth is bounded as the shape is.
    if depth == MAX_NDIM {
        return Err(PyValueError::new_err(format!(
            "{key}: sequences nested more than {MAX_NDIM} deep"
        )));
    }
    value
        .try_iter()?
        .map(|item| nested(&item?, key, depth + 1))
        .collect::<PyResult<_>>()
        .map(Literal::Sequence)
}
