//! `devbuf.empty`, `zeros`, `ones`, `full`, `empty_like`, `zeros_like` and `ones_like`: typed
//! allocations as NumPy, CuPy and dpnp spell them, made of `devbuf.alloc` (the same `kind`,
//! `device`, `stream` and `mr`) and a C-contiguous view; and the arrays `asarray` makes of
//! Python scalars and sequences. Values are encoded by `devbuf::DType::encode`.

pub(crate) mod asarray;

use devbuf::{Array, DType, Layout, Literal, MemKind, Scalar};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyInt;

use crate::errors::IntoPyResult;
use crate::objects::array::PyArray;
use crate::objects::queue::PyQueue;
use crate::objects::streams::StreamArg;

/// Where and how an allocation is made: `alloc`'s keywords.
struct Placement<'a, 'py> {
    kind: Option<&'a str>,
    device: Option<&'a Bound<'py, PyAny>>,
    stream: Option<&'a Bound<'py, PyQueue>>,
    mr: Option<&'a Bound<'py, PyAny>>,
}

/// A shape argument: an int or a sequence of ints, none negative.
fn shape_argument(shape: &Bound<'_, PyAny>) -> PyResult<Vec<usize>> {
    let extents: Vec<isize> = if shape.is_instance_of::<PyInt>() {
        vec![shape.extract().map_err(|_| {
            PyValueError::new_err(format!("shape: {shape} is too large for an array"))
        })?]
    } else {
        shape.extract().map_err(|_| {
            PyTypeError::new_err(format!(
                "shape: expected an int or a sequence of ints, got {}",
                shape
                    .get_type()
                    .name()
                    .map_or_else(|_| "?".into(), |n| n.to_string())
            ))
        })?
    };
    extents
        .iter()
        .map(|&n| {
            usize::try_from(n).map_err(|_| {
                PyValueError::new_err(format!("shape: {extents:?} has the negative extent {n}"))
            })
        })
        .collect()
}

/// A C-contiguous `dtype` array of `shape`, allocated as `alloc` allocates, not initialised.
fn allocate(
    py: Python<'_>,
    shape: &[usize],
    dtype: DType,
    at: Placement<'_, '_>,
) -> PyResult<Py<PyArray>> {
    let layout = Layout::contiguous(dtype, shape, 0).py()?;
    let buffer = crate::buffer::methods::alloc(
        py,
        layout.nbytes(),
        at.kind.unwrap_or("shared"),
        at.device,
        false,
        at.mr,
        at.stream,
    )?;
    let bytes = buffer.bind(py).as_super().get();
    let array = Array::new(bytes.array(py)?.buffer().clone(), layout).py()?;
    PyArray::wrap(py, array, bytes.queue.clone_ref(py))
}

fn fill(py: Python<'_>, array: &Py<PyArray>, value: Scalar) -> PyResult<()> {
    let open = array.get().array(py)?;
    let target: &Array = &open;
    py.detach(|| target.fill_with(value)).py()
}

fn dtype_or(dtype: Option<&Bound<'_, PyAny>>, default: DType) -> PyResult<DType> {
    dtype
        .filter(|dtype| !dtype.is_none())
        .map_or(Ok(default), crate::values::dtypes::from_python)
}

/// `devbuf.empty(shape, dtype=float64, *, kind="shared", device=None, stream=None, mr=None)`:
/// an uninitialised C-contiguous array, allocated as `devbuf.alloc` allocates its bytes.
#[pyfunction]
#[pyo3(signature = (shape, dtype = None, *, kind = None, device = None, stream = None, mr = None))]
pub(crate) fn empty<'py>(
    py: Python<'py>,
    shape: &Bound<'py, PyAny>,
    dtype: Option<&Bound<'py, PyAny>>,
    kind: Option<&str>,
    device: Option<&Bound<'py, PyAny>>,
    stream: Option<StreamArg<'py>>,
    mr: Option<&Bound<'py, PyAny>>,
) -> PyResult<Py<PyArray>> {
    let stream = stream.as_deref();
    let at = Placement {
        kind,
        device,
        stream,
        mr,
    };
    allocate(
        py,
        &shape_argument(shape)?,
        dtype_or(dtype, DType::FLOAT64)?,
        at,
    )
}

/// `devbuf.zeros(...)`: `empty` with every byte zero (one fill on the device).
#[pyfunction]
#[pyo3(signature = (shape, dtype = None, *, kind = None, device = None, stream = None, mr = None))]
pub(crate) fn zeros<'py>(
    py: Python<'py>,
    shape: &Bound<'py, PyAny>,
    dtype: Option<&Bound<'py, PyAny>>,
    kind: Option<&str>,
    device: Option<&Bound<'py, PyAny>>,
    stream: Option<StreamArg<'py>>,
    mr: Option<&Bound<'py, PyAny>>,
) -> PyResult<Py<PyArray>> {
    let array = empty(py, shape, dtype, kind, device, stream, mr)?;
    fill(py, &array, Scalar::Int(0))?;
    Ok(array)
}

/// `devbuf.ones(...)`: `empty` with every element one (as `full(shape, 1, dtype)`).
#[pyfunction]
#[pyo3(signature = (shape, dtype = None, *, kind = None, device = None, stream = None, mr = None))]
pub(crate) fn ones<'py>(
    py: Python<'py>,
    shape: &Bound<'py, PyAny>,
    dtype: Option<&Bound<'py, PyAny>>,
    kind: Option<&str>,
    device: Option<&Bound<'py, PyAny>>,
    stream: Option<StreamArg<'py>>,
    mr: Option<&Bound<'py, PyAny>>,
) -> PyResult<Py<PyArray>> {
    let array = empty(py, shape, dtype, kind, device, stream, mr)?;
    fill(py, &array, Scalar::Int(1))?;
    Ok(array)
}

/// `devbuf.full(shape, fill_value, dtype=None, ...)`: every element `fill_value`, converted as
/// NumPy's `full` converts a Python scalar; without `dtype`, the value's own (bool, int64,
/// float64, complex128).
#[pyfunction]
#[pyo3(signature = (shape, fill_value, dtype = None, *, kind = None, device = None, stream = None, mr = None))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn full<'py>(
    py: Python<'py>,
    shape: &Bound<'py, PyAny>,
    fill_value: &Bound<'py, PyAny>,
    dtype: Option<&Bound<'py, PyAny>>,
    kind: Option<&str>,
    device: Option<&Bound<'py, PyAny>>,
    stream: Option<StreamArg<'py>>,
    mr: Option<&Bound<'py, PyAny>>,
) -> PyResult<Py<PyArray>> {
    let stream = stream.as_deref();
    let value = crate::values::literals::scalar(fill_value, "fill_value")?;
    let dtype = dtype_or(dtype, value.default_dtype())?;
    // Refused values are refused before anything is allocated.
    dtype.encode(value).py()?;
    let at = Placement {
        kind,
        device,
        stream,
        mr,
    };
    let array = allocate(py, &shape_argument(shape)?, dtype, at)?;
    fill(py, &array, value)?;
    Ok(array)
}

/// `devbuf.empty_like(prototype, dtype=None, *, kind=None, device=None, stream=None, mr=None)`:
/// `empty` with the shape of `prototype` (anything `devbuf.asarray` takes), and by default its
/// dtype, its kind of memory and its stream (its device once that stream was closed), unless
/// `stream` or `mr` names where to allocate.
#[pyfunction]
#[pyo3(signature = (prototype, dtype = None, *, kind = None, device = None, stream = None, mr = None))]
pub(crate) fn empty_like<'py>(
    py: Python<'py>,
    prototype: &Bound<'py, PyAny>,
    dtype: Option<&Bound<'py, PyAny>>,
    kind: Option<&str>,
    device: Option<&Bound<'py, PyAny>>,
    stream: Option<StreamArg<'py>>,
    mr: Option<&Bound<'py, PyAny>>,
) -> PyResult<Py<PyArray>> {
    let stream = stream.as_deref();
    let prototype = crate::import::import_object(py, prototype, false, true)?;
    let this = prototype.get();
    let open = this.array(py)?;
    let (shape, own_dtype) = (open.layout().shape().to_vec(), open.layout().dtype());
    let own_kind = match open.buffer().kind() {
        MemKind::Unknown => None,
        kind => Some(kind.as_str()),
    };
    drop(open);
    // The prototype's stream, or its device once that stream was closed (the memory outlives it).
    let own_queue = this.queue.bind(py);
    let own_place = match own_queue.get().queue() {
        Ok(_) => own_queue.clone().into_any(),
        Err(_) => own_queue.get().device.bind(py).clone().into_any(),
    };
    let device = match device {
        None if stream.is_none() && mr.is_none() => Some(&own_place),
        device => device,
    };
    let at = Placement {
        kind: kind.or(own_kind),
        device,
        stream,
        mr,
    };
    allocate(py, &shape, dtype_or(dtype, own_dtype)?, at)
}

/// `devbuf.zeros_like(...)`: `empty_like` with every byte zero.
#[pyfunction]
#[pyo3(signature = (prototype, dtype = None, *, kind = None, device = None, stream = None, mr = None))]
pub(crate) fn zeros_like<'py>(
    py: Python<'py>,
    prototype: &Bound<'py, PyAny>,
    dtype: Option<&Bound<'py, PyAny>>,
    kind: Option<&str>,
    device: Option<&Bound<'py, PyAny>>,
    stream: Option<StreamArg<'py>>,
    mr: Option<&Bound<'py, PyAny>>,
) -> PyResult<Py<PyArray>> {
    let array = empty_like(py, prototype, dtype, kind, device, stream, mr)?;
    fill(py, &array, Scalar::Int(0))?;
    Ok(array)
}

/// `devbuf.ones_like(...)`: `empty_like` with every element one.
#[pyfunction]
#[pyo3(signature = (prototype, dtype = None, *, kind = None, device = None, stream = None, mr = None))]
pub(crate) fn ones_like<'py>(
    py: Python<'py>,
    prototype: &Bound<'py, PyAny>,
    dtype: Option<&Bound<'py, PyAny>>,
    kind: Option<&str>,
    device: Option<&Bound<'py, PyAny>>,
    stream: Option<StreamArg<'py>>,
    mr: Option<&Bound<'py, PyAny>>,
) -> PyResult<Py<PyArray>> {
    let array = empty_like(py, prototype, dtype, kind, device, stream, mr)?;
    fill(py, &array, Scalar::Int(1))?;
    Ok(array)
}

/// The array `asarray(obj)` makes of a Python scalar or nested sequence: `dtype` (by default
/// the array API's for the values), allocated as `empty` allocates (`kind` and `device`), the
/// values copied in.
pub(crate) fn from_literal<'py>(
    py: Python<'py>,
    literal: &Literal,
    dtype: Option<DType>,
    kind: Option<&str>,
    device: Option<&Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyArray>> {
    let shape = literal.shape("obj").py()?;
    let dtype = dtype.unwrap_or_else(|| literal.default_dtype());
    let bytes = literal.encode(dtype, "obj").py()?;
    let at = Placement {
        kind,
        device,
        stream: None,
        mr: None,
    };
    let array = allocate(py, &shape, dtype, at)?;
    {
        let open = array.get().array(py)?;
        let target: &Array = &open;
        py.detach(|| target.buffer().copy_from_host(&bytes)).py()?;
    }
    Ok(array.into_bound(py))
}

/// Adds the functions to the module.
pub(crate) fn register(module: &Bound<'_, PyModule>) -> PyResult<()> {
    module.add_function(wrap_pyfunction!(empty, module)?)?;
    module.add_function(wrap_pyfunction!(zeros, module)?)?;
    module.add_function(wrap_pyfunction!(ones, module)?)?;
    module.add_function(wrap_pyfunction!(full, module)?)?;
    module.add_function(wrap_pyfunction!(empty_like, module)?)?;
    module.add_function(wrap_pyfunction!(zeros_like, module)?)?;
    module.add_function(wrap_pyfunction!(ones_like, module)?)?;
    Ok(())
}
