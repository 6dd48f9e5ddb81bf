//! What an `Array` does not do, said where a NumPy, CuPy or PyTorch user reaches for it:
//! `astype` and arithmetic need kernels, which devbuf (a memory library: it allocates, views and
//! copies) does not run. Each refusal is a TypeError that names the libraries that compute and
//! the zero-copy way to them, instead of Python's "unsupported operand type(s)".
//!
//! A binary operator with a foreign operand returns `NotImplemented`, so that the other
//! library's reflected operator is still tried; with a Python value or a devbuf array, and in
//! the reflected position (every other try is over), it raises.

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;

use crate::objects::array::PyArray;

/// Where computing on devbuf's memory goes.
const WHERE_TO_GO: &str = "hand the memory, zero-copy, to a library that computes on its \
     device (dpnp.asarray(x), cupy.asarray(x), torch.from_dlpack(x), jax.dlpack.from_dlpack(x)), \
     or copy it to the host with x.get() and use NumPy; devbuf.asarray(result) brings a result \
     back";

/// The TypeError for `operation`.
fn no_kernels(operation: &str) -> PyErr {
    PyTypeError::new_err(format!(
        "{operation}: devbuf arrays do no arithmetic (devbuf allocates, views and copies memory, \
         and runs no kernels); {WHERE_TO_GO}"
    ))
}

/// `array <symbol> other`: refused when no other library could do it, else left to the other
/// operand's reflected operator.
fn binary(other: &Bound<'_, PyAny>, symbol: &str) -> PyResult<Py<PyAny>> {
    let py = other.py();
    let ours_or_python = other.is_instance_of::<PyArray>()
        || crate::values::literals::is_python_scalar(other)
        || crate::values::literals::is_sequence(other)
        || crate::values::literals::is_numpy_scalar(other)?;
    if ours_or_python {
        return Err(no_kernels(&format!("x {symbol} value")));
    }
    Ok(py.NotImplemented())
}

/// `other <symbol> array`, once `other` declined: refused.
fn reflected(symbol: &str) -> PyResult<Py<PyAny>> {
    Err(no_kernels(&format!("value {symbol} x")))
}

#[pymethods]
impl PyArray {
    /// Refused (TypeError): converting element types needs a kernel, which devbuf does not
    /// run; the error names the libraries that compute and the zero-copy way to them.
    #[pyo3(signature = (*_args, **_kwargs))]
    fn astype(
        &self,
        _args: &Bound<'_, pyo3::types::PyTuple>,
        _kwargs: Option<&Bound<'_, pyo3::types::PyDict>>,
    ) -> PyResult<()> {
        Err(PyTypeError::new_err(format!(
            "astype: devbuf converts no element types (it allocates, views and copies memory, \
             and runs no kernels); {WHERE_TO_GO}. To see the same bytes as another type, \
             x.view(dtype) is a view"
        )))
    }

    fn __add__(&self, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        binary(other, "+")
    }
    fn __radd__(&self, _other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        reflected("+")
    }
    fn __sub__(&self, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        binary(other, "-")
    }
    fn __rsub__(&self, _other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        reflected("-")
    }
    fn __mul__(&self, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        binary(other, "*")
    }
    fn __rmul__(&self, _other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        reflected("*")
    }
    fn __truediv__(&self, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        binary(other, "/")
    }
    fn __rtruediv__(&self, _other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        reflected("/")
    }
    fn __floordiv__(&self, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        binary(other, "//")
    }
    fn __rfloordiv__(&self, _other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        reflected("//")
    }
    fn __mod__(&self, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        binary(other, "%")
    }
    fn __rmod__(&self, _other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        reflected("%")
    }
    fn __pow__(&self, other: &Bound<'_, PyAny>, _modulo: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        binary(other, "**")
    }
    fn __rpow__(
        &self,
        _other: &Bound<'_, PyAny>,
        _modulo: &Bound<'_, PyAny>,
    ) -> PyResult<Py<PyAny>> {
        reflected("**")
    }
    fn __matmul__(&self, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        binary(other, "@")
    }
    fn __rmatmul__(&self, _other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        reflected("@")
    }
    fn __neg__(&self) -> PyResult<Py<PyAny>> {
        Err(no_kernels("-x"))
    }
    fn __pos__(&self) -> PyResult<Py<PyAny>> {
        Err(no_kernels("+x"))
    }
    fn __abs__(&self) -> PyResult<Py<PyAny>> {
        Err(no_kernels("abs(x)"))
    }
}
