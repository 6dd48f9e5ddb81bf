//! Ordering at the import boundary, after the producer: the `stream` argument devbuf passes to a
//! producer's `__dlpack__`, and later work on imported memory ordered after the stream the
//! producer names. The memory's backend applies each protocol's rule.

use std::ffi::{c_int, c_void};

use devbuf::{Buffer, Protocol};
use pyo3::prelude::*;

use crate::errors::IntoPyResult;
use crate::objects::foreign_objects;
use crate::objects::queue::PyQueue;

/// The `stream` argument a consumer on `queue` passes to a producer's `__dlpack__`: its native
/// stream, numbered as the protocols do (`Queue::native_stream`; -1, no ordering, without
/// `sync`), its SYCL queue as a `dpctl.SyclQueue` (None without `sync`), or None for queues with
/// neither.
pub(crate) fn consumer_stream_argument<'py>(
    py: Python<'py>,
    queue: &PyQueue,
    sync: bool,
) -> PyResult<Option<Bound<'py, PyAny>>> {
    if let Some(stream) = queue.queue.native_stream() {
        let stream = if sync { stream as i64 } else { -1 };
        return Ok(Some(stream.into_pyobject(py)?.into_any()));
    }
    if !sync {
        return Ok(None);
    }
    Ok(foreign_objects::dpctl_queue(py, queue)?.map(|queue| queue.into_bound(py)))
}

/// After a no-sync DLPack export (the C exchange table), orders later work on `buffer` (just
/// imported) after the producer's current work stream, which `current_work_stream` writes out.
/// Only queues with native streams need it; the handle has CAI's meaning.
pub(crate) fn order_after_producer(
    py: Python<'_>,
    buffer: &Buffer,
    current_work_stream: impl FnOnce(*mut *mut c_void) -> c_int,
) -> PyResult<()> {
    if buffer.queue().native_stream().is_none() {
        return Ok(());
    }
    let mut stream: *mut c_void = std::ptr::null_mut();
    if current_work_stream(&mut stream) != 0 {
        return Err(PyErr::fetch(py));
    }
    // A NULL current stream is the legacy default stream, which the protocols call 1.
    let stream = if stream.is_null() { 1 } else { stream as i64 };
    order_after_producer_stream(buffer, Protocol::Cai, Some(stream), true)
}

/// The consumer's rule of `protocol` for `buffer`, just imported: when the producer names a
/// stream (or none: `None`), later work on the buffer waits for it without blocking the host,
/// unless `sync` is off; the memory's backend applies it (releasing the GIL if it waits).
pub(crate) fn order_after_producer_stream(
    buffer: &Buffer,
    protocol: Protocol,
    stream: Option<i64>,
    sync: bool,
) -> PyResult<()> {
    // SAFETY: a producer's `stream` names one of its live streams, alive while the data is used
    // (the protocol's contract).
    let ordered = unsafe {
        buffer
            .queue()
            .order_after_producer_stream(buffer, protocol, stream, sync)
    };
    ordered.py()
}
