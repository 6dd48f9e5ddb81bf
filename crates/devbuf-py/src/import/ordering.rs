//! Ordering at the import boundary, after the producer: the `stream` argument devbuf passes to a
//! producer's `__dlpack__`, and later work on imported memory ordered after the stream the
//! producer names. The memory's backend applies each protocol's rule.

use std::ffi::{c_int, c_void};

use devbuf::Buffer;
use devbuf::interop::ProducerStream;
use pyo3::prelude::*;

use crate::errors::IntoPyResult;
use crate::objects::foreign_objects;
use crate::objects::queue::PyQueue;

/// The `stream` argument a consumer on `queue` passes to a producer's `__dlpack__`: its native
/// stream, numbered as the protocols do (`Interop::native_stream`; -1, no ordering, without
/// `sync`), its SYCL queue as a `dpctl.SyclQueue` (None without `sync`), or None for queues with
/// neither.
pub(crate) fn consumer_stream_argument<'py>(
    py: Python<'py>,
    queue: &PyQueue,
    sync: bool,
) -> PyResult<Option<Bound<'py, PyAny>>> {
    if let Some(stream) = queue.queue.interop().native_stream() {
        let stream = if sync { stream.get() as i64 } else { -1 };
        return Ok(Some(stream.into_pyobject(py)?.into_any()));
    }
    if !sync {
        return Ok(None);
    }
    Ok(foreign_objects::dpctl_queue(py, queue)?.map(|queue| queue.into_bound(py)))
}

/// After a no-sync DLPack export (the C exchange table), orders later work on `buffer` (just
/// imported) after the producer's current work stream, which `current_work_stream` writes out.
/// Only queues with native streams need it; the memory's backend reads the handle.
pub(crate) fn order_after_producer(
    py: Python<'_>,
    buffer: &Buffer,
    current_work_stream: impl FnOnce(*mut *mut c_void) -> c_int,
) -> PyResult<()> {
    if buffer.queue().interop().native_stream().is_none() {
        return Ok(());
    }
    let mut stream: *mut c_void = std::ptr::null_mut();
    if current_work_stream(&mut stream) != 0 {
        return Err(PyErr::fetch(py));
    }
    order_after_producer_stream(
        buffer,
        ProducerStream::ExchangeWorkStream(stream as usize),
        true,
    )
}

/// The consumer's rule for `buffer`, just imported: when the producer names a stream (in the
/// form its protocol gives), later work on the buffer waits for it without blocking the host,
/// unless `sync` is off; the memory's backend reads the stream (releasing the GIL if it waits).
pub(crate) fn order_after_producer_stream(
    buffer: &Buffer,
    stream: ProducerStream<'_>,
    sync: bool,
) -> PyResult<()> {
    // SAFETY: a producer's `stream` names one of its live streams, alive while the data is used
    // (the protocol's contract).
    unsafe { devbuf::exchange::order_after_producer(buffer, stream, sync) }.py()
}
