//! `IpcHandle`, `Buffer.ipc_handle()` and `devbuf.open_ipc()`: memory shared between processes on
//! one machine (see `devbuf::ipc`). The exporting process owns the memory; an opened buffer keeps
//! nothing alive on the exporting side.

// Caller numbers become addresses here: every size, count, offset and alignment is checked
// (docs/architecture.md, "Untrusted numbers").
#![deny(clippy::arithmetic_side_effects)]

use devbuf::ipc::{self, IpcHandle};
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBytes, PyTuple};

use crate::errors::IntoPyResult;
use crate::objects::array::{PyArray, PyBuffer};
use crate::objects::queue::shared_queue;

/// What another process on this machine needs to open a view of a shared buffer: small and
/// picklable; `bytes(handle)` and `IpcHandle.from_bytes` carry it through any pipe.
#[pyclass(frozen, eq, hash, module = "devbuf", name = "IpcHandle")]
#[derive(PartialEq, Eq, Hash)]
pub struct PyIpcHandle {
    handle: IpcHandle,
}

#[pymethods]
impl PyIpcHandle {
    /// Reads a handle from `bytes(handle)`; garbled or truncated bytes are a ValueError.
    #[staticmethod]
    fn from_bytes(data: &[u8]) -> PyResult<PyIpcHandle> {
        Ok(PyIpcHandle {
            handle: IpcHandle::from_bytes(data).py()?,
        })
    }

    fn __bytes__<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, &self.handle.to_bytes())
    }

    /// Selector of the device that owns the memory.
    #[getter]
    fn device(&self) -> &str {
        &self.handle.device
    }

    /// The kind of the shared memory: "host", "device" or "shared".
    #[getter]
    fn kind(&self) -> &'static str {
        self.handle.kind.as_str()
    }

    /// Bytes of the exported view.
    #[getter]
    fn nbytes(&self) -> usize {
        self.handle.len
    }

    /// Whether the view opens read-only.
    #[getter]
    fn readonly(&self) -> bool {
        self.handle.read_only
    }

    fn __reduce__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        static FROM_BYTES: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
        let from_bytes = FROM_BYTES.import(py, "devbuf._devbuf", "_ipc_handle_from_bytes")?;
        PyTuple::new(
            py,
            [
                from_bytes.clone(),
                PyTuple::new(py, [self.__bytes__(py)])?.into_any(),
            ],
        )
    }

    fn __repr__(&self) -> String {
        format!(
            "<devbuf.IpcHandle {} bytes of {} memory on {:?}{}>",
            self.handle.len,
            self.handle.kind,
            self.handle.device,
            if self.handle.read_only {
                " read-only"
            } else {
                ""
            }
        )
    }
}

/// What unpickling an `IpcHandle` calls.
#[pyfunction]
pub(crate) fn _ipc_handle_from_bytes(data: &[u8]) -> PyResult<PyIpcHandle> {
    PyIpcHandle::from_bytes(data)
}

/// `Buffer.ipc_handle(readonly=False)`: read-only when asked or when the buffer is.
pub(crate) fn export(array: &PyArray, py: Python<'_>, readonly: bool) -> PyResult<PyIpcHandle> {
    let open = array.array(py)?;
    let buffer = open.buffer();
    let read_only = readonly || open.readonly();
    let handle = py
        .detach(|| {
            if read_only {
                ipc::export_read_only(buffer)
            } else {
                ipc::export(buffer)
            }
        })
        .py()?;
    Ok(PyIpcHandle { handle })
}

/// Opens a handle another process (or this one) exported with `Buffer.ipc_handle()`: a Buffer
/// viewing the same memory, zero-copy. It keeps nothing alive on the exporting side: the
/// exporter must not free the memory while this buffer is in use. A handle opens once per
/// process at a time; a handle whose exporter exited or freed the memory, or that does not name
/// memory devbuf exported, is a ValueError. A read-only handle opens as a read-only Buffer.
#[pyfunction]
pub(crate) fn open_ipc(py: Python<'_>, handle: &Bound<'_, PyAny>) -> PyResult<Py<PyBuffer>> {
    let handle = match handle.cast::<PyIpcHandle>() {
        Ok(handle) => handle.get().handle.clone(),
        Err(_) => match handle.extract::<&[u8]>() {
            Ok(bytes) => IpcHandle::from_bytes(bytes).py()?,
            Err(_) => {
                return Err(PyTypeError::new_err(format!(
                    "handle: expected a devbuf.IpcHandle or its bytes, got {}",
                    handle.get_type().name()?
                )));
            }
        },
    };
    let queue = shared_queue(py, &handle.device)?;
    let target = queue.get().queue()?;
    let buffer = py.detach(|| ipc::open(target, &handle)).py()?;
    PyBuffer::wrap(py, buffer, queue)
}
