//! Element types as Python sees them. `Array.dtype` is a `numpy.dtype`, so that it compares equal
//! to NumPy's dtypes, scalar types and names (`arr.dtype == np.float32`, `== "float32"`), as
//! CuPy's and dpnp's do; every `dtype` argument takes what `numpy.dtype()` takes. Without NumPy
//! (or, for bfloat16, without `ml_dtypes`) the name stands in. The typestr is what crosses into
//! core, which parses it.

use devbuf::DType;
use parking_lot::Mutex;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyString, PyType};
use pyo3::{IntoPyObjectExt, intern};

/// The Python object of each element type handed out so far (a few dozen at most).
type Objects = Mutex<Vec<(DType, Py<PyAny>)>>;
static OBJECTS: PyOnceLock<Objects> = PyOnceLock::new();

/// `numpy.dtype`, or None where NumPy cannot be imported.
fn numpy_dtype(py: Python<'_>) -> Option<&Bound<'_, PyType>> {
    static NUMPY_DTYPE: PyOnceLock<Option<Py<PyType>>> = PyOnceLock::new();
    NUMPY_DTYPE
        .get_or_init(py, || {
            let numpy = py.import("numpy").ok()?;
            numpy
                .getattr("dtype")
                .ok()?
                .cast_into::<PyType>()
                .ok()
                .map(Bound::unbind)
        })
        .as_ref()
        .map(|dtype| dtype.bind(py))
}

/// `ml_dtypes.bfloat16` (NumPy has no bfloat16 of its own), or None where it cannot be imported.
fn ml_bfloat16(py: Python<'_>) -> Option<&Bound<'_, PyAny>> {
    static BFLOAT16: PyOnceLock<Option<Py<PyAny>>> = PyOnceLock::new();
    BFLOAT16
        .get_or_init(py, || {
            let ml_dtypes = py.import("ml_dtypes").ok()?;
            ml_dtypes.getattr("bfloat16").ok().map(Bound::unbind)
        })
        .as_ref()
        .map(|bfloat16| bfloat16.bind(py))
}

/// `dtype` as `Array.dtype` returns it: a `numpy.dtype`, else its name.
pub(crate) fn to_python(py: Python<'_>, dtype: DType) -> PyResult<Py<PyAny>> {
    let objects = OBJECTS.get_or_init(py, Default::default);
    if let Some((_, object)) = objects.lock().iter().find(|(known, _)| *known == dtype) {
        return Ok(object.clone_ref(py));
    }
    // Made unlocked: importing NumPy runs Python code, which may ask for a dtype itself.
    let object = match (numpy_dtype(py), dtype.typestr(), ml_bfloat16(py)) {
        (Some(numpy), Ok(typestr), _) => numpy.call1((typestr,))?.unbind(),
        (Some(numpy), Err(_), Some(bfloat16)) if dtype == DType::BFLOAT16 => {
            numpy.call1((bfloat16,))?.unbind()
        }
        _ => PyString::new(py, dtype.name()).into_py_any(py)?,
    };
    objects.lock().push((dtype, object.clone_ref(py)));
    Ok(object)
}

/// A `dtype` argument: a name or typestr ("float32", "<f4", "f4", "bfloat16"), or anything
/// `numpy.dtype()` takes (`np.float32`, `np.dtype("<f4")`, `float`).
pub(crate) fn from_python(value: &Bound<'_, PyAny>) -> PyResult<DType> {
    let py = value.py();
    let name = value
        .cast::<PyString>()
        .ok()
        .map(|name| name.to_cow())
        .transpose()?;
    if let Some(name) = &name
        && let Ok(dtype) = DType::parse(name)
    {
        return Ok(dtype);
    }
    let unknown = || {
        let what = value.repr().map_or_else(|_| "?".into(), |r| r.to_string());
        match &name {
            Some(_) => PyValueError::new_err(format!(
                "dtype: {what} is not a data type devbuf knows (e.g. \"float32\", \"<f4\", np.float32)"
            )),
            None => PyTypeError::new_err(format!(
                "dtype: expected a data type (a name such as \"float32\", a NumPy dtype or scalar \
                 type), got {what} of type {}",
                value.get_type()
            )),
        }
    };
    let numpy = numpy_dtype(py).ok_or_else(unknown)?;
    let dtype = numpy.call1((value,)).map_err(|_| unknown())?;
    if let Some(bfloat16) = ml_bfloat16(py)
        && dtype.eq(numpy.call1((bfloat16,))?)?
    {
        return Ok(DType::BFLOAT16);
    }
    let typestr: String = dtype.getattr(intern!(py, "str"))?.extract()?;
    DType::from_typestr(&typestr).map_err(|_| {
        PyValueError::new_err(format!(
            "dtype: NumPy's {} is not a type devbuf supports (bool, int8-int64, uint8-uint64, \
             float16-float64, complex64, complex128, bfloat16)",
            dtype
                .repr()
                .map_or_else(|_| typestr.clone(), |r| r.to_string())
        ))
    })
}
