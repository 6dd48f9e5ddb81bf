//! Validated foreign memory wrapped in an Array: the runtime of the queue it was routed to
//! classifies the pointer (a device runtime that does not know it refuses it), and an owner keeps
//! it alive.

use devbuf::interface::ForeignLayout;
use devbuf::{Array, Buffer, MemKind, Owner};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::array::PyArray;
use crate::errors::IntoPyResult;
use crate::queues::PyQueue;

/// Wraps validated foreign memory reachable by `queue` in an Array.
pub(crate) fn wrap_foreign<'py>(
    py: Python<'py>,
    foreign: ForeignLayout,
    queue: Py<PyQueue>,
    owner: Owner,
    pointer_key: &'static str,
) -> PyResult<Bound<'py, PyArray>> {
    let kind = foreign_kind(&queue, &foreign, pointer_key)?;
    wrap_classified(py, foreign, queue, kind, owner)
}

/// What kind of memory of `queue`'s runtime the foreign span is; a ValueError naming
/// `pointer_key` when a device runtime does not know the pointer.
pub(crate) fn foreign_kind(
    queue: &Py<PyQueue>,
    foreign: &ForeignLayout,
    pointer_key: &'static str,
) -> PyResult<MemKind> {
    if foreign.len == 0 {
        return Ok(MemKind::Unknown);
    }
    let runtime_queue = &queue.get().queue;
    let kind = runtime_queue.kind_of(foreign.base as *const u8);
    let device = runtime_queue.device();
    if kind == MemKind::Unknown && device.backend != devbuf::host::HOST {
        return Err(PyValueError::new_err(format!(
            "{pointer_key}: {:#x} is not memory of {:?} (the runtime classifies it as unknown)",
            foreign.base, device.selector
        )));
    }
    Ok(kind)
}

/// Wraps foreign memory of `kind` ([`foreign_kind`]) in an Array.
pub(crate) fn wrap_classified<'py>(
    py: Python<'py>,
    foreign: ForeignLayout,
    queue: Py<PyQueue>,
    kind: MemKind,
    owner: Owner,
) -> PyResult<Bound<'py, PyArray>> {
    let runtime_queue = queue.get().queue.clone();
    // SAFETY: the protocol promised `len` bytes at `base` reachable by this device, alive while
    // `owner` is held.
    let buffer = unsafe {
        Buffer::from_foreign(
            runtime_queue,
            foreign.base as *mut u8,
            foreign.len,
            kind,
            owner,
        )
    };
    let array = Array::new(buffer, foreign.layout).py()?;
    Ok(PyArray::wrap(py, array, queue)?.into_bound(py))
}
