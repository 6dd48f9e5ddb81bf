//! What RMM's `DeviceBuffer` users call on a Buffer: a buffer made from host bytes
//! (`Buffer.from_host`, RMM's `DeviceBuffer.to_device`), copies into its first bytes from the host
//! or from device memory (`copy_from_host`, `copy_from_device`), and a size that changes
//! (`capacity`, `reserve`, `resize`). Each is devbuf's own allocation, slicing and copy path,
//! with RMM's rules.

use devbuf::Array;
use pyo3::exceptions::{PyBufferError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyMemoryView, PySlice};

use crate::errors::IntoPyResult;
use crate::gil_as_lock::Refusal;
use crate::objects::array::PyBuffer;
use crate::objects::queue::PyQueue;

/// `data` as a memoryview of bytes, RMM's rule for host sources: anything else than a
/// one-dimensional, contiguous buffer of unsigned bytes (format "B") is refused, a TypeError for
/// an object without the buffer protocol, a ValueError for another format or layout.
fn host_bytes<'py>(data: &Bound<'py, PyAny>, method: &str) -> PyResult<Bound<'py, PyMemoryView>> {
    let view = PyMemoryView::from(data).map_err(|_| {
        PyTypeError::new_err(format!(
            "{method}: expected a bytes-like object (the buffer protocol), got {}",
            data.get_type()
        ))
    })?;
    let format: String = view.getattr("format")?.extract()?;
    let ndim: usize = view.getattr("ndim")?.extract()?;
    let contiguous: bool = view.getattr("c_contiguous")?.extract()?;
    if format != "B" {
        return Err(PyValueError::new_err(format!(
            "{method}: expected bytes (format \"B\"), got format {format:?}"
        )));
    }
    if ndim != 1 || !contiguous {
        return Err(PyValueError::new_err(format!(
            "{method}: expected one contiguous dimension of bytes, got {ndim} dimension(s){}",
            if contiguous { "" } else { ", not contiguous" }
        )));
    }
    Ok(view)
}

/// `copy_from`'s keyword arguments: `stream` when given.
fn stream_kwargs<'py>(
    py: Python<'py>,
    stream: Option<&Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyDict>> {
    let kwargs = PyDict::new(py);
    if let Some(stream) = stream {
        kwargs.set_item("stream", stream)?;
    }
    Ok(kwargs)
}

/// `Buffer.from_host`: a new buffer of `kind` holding a copy of `data`'s bytes.
pub(crate) fn from_host<'py>(
    py: Python<'py>,
    data: &Bound<'py, PyAny>,
    kind: &str,
    device: Option<&Bound<'py, PyAny>>,
    stream: Option<&Bound<'py, PyAny>>,
    mr: Option<&Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyAny>> {
    let view = host_bytes(data, "from_host")?;
    let nbytes = view.len()?;
    // `mr` allocates (on its own queue) and `stream` runs the copy, as RMM's to_device.
    let kwargs = match mr {
        Some(mr) => {
            let kwargs = PyDict::new(py);
            kwargs.set_item("mr", mr)?;
            kwargs
        }
        None => stream_kwargs(py, stream)?,
    };
    let devbuf = py.import("devbuf")?;
    let buffer = devbuf
        .getattr("alloc")?
        .call((nbytes, kind, device), Some(&kwargs))?;
    if nbytes > 0 {
        buffer.call_method("copy_from", (view,), Some(&stream_kwargs(py, stream)?))?;
    }
    Ok(buffer)
}

/// `copy_from_host`/`copy_from_device`: `source`'s bytes into the first bytes of `buffer`.
pub(crate) fn copy_into_start(
    buffer: &Bound<'_, PyBuffer>,
    source: &Bound<'_, PyAny>,
    stream: Option<&Bound<'_, PyAny>>,
    method: &str,
) -> PyResult<()> {
    let py = buffer.py();
    let source = if method == "copy_from_host" {
        host_bytes(source, method)?.into_any()
    } else {
        device_bytes(source)?
    };
    let source_bytes: usize = source.getattr("nbytes")?.extract()?;
    let nbytes: usize = buffer.getattr("nbytes")?.extract()?;
    if source_bytes > nbytes {
        return Err(PyValueError::new_err(format!(
            "{method}: the source has {source_bytes} bytes, more than the buffer's {nbytes}"
        )));
    }
    if source_bytes == 0 {
        return Ok(());
    }
    let start = buffer.get_item(PySlice::new(py, 0, source_bytes as isize, 1))?;
    start.call_method("copy_from", (source,), Some(&stream_kwargs(py, stream)?))?;
    Ok(())
}

/// The bytes of `source` (anything `devbuf.asarray` takes; contiguous) as one dimension of
/// uint8, whatever its shape and dtype: what RMM's `copy_from_device` copies.
fn device_bytes<'py>(source: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    let py = source.py();
    let array = py.import("devbuf")?.getattr("asarray")?.call1((source,))?;
    if !array.getattr("c_contiguous")?.is_truthy()? {
        return Err(PyValueError::new_err(
            "copy_from_device: the source is not C-contiguous; copy it first (source.copy())",
        ));
    }
    array
        .call_method1("reshape", (-1,))?
        .call_method1("view", ("uint8",))
}

/// `Buffer.capacity()`: the bytes the buffer may grow to without new memory.
pub(crate) fn capacity(buffer: &Bound<'_, PyBuffer>) -> PyResult<usize> {
    let py = buffer.py();
    Ok(buffer
        .as_super()
        .get()
        .contiguous_bytes(py, "capacity")?
        .capacity())
}

/// What `Buffer.resize` and `Buffer.reserve` ask for.
#[derive(Clone, Copy)]
pub(crate) enum NewSize {
    /// `resize(n)`: `n` bytes, the first `min(n, nbytes)` kept.
    Size(usize),
    /// `reserve(n)`: room for `n` bytes, the size and bytes kept.
    Capacity(usize),
}

/// `Buffer.resize`/`Buffer.reserve`, as RMM's `DeviceBuffer`'s: within the capacity the buffer
/// only changes its length; past it, a larger allocation from the resource (or queue) its memory
/// came from takes the bytes, copied on `stream` (default: the buffer's own queue) through the
/// buffer's copy path, so that later work on either orders after the copy. Memory devbuf did not
/// allocate, a read-only buffer, and a buffer whose memory was handed to a consumer that keeps the
/// buffer (CAI, SUAI, the dpctl attributes, the buffer protocol) keep their size: as a
/// `bytearray` with exports, a BufferError.
pub(crate) fn change_size(
    buffer: &Bound<'_, PyBuffer>,
    wanted: NewSize,
    stream: Option<&Bound<'_, PyQueue>>,
    method: &str,
) -> PyResult<()> {
    let py = buffer.py();
    let this = buffer.as_super().get();
    let replacement = {
        let array = this.array(py)?;
        if array.readonly() {
            return Err(PyBufferError::new_err(format!(
                "{method}: the buffer is read-only"
            )));
        }
        let current = this.contiguous_bytes(py, method)?;
        let (len, room) = match wanted {
            NewSize::Size(size) => (size, size),
            NewSize::Capacity(capacity) => (current.len(), capacity),
        };
        if room <= current.capacity() {
            if len == current.len() {
                return Ok(());
            }
            Array::bytes(current.resized_in_place(len).py()?)
        } else {
            if this.held().is_anchored(py) {
                return Err(anchored(method));
            }
            let queue = stream.map(|stream| stream.get().queue()).transpose()?;
            let (grown, _copy) = py
                .detach(|| devbuf::ipc::grown(&current, room, queue))
                .py()?;
            Array::bytes(grown.resized_in_place(len).py()?)
        }
    };
    let replaced = this
        .replace_array(py, replacement)
        .map_err(|refusal| match refusal {
            Refusal::Anchored => anchored(method),
            Refusal::InUse => PyBufferError::new_err(format!(
                "{method}: the buffer is in use (a call on it is in progress)"
            )),
            Refusal::Closed => PyValueError::new_err(format!(
                "{method}: the buffer is closed (close() let go of its memory)"
            )),
        })?;
    // The old memory's last share may run Python code: let go of it only now.
    drop(replaced);
    Ok(())
}

fn anchored(method: &str) -> PyErr {
    PyBufferError::new_err(format!(
        "{method}: the buffer's memory was handed out through a protocol whose consumers read it \
         through the buffer itself (__cuda_array_interface__, __sycl_usm_array_interface__, the \
         dpctl attributes or the buffer protocol): it keeps its size, as a bytearray with exports \
         does; make a new buffer and copy_from this one"
    ))
}
