//! Validated foreign memory wrapped in an Array: the runtime of the queue it was routed to
//! classifies the pointer and checks the whole extent against the allocation holding it (a device
//! runtime that does not know it refuses it), and an owner keeps it alive.

use std::sync::Arc;

use devbuf::interface::ForeignLayout;
use devbuf::{Array, ForeignQueue, MemKind, Owner, extent};
use pyo3::prelude::*;

use crate::errors::IntoPyResult;
use crate::objects::array::PyArray;
use crate::objects::queue::PyQueue;

/// Wraps validated foreign memory reachable by `queue` in an Array; with `producer`, later work
/// on it is ordered after that queue of the producer's.
pub(crate) fn wrap_foreign<'py>(
    py: Python<'py>,
    foreign: ForeignLayout,
    queue: Py<PyQueue>,
    owner: Owner,
    pointer_key: &'static str,
    producer: Option<Arc<dyn ForeignQueue>>,
) -> PyResult<Bound<'py, PyArray>> {
    let kind = foreign_kind(&queue, &foreign, pointer_key)?;
    wrap_classified(py, foreign, queue, kind, owner, producer)
}

/// What kind of memory of `queue`'s runtime the foreign span is, once its whole extent is known to
/// lie in one allocation (as far as that runtime can tell); a ValueError naming `pointer_key` when
/// a device runtime does not know the pointer, or `shape`/`strides` when the span reaches past the
/// allocation.
pub(crate) fn foreign_kind(
    queue: &Py<PyQueue>,
    foreign: &ForeignLayout,
    pointer_key: &'static str,
) -> PyResult<MemKind> {
    extent::check_extent(&**queue.get().queue()?, foreign, pointer_key).py()
}

/// Wraps foreign memory of `kind` ([`foreign_kind`]) in an Array, as [`wrap_foreign`].
pub(crate) fn wrap_classified<'py>(
    py: Python<'py>,
    foreign: ForeignLayout,
    queue: Py<PyQueue>,
    kind: MemKind,
    owner: Owner,
    producer: Option<Arc<dyn ForeignQueue>>,
) -> PyResult<Bound<'py, PyArray>> {
    let runtime_queue = queue.get().queue()?.clone();
    // SAFETY: the protocol promised the span's bytes reachable by this device, alive while `owner`
    // is held.
    let array = unsafe { Array::from_foreign(runtime_queue, foreign, kind, owner, producer) };
    Ok(PyArray::wrap(py, array, queue)?.into_bound(py))
}
