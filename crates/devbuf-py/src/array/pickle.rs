//! Pickling: `Array.__reduce_ex__` and `_rebuild`, which makes the array again in the receiving
//! process.
//!
//! An array pickles the buffer it views (`arr.buffer`, whole) with its device, kind, read-only
//! flag and, for a typed array, dtype, shape, strides and offset. With protocol 5, host-accessible
//! memory travels out-of-band as a `PickleBuffer` over the memory itself (no copy when the pickler
//! takes buffers out-of-band); device memory, and every protocol below 5, is copied to the host.
//! The receiving side allocates on the same device and kind when it has them, else on the default
//! device, else on the host, with a `DeviceFallbackWarning`. Like NumPy, bytes that land in host
//! memory are viewed, not copied: the result is read-only when they are (an out-of-band buffer
//! from a read-only store such as Ray's).

// Caller numbers become addresses here: every size, count, offset and alignment is checked
// (docs/architecture.md, "Untrusted numbers").
#![deny(clippy::arithmetic_side_effects)]

use devbuf::{Array, Buffer, DType, Layout, MemKind, Owner};
use pyo3::exceptions::{PyRuntimeWarning, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyByteArray, PyTuple};
use pyo3::{create_exception, ffi};

use crate::errors::IntoPyResult;
use crate::objects::array::{PyArray, PyBuffer};
use crate::objects::python_owner::HeldBuffer;
use crate::objects::queue::{PyQueue, host_memory_queue, shared_queue};

create_exception!(
    devbuf,
    DeviceFallbackWarning,
    PyRuntimeWarning,
    "An unpickled buffer could not be placed on the device it came from and was placed on the \
     default device, or the host, instead."
);

/// Version of the pickled form `_rebuild` reads.
const FORMAT: u32 = 1;

/// `(dtype, shape, strides, offset)` of a typed array; `None` for a Buffer.
type ViewState = Option<(String, Vec<usize>, Vec<isize>, usize)>;
/// `(format, device selector, kind, read-only, view)`.
type State = (u32, String, String, bool, ViewState);

/// `__reduce_ex__(protocol)`: `(_rebuild, (data, state))`.
pub(crate) fn reduce_ex<'py>(
    array: &Bound<'py, PyArray>,
    protocol: i64,
) -> PyResult<Bound<'py, PyTuple>> {
    let py = array.py();
    let open = array.get().array(py)?;
    let buffer = open.buffer();
    let layout = open.layout();
    let readonly = open.readonly();
    let view: ViewState = if array.is_instance_of::<PyBuffer>() {
        None
    } else {
        let dtype = layout.dtype();
        Some((
            dtype.typestr().unwrap_or(dtype.name()).to_string(),
            layout.shape().to_vec(),
            layout.strides().to_vec(),
            layout.offset(),
        ))
    };
    // Foreign memory of unknown kind is re-made as the nearest kind that can be allocated.
    let kind = match buffer.kind() {
        MemKind::Unknown if buffer.is_host_accessible() => MemKind::Host,
        MemKind::Unknown => MemKind::Device,
        kind => kind,
    };
    let state: State = (
        FORMAT,
        buffer.device().selector.clone(),
        kind.as_str().to_string(),
        readonly,
        view,
    );
    let data = if buffer.is_host_accessible() && protocol >= 5 {
        // The whole buffer as bytes: its buffer protocol is the memory itself.
        let bytes = PyBuffer::wrap_readonly(
            py,
            buffer.clone(),
            array.get().queue.clone_ref(py),
            readonly,
        )?;
        pickle_buffer(py)?.call1((bytes,))?
    } else {
        // A bytearray, so that the copy unpickles writable (pickle keeps it one in-band too).
        let copy = PyByteArray::new_with(py, buffer.len(), |out| {
            py.detach(|| buffer.copy_to_host(out)).py()
        })?;
        if protocol >= 5 {
            pickle_buffer(py)?.call1((copy,))?
        } else {
            copy.into_any()
        }
    };
    static REBUILD: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    let rebuild = REBUILD.import(py, "devbuf._devbuf", "_rebuild")?;
    PyTuple::new(
        py,
        [
            rebuild.clone(),
            PyTuple::new(py, [data, state.into_pyobject(py)?.into_any()])?.into_any(),
        ],
    )
}

/// `pickle.PickleBuffer`.
fn pickle_buffer(py: Python<'_>) -> PyResult<&Bound<'_, PyAny>> {
    static PICKLE_BUFFER: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    PICKLE_BUFFER.import(py, "pickle", "PickleBuffer")
}

/// Makes an array pickled by `Array.__reduce_ex__` again: `data` is its buffer's bytes (any
/// object with the buffer protocol), `state` the rest.
#[pyfunction]
pub(crate) fn _rebuild<'py>(
    py: Python<'py>,
    data: &Bound<'py, PyAny>,
    state: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyArray>> {
    let (format, device, kind, readonly, view): State = state.extract().map_err(|_| {
        PyTypeError::new_err(format!(
            "devbuf pickle: state: expected (format, device, kind, readonly, view), got {}",
            state.repr().map_or_else(|_| "?".into(), |r| r.to_string())
        ))
    })?;
    if format != FORMAT {
        return Err(PyValueError::new_err(format!(
            "devbuf pickle: format: version {format} is not the {FORMAT} this devbuf reads"
        )));
    }
    // Only allocatable kinds parse: reduce_ex writes "unknown" memory as its nearest such kind.
    let kind: MemKind = kind.parse().py()?;
    let layout = view
        .map(|(dtype, shape, strides, offset)| {
            let dtype = DType::parse(&dtype)?;
            Layout::new(dtype, &shape, Some(&strides), offset, readonly)
        })
        .transpose()
        .py()?;
    let queue = target_queue(py, &device, kind)?;
    let held = held_bytes(py, data)?;
    let (ptr, len, data_readonly) = (
        held.0.buf as usize,
        held.0.len as usize,
        held.0.readonly != 0,
    );
    let alignment = layout
        .as_ref()
        .map_or(1, |layout| layout.dtype().alignment());
    let target = queue.get().queue()?;
    let buffer = if target.reaches_any_host_memory() && ptr.is_multiple_of(alignment) {
        // SAFETY: the held Py_buffer keeps `len` bytes at `ptr` alive and unmoved until the
        // owner drops it; a queue that reaches any host memory reaches it.
        unsafe {
            Buffer::from_foreign(
                target.clone(),
                ptr as *mut u8,
                len,
                kind,
                Owner::keep_alive(held),
            )
        }
    } else {
        let copy = py.detach(|| Buffer::alloc(target, kind, len)).py()?;
        // SAFETY: the held Py_buffer keeps `len` bytes at `ptr` readable until it is dropped,
        // after the copy.
        let bytes = unsafe { std::slice::from_raw_parts(ptr as *const u8, len) };
        py.detach(|| copy.copy_from_host(bytes)).py()?;
        drop(held);
        copy
    };
    // Zero-copy views of read-only bytes stay read-only, as NumPy's do.
    let readonly = readonly || (data_readonly && !buffer.is_owned());
    match layout {
        None => Ok(PyBuffer::wrap_readonly(py, buffer, queue, readonly)?
            .into_bound(py)
            .into_super()),
        Some(layout) => {
            let array = Array::new(buffer, layout.into_readonly(readonly)).py()?;
            Ok(PyArray::wrap(py, array, queue)?.into_bound(py))
        }
    }
}

/// A contiguous, held buffer-protocol view of `data`.
fn held_bytes(py: Python<'_>, data: &Bound<'_, PyAny>) -> PyResult<HeldBuffer> {
    // SAFETY: an all-zero Py_buffer is a valid "empty" value for PyObject_GetBuffer to fill.
    let mut view: Box<ffi::Py_buffer> = Box::new(unsafe { std::mem::zeroed() });
    // SAFETY: `data` is live and `view` is writable.
    if unsafe { ffi::PyObject_GetBuffer(data.as_ptr(), &mut *view, ffi::PyBUF_C_CONTIGUOUS) } != 0 {
        let cause = PyErr::fetch(py);
        let err = PyTypeError::new_err(format!(
            "devbuf pickle: data: expected contiguous bytes, got {}",
            data.get_type().name()?
        ));
        err.set_cause(py, Some(cause));
        return Err(err);
    }
    Ok(HeldBuffer(view))
}

/// The queue an unpickled buffer goes to: its own device's when this process has it with `kind`
/// memory, else the default device's, else the host's, with a warning saying why.
fn target_queue(py: Python<'_>, selector: &str, kind: MemKind) -> PyResult<Py<PyQueue>> {
    let reason = match shared_queue(py, selector) {
        Ok(queue) if queue.get().queue()?.supports(kind) => return Ok(queue),
        Ok(_) => format!("it has no {kind} memory"),
        Err(err) => err.value(py).to_string(),
    };
    let fallback = match crate::objects::default_device::current_default(py) {
        Ok(queue) if queue.get().queue()?.supports(kind) => queue,
        _ => host_memory_queue(py)?,
    };
    let message = format!(
        "devbuf: an unpickled buffer of {kind} memory from device {selector:?} is placed on {:?}: {reason}",
        fallback.get().queue()?.device().selector
    );
    let message = std::ffi::CString::new(message.replace('\0', "?")).expect("no NUL");
    PyErr::warn(py, &py.get_type::<DeviceFallbackWarning>(), &message, 1)?;
    Ok(fallback)
}
