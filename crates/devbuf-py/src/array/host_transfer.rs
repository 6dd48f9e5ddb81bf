//! Explicit device-to-host transfers: `Array.get()` / `Array.copy_to_host()` return NumPy arrays,
//! and `Array.__array__` refuses memory the host cannot read, naming them, as CuPy, PyTorch and
//! dpctl refuse an implicit conversion (NumPy would otherwise wrap the Array in a 0-d object array).
//! Nothing in the crate depends on this module.

use pyo3::buffer::PyBuffer;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::errors::IntoPyResult;
use crate::objects::array::PyArray;
use crate::objects::queue::PyQueue;

/// `Array.get(stream=None, out=None)`: the elements, copied into a new NumPy array (or into
/// `out`, a writable C-contiguous NumPy array of the same shape and dtype, or a writable
/// bytes-like object of the same size in bytes), on `stream` (default:
/// the array's own queue); returns once the copy is done.
pub(crate) fn to_numpy<'py>(
    slf: &Bound<'py, PyArray>,
    out: Option<&Bound<'py, PyAny>>,
    stream: Option<&Bound<'py, PyQueue>>,
) -> PyResult<Bound<'py, PyAny>> {
    let py = slf.py();
    let this = slf.get();
    let array = this.array(py)?;
    let numpy = py.import(intern!(py, "numpy"))?;
    let dtype = crate::values::dtypes::to_python(py, array.layout().dtype())?;
    let current = match stream {
        None => {
            crate::objects::current_stream::current_on(py, Some(&array.buffer().device().selector))
        }
        Some(_) => None,
    };
    let queue = match stream.or(current.as_ref()) {
        Some(stream) => stream.get().queue()?.clone(),
        None => array.buffer().queue().clone(),
    };
    let layout = array.layout();
    let target = match out {
        Some(out) => checked_out(slf, out)?,
        None => numpy.call_method1(intern!(py, "empty"), (layout.shape().to_vec(), dtype))?,
    };
    if layout.size() == 0 {
        return Ok(target);
    }
    if layout.is_c_contiguous() {
        let source = this.contiguous_bytes(py, "get")?;
        write_into(py, &target, |dst| source.copy_to_host_on(dst, &queue))?;
        return Ok(target);
    }
    // Strided: only the elements' bytes move, straight into NumPy's memory (one 2-D copy where
    // the runtime has one).
    let source: &devbuf::Array = &array;
    write_into(py, &target, |dst| {
        source.copy_elements_to_host_on(dst, &queue)
    })?;
    Ok(target)
}

/// `out` when it is a NumPy array of the array's shape and dtype, or another writable bytes-like
/// object (a `bytearray`, a memoryview) of the array's size in bytes, as RMM's `copy_to_host`
/// takes: a TypeError or ValueError naming `out` otherwise.
fn checked_out<'py>(
    slf: &Bound<'py, PyArray>,
    out: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyAny>> {
    let py = slf.py();
    let ndarray = py.import(intern!(py, "numpy"))?.getattr("ndarray")?;
    let array = slf.get().array(py)?;
    let layout = array.layout();
    if !out.is_instance(&ndarray)? {
        let unfit = |what: String| {
            PyValueError::new_err(format!(
                "out: expected a writable, contiguous object of {} bytes (this array's), got {what}",
                layout.nbytes()
            ))
        };
        let bytes = match PyBuffer::<u8>::get(out) {
            Ok(bytes) => bytes,
            // Another format: its bytes, where they are contiguous.
            Err(_) => {
                let view = pyo3::types::PyMemoryView::from(out).map_err(|_| {
                    PyTypeError::new_err(format!(
                        "out: expected a numpy.ndarray or a writable bytes-like object, got {}",
                        out.get_type()
                    ))
                })?;
                let cast = view
                    .call_method1(intern!(py, "cast"), ("B",))
                    .map_err(|_| unfit(format!("a non-contiguous {}", out.get_type())))?;
                PyBuffer::<u8>::get(&cast)?
            }
        };
        if bytes.readonly() || !bytes.is_c_contiguous() || bytes.len_bytes() != layout.nbytes() {
            let readonly = if bytes.readonly() { "read-only " } else { "" };
            return Err(unfit(format!(
                "a {readonly}{} of {} bytes",
                out.get_type(),
                bytes.len_bytes()
            )));
        }
        return Ok(out.clone());
    }
    let dtype = crate::values::dtypes::to_python(py, layout.dtype())?;
    let shape: Vec<usize> = out.getattr("shape")?.extract()?;
    if shape != layout.shape() || !out.getattr("dtype")?.eq(&dtype)? {
        return Err(PyValueError::new_err(format!(
            "out: a {:?} array of {} does not match this array's shape {:?} and dtype {}",
            shape,
            out.getattr("dtype")?,
            layout.shape(),
            layout.dtype()
        )));
    }
    Ok(out.clone())
}

/// Runs `copy` on `target`'s memory, a writable C-contiguous host array, with the GIL released:
/// `copy` writes it and returns once done.
fn write_into(
    py: Python<'_>,
    target: &Bound<'_, PyAny>,
    copy: impl FnOnce(&mut [u8]) -> devbuf::Result<()> + Send,
) -> PyResult<()> {
    let memoryview = py
        .import(intern!(py, "builtins"))?
        .getattr(intern!(py, "memoryview"))?;
    let bytes = match memoryview.call1((target,)) {
        Ok(view) => view.call_method1(intern!(py, "cast"), ("B",))?,
        // A type without a buffer format (bfloat16): the same memory, seen as bytes.
        Err(_) => memoryview.call1((bytes_of(target)?,))?,
    };
    let view = PyBuffer::<u8>::get(&bytes)?;
    if view.readonly() || !view.is_c_contiguous() {
        return Err(PyValueError::new_err(
            "out: the array must be writable and C-contiguous",
        ));
    }
    let (ptr, len) = (view.buf_ptr() as usize, view.len_bytes());
    let copied = py.detach(|| {
        // SAFETY: the view holds the target's writable, contiguous `len` bytes for as long as we
        // hold `view`, which outlives the copy (`copy` waits for it).
        let dst = unsafe { std::slice::from_raw_parts_mut(ptr as *mut u8, len) };
        copy(dst)
    });
    if copied.is_err() {
        // The copy may still be writing into the target: it stays alive.
        std::mem::forget(view);
    }
    copied.py()
}

/// The bytes of `target`, a NumPy array whose type has no buffer format: its C-contiguous
/// memory seen as `uint8` (NumPy makes that view without copying; a ValueError names `out`
/// otherwise).
fn bytes_of<'py>(target: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    let py = target.py();
    let contiguous: bool = target
        .getattr(intern!(py, "flags"))?
        .getattr(intern!(py, "c_contiguous"))?
        .extract()?;
    if !contiguous {
        return Err(PyValueError::new_err(
            "out: the array must be writable and C-contiguous",
        ));
    }
    target
        .call_method1(intern!(py, "reshape"), (-1,))?
        .call_method1(intern!(py, "view"), ("u1",))
}

/// `Array.__array__(dtype=None, copy=None)`: NumPy's view of host-accessible memory (through the
/// buffer protocol), and a TypeError naming the explicit ways for memory the host cannot read.
pub(crate) fn numpy_view<'py>(
    slf: &Bound<'py, PyArray>,
    dtype: Option<&Bound<'py, PyAny>>,
    copy: Option<bool>,
) -> PyResult<Bound<'py, PyAny>> {
    let py = slf.py();
    let array = slf.get().array(py)?;
    let buffer = array.buffer();
    if !buffer.is_host_accessible() {
        return Err(PyTypeError::new_err(format!(
            "implicit conversion of {} memory on {:?} to a NumPy array is not allowed: the host \
             cannot read it. Copy it explicitly with Array.get() (or copy_to_host())",
            buffer.kind(),
            buffer.device().selector
        )));
    }
    let kwargs = PyDict::new(py);
    kwargs.set_item("dtype", dtype)?;
    kwargs.set_item("copy", copy)?;
    let view = py
        .import(intern!(py, "builtins"))?
        .getattr(intern!(py, "memoryview"))?
        .call1((slf,))?;
    py.import(intern!(py, "numpy"))?
        .getattr(intern!(py, "array"))?
        .call((view,), Some(&kwargs))
}
