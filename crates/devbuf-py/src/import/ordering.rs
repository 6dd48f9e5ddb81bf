//! Ordering at the import boundary, after the producer: core decides every rule
//! (`devbuf::exchange`); this module only turns its answers into Python objects and back.

use std::ffi::{c_int, c_void};

use devbuf::Buffer;
use devbuf::exchange::ProducerStreamArgument;
use devbuf::interop::ProducerStream;
use pyo3::prelude::*;

use crate::errors::IntoPyResult;
use crate::objects::foreign_objects;
use crate::objects::queue::PyQueue;

/// The `stream` argument a consumer on `queue` passes to a producer's `__dlpack__`
/// (`devbuf::exchange::producer_stream_argument`), as a Python object.
pub(crate) fn consumer_stream_argument<'py>(
    py: Python<'py>,
    queue: &PyQueue,
    sync: bool,
) -> PyResult<Option<Bound<'py, PyAny>>> {
    Ok(
        match devbuf::exchange::producer_stream_argument(queue.queue()?, sync) {
            ProducerStreamArgument::Stream(stream) => Some(stream.into_pyobject(py)?.into_any()),
            ProducerStreamArgument::Queue => {
                foreign_objects::dpctl_queue(py, queue)?.map(|queue| queue.into_bound(py))
            }
            ProducerStreamArgument::Nothing => None,
        },
    )
}

/// After a no-sync DLPack export (the C exchange table), orders later work on `buffer` (just
/// imported) after the producer's current work stream, which `current_work_stream` writes out,
/// where core says the memory's queue follows one.
pub(crate) fn order_after_producer(
    py: Python<'_>,
    buffer: &Buffer,
    current_work_stream: impl FnOnce(*mut *mut c_void) -> c_int,
) -> PyResult<()> {
    if !devbuf::exchange::follows_exchange_work_stream(buffer) {
        return Ok(());
    }
    let mut stream: *mut c_void = std::ptr::null_mut();
    if current_work_stream(&mut stream) != 0 {
        return Err(PyErr::fetch(py));
    }
    // SAFETY: the exchange API reports one of the producer's live streams for the device.
    unsafe { devbuf::exchange::order_after_exchange_work_stream(buffer, stream as usize) }.py()
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
