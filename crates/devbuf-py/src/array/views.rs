//! `Array`'s views and copies as NumPy, CuPy and the array API spell them: `x[...]` (basic
//! indexing), `reshape`, `T` / `transpose`, `view(dtype)`, iteration, `copy()` and
//! `to_device()`. Python values are
//! translated here; what they mean (slice positions, strides, when a reshape is a view) is
//! `devbuf::Layout`'s.

use devbuf::{Array, Index, Layout, MemKind};
use pyo3::exceptions::{PyIndexError, PyTypeError, PyValueError};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyEllipsis, PyInt, PySlice, PyTuple};
use smallvec::SmallVec;

use crate::errors::IntoPyResult;
use crate::objects::array::PyArray;

/// A view of `array`'s memory through `layout` (checked to fit), on the same queue.
fn view(array: &Bound<'_, PyArray>, layout: Layout) -> PyResult<Py<PyArray>> {
    let py = array.py();
    let this = array.get();
    let buffer = this.array(py)?.buffer().clone();
    let made = PyArray::wrap(
        py,
        Array::new(buffer, layout).py()?,
        this.queue.clone_ref(py),
    )?;
    made.get().inherit_readonly_origin(py, this);
    Ok(made)
}

/// `x[key]`: ints, slices (any step), `...` and `None`, alone or in a tuple; a view.
pub(crate) fn getitem(array: &Bound<'_, PyArray>, key: &Bound<'_, PyAny>) -> PyResult<Py<PyArray>> {
    let layout = array
        .get()
        .array(array.py())?
        .layout()
        .index(&basic_index(key)?)
        .py()?;
    view(array, layout)
}

/// A basic index (`x[key]`'s key) as core takes it.
pub(crate) fn basic_index(key: &Bound<'_, PyAny>) -> PyResult<SmallVec<[Index; 4]>> {
    match key.cast::<PyTuple>() {
        Ok(tuple) => tuple.iter().map(|entry| index_entry(&entry)).collect(),
        Err(_) => Ok(smallvec::smallvec![index_entry(key)?]),
    }
}

/// One entry of an index as core takes it.
fn index_entry(entry: &Bound<'_, PyAny>) -> PyResult<Index> {
    if entry.is_none() {
        return Ok(Index::NewAxis);
    }
    if entry.is_instance_of::<PyEllipsis>() {
        return Ok(Index::Ellipsis);
    }
    if let Ok(slice) = entry.cast::<PySlice>() {
        let bound = |name: &str| -> PyResult<Option<isize>> {
            let value = slice.getattr(name)?;
            if value.is_none() {
                return Ok(None);
            }
            position(&value, "index").map(Some)
        };
        return Ok(Index::Slice {
            start: bound("start")?,
            stop: bound("stop")?,
            step: bound("step")?,
        });
    }
    if entry.is_instance_of::<PyBool>() {
        return Err(PyTypeError::new_err(
            "index: a bool is not a position (NumPy reads it as a mask, and devbuf has no \
             boolean or fancy indexing); use 0 or 1",
        ));
    }
    match entry.extract::<isize>() {
        Ok(at) => Ok(Index::At(at)),
        Err(_) if entry.is_instance_of::<PyInt>() => Err(PyIndexError::new_err(format!(
            "index: {entry} is out of bounds for any array"
        ))),
        Err(_) => Err(PyTypeError::new_err(format!(
            "index: {} is not a basic index; devbuf takes ints, slices, ... and None (no \
             fancy or boolean indexing: it does no arithmetic on elements)",
            entry.get_type().name()?
        ))),
    }
}

/// A slice bound or an axis as an `isize`: any int (`__index__`), clamped where Python's own
/// slices clamp it (a bound past the address space is past every array's end).
fn position(value: &Bound<'_, PyAny>, key: &str) -> PyResult<isize> {
    match value.extract::<isize>() {
        Ok(n) => Ok(n),
        Err(_) if value.is_instance_of::<PyInt>() => {
            let negative = value.lt(0)?;
            Ok(if negative { isize::MIN } else { isize::MAX })
        }
        Err(_) => Err(PyTypeError::new_err(format!(
            "{key}: slice bounds must be ints or None, not {}",
            value.get_type().name()?
        ))),
    }
}

/// The ints of `x.reshape(2, 3)` / `x.reshape((2, 3))` / `x.transpose(1, 0)`: one sequence, or
/// the arguments themselves.
fn int_arguments(arguments: &Bound<'_, PyTuple>, key: &str) -> PyResult<Vec<isize>> {
    let values = match arguments.len() {
        1 if !arguments.get_item(0)?.is_instance_of::<PyInt>() => arguments.get_item(0)?,
        _ => arguments.clone().into_any(),
    };
    values
        .try_iter()
        .and_then(|items| items.map(|item| item?.extract::<isize>()).collect())
        .map_err(|_| {
            PyTypeError::new_err(format!(
                "{key}: expected ints or one sequence of ints, got {}",
                arguments
                    .repr()
                    .map_or_else(|_| "?".into(), |r| r.to_string())
            ))
        })
}

/// `x.reshape(*shape, copy=None)`: a view where the strides allow; else a C-contiguous copy
/// (`copy=None`), a ValueError (`copy=False`); `copy=True` always copies (NumPy 2's rule).
pub(crate) fn reshape(
    array: &Bound<'_, PyArray>,
    shape: &Bound<'_, PyTuple>,
    copy: Option<bool>,
) -> PyResult<Py<PyArray>> {
    let py = array.py();
    if shape.is_empty() {
        // As NumPy's: a shape is required (`x.reshape(())` asks for a 0-d array).
        return Err(PyTypeError::new_err(
            "shape: reshape takes a shape, as ints or one sequence",
        ));
    }
    let requested = int_arguments(shape, "shape")?;
    let open = array.get().array(py)?;
    let layout = open.layout();
    let shape = layout.resolve_shape(&requested).py()?;
    if copy != Some(true)
        && let Some(reshaped) = layout.reshaped(&shape)
    {
        drop(open);
        return view(array, reshaped);
    }
    if copy == Some(false) {
        return Err(PyValueError::new_err(format!(
            "copy: an array of byte strides {:?} cannot be seen as shape {:?} without copying, \
             and copy=False forbids the copy",
            layout.strides(),
            shape.as_slice()
        )));
    }
    drop(open);
    let copied = compact_copy(array)?;
    let copied_array = copied.bind(py);
    let layout =
        Layout::contiguous(copied_array.get().array(py)?.layout().dtype(), &shape, 0).py()?;
    view(copied_array, layout)
}

/// `x.transpose(*axes)`, and `x.T` (no axes: reversed).
pub(crate) fn transpose(
    array: &Bound<'_, PyArray>,
    axes: &Bound<'_, PyTuple>,
) -> PyResult<Py<PyArray>> {
    // `x.transpose(None)` reverses the dimensions, as NumPy's does.
    let reversed = axes.is_empty() || (axes.len() == 1 && axes.get_item(0)?.is_none());
    let axes = if reversed {
        None
    } else {
        Some(int_arguments(axes, "axes")?)
    };
    let layout = array
        .get()
        .array(array.py())?
        .layout()
        .transpose(axes.as_deref())
        .py()?;
    view(array, layout)
}

/// `x.copy()`: a C-contiguous, writable copy on the same device, of the same kind of memory
/// where the device allocates it (imported memory it cannot classify becomes device memory,
/// or host memory when the host could read it).
pub(crate) fn compact_copy(array: &Bound<'_, PyArray>) -> PyResult<Py<PyArray>> {
    let py = array.py();
    let this = array.get();
    let open = this.array(py)?;
    let queue = this.queue.get().held();
    let kind = match open.buffer().kind() {
        kind @ (MemKind::Host | MemKind::Device | MemKind::Shared) if queue.supports(kind) => kind,
        _ if open.buffer().is_host_accessible() && queue.supports(MemKind::Host) => MemKind::Host,
        _ => MemKind::Device,
    };
    let source: &Array = &open;
    let copy = py.detach(|| source.compact_copy(queue, kind)).py()?;
    PyArray::wrap(py, copy, this.queue.clone_ref(py))
}

#[pymethods]
impl PyArray {
    /// The same bytes seen as `dtype` elements (anything `numpy.dtype()` takes), NumPy's
    /// `ndarray.view(dtype)`: the offset and strides stay, and with another item size the last
    /// axis, which must be contiguous, holds as many new elements as its bytes make (a 0-d array
    /// keeps its item size). A view: nothing is copied or converted.
    fn view(slf: &Bound<'_, Self>, dtype: &Bound<'_, PyAny>) -> PyResult<Py<PyArray>> {
        let dtype = crate::values::dtypes::from_python(dtype)?;
        let layout = slf.get().array(slf.py())?.layout().with_dtype(dtype).py()?;
        view(slf, layout)
    }

    /// The views `x[0]`, `x[1]`, ... along the first dimension, as iterating a NumPy array
    /// yields them (each a 0-d array for a 1-d array: its element stays on the device); a 0-d
    /// array is not iterable (TypeError), as NumPy's, CuPy's and PyTorch's are not.
    fn __iter__<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        let py = slf.py();
        let Some(&n) = slf.get().array(py)?.layout().shape().first() else {
            return Err(PyTypeError::new_err("iteration over a 0-d array"));
        };
        let builtins = py.import(intern!(py, "builtins"))?;
        let positions = builtins.getattr(intern!(py, "range"))?.call1((n,))?;
        builtins
            .getattr(intern!(py, "map"))?
            .call1((slf.getattr(intern!(py, "__getitem__"))?, positions))
    }
}
