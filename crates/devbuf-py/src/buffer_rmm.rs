//! What RMM's `DeviceBuffer` users call on a Buffer: a buffer made from host bytes
//! (`Buffer.from_host`, RMM's `DeviceBuffer.to_device`), copies into its first bytes from the host
//! or from device memory (`copy_from_host`, `copy_from_device`). Each is devbuf's own allocation,
//! slicing and `copy_from`, with RMM's rules for the source.

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyMemoryView, PySlice};

use crate::objects::array::PyBuffer;

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
    let kwargs = stream_kwargs(py, stream)?;
    if let Some(mr) = mr {
        kwargs.set_item("mr", mr)?;
    }
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
        source.clone()
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
