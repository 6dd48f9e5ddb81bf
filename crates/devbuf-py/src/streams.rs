//! Synchronization at the protocol boundary: which stream a CAI export names, and what a DLPack
//! export does with the consumer's `stream` argument. Pending work is tracked per allocation in
//! `devbuf-core`; this module only applies each protocol's rule.

use std::ffi::{c_int, c_void};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};

use devbuf::Buffer;
use devbuf::dlpark::ffi::{DLDevice, DLDeviceType};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;

use crate::array::PyArray;
use crate::backend;
use crate::device::PyQueue;
use crate::errors::IntoPyResult;

/// CAI v3's producer-side option: when off, exports always say `stream: None` and the user takes
/// over synchronization. On by default; `DEVBUF_CAI_EXPORT_STREAM=0` turns it off for the process.
fn cai_export_stream_flag() -> &'static AtomicBool {
    static FLAG: OnceLock<AtomicBool> = OnceLock::new();
    FLAG.get_or_init(|| {
        AtomicBool::new(std::env::var("DEVBUF_CAI_EXPORT_STREAM").map_or(true, |v| v != "0"))
    })
}

/// Whether `__cuda_array_interface__` names the stream with pending work (True, the default) or
/// always says None, leaving synchronization to the user (CAI v3's producer option).
#[pyfunction]
pub fn set_cai_export_stream(enabled: bool) {
    cai_export_stream_flag().store(enabled, Ordering::Relaxed);
}

/// The `stream` entry of a CAI export: the stream a consumer must synchronize with to see all
/// pending work on the memory, or None. The legacy default stream is exported as 1, never 0.
pub(crate) fn cai_export_stream(this: &PyArray) -> devbuf::Result<Option<usize>> {
    if !cai_export_stream_flag().load(Ordering::Relaxed) {
        return Ok(None);
    }
    let buffer = this.array.buffer();
    Ok(buffer
        .sync_queue(buffer.queue())?
        .and_then(|queue| queue.native_stream())
        .map(|stream| if stream == 0 { 1 } else { stream }))
}

/// Readies memory for a zero-copy DLPack export to `device`, per the consumer's `stream`
/// argument (the array API's rules):
/// - CUDA devices: -1 = the consumer synchronizes itself; None = the legacy default stream; 1, 2
///   or a stream handle = that stream, which is made to wait for all pending work on the memory
///   without blocking the host; 0 is refused.
/// - The CPU (also for host-accessible CUDA or SYCL memory) takes None or -1, and pending device
///   work is completed first.
/// - kDLOneAPI (as dpctl and dpnp.tensor): a SYCL queue (`dpctl.SyclQueue`, or a devbuf queue)
///   is the consumer's, which is made to wait for all pending work without blocking the host;
///   None promises no synchronization, so pending work is completed first; anything else is a
///   TypeError.
/// - Other devices: pending work is completed first.
pub(crate) fn prepare_dlpack_export(
    py: Python<'_>,
    this: &PyArray,
    cuda: bool,
    device: DLDevice,
    stream: Option<&Bound<'_, PyAny>>,
) -> PyResult<()> {
    let stream = stream.filter(|s| !s.is_none());
    let buffer = this.array.buffer();
    let home = buffer.queue();
    let cuda_device = matches!(
        device.device_type,
        DLDeviceType::CUDA | DLDeviceType::CUDAHOST | DLDeviceType::CUDAMANAGED
    );
    if cuda
        && cuda_device
        && let Some(home_cuda) = backend::cuda_queue(home)
    {
        let stream = stream
            .map(|s| s.extract::<i64>())
            .transpose()
            .map_err(|_| PyTypeError::new_err("stream: expected None or an int (a CUDA stream)"))?;
        // The queue that sees all pending work (joined there when it is on several), else ours.
        let pending = py.detach(|| buffer.sync_queue(home)).py()?;
        let producer = pending
            .as_ref()
            .and_then(backend::cuda_queue)
            .unwrap_or(home_cuda);
        // SAFETY: the consumer passed `stream` to name one of its live CUDA streams (DLPack's
        // contract); 0 is refused inside.
        return py
            .detach(|| unsafe { producer.sync_dlpack_export(stream) })
            .py();
    }
    if device.device_type == DLDeviceType::ONEAPI
        && let Some(stream) = stream
    {
        let Some(consumer) = backend::foreign_sycl_queue(py, stream)? else {
            return Err(PyTypeError::new_err(format!(
                "stream: a kDLOneAPI export takes None or a dpctl.SyclQueue, not {}",
                stream.repr().map_or_else(|_| "?".into(), |r| r.to_string())
            )));
        };
        return py
            .detach(|| buffer.order_on_foreign(consumer.as_ref()))
            .py();
    }
    let stream_value = stream.map(|s| s.extract::<i64>().ok());
    if stream_value == Some(Some(-1)) {
        return Ok(());
    }
    if device.device_type == DLDeviceType::CPU && stream.is_some() {
        return Err(PyValueError::new_err(format!(
            "stream: a CPU export takes stream=None (or -1), not {}",
            stream.map(|s| s.to_string()).unwrap_or_default()
        )));
    }
    // Work a consumer enqueued on a CUDA queue's stream itself is not tracked: wait for it too.
    if !cuda && !buffer.has_pending_work() {
        return Ok(());
    }
    py.detach(|| {
        buffer.synchronize()?;
        if cuda { home.wait() } else { Ok(()) }
    })
    .py()
}

/// The `stream` argument a consumer on `queue` passes to a producer's `__dlpack__`: its native
/// stream (never 0: the legacy default stream is 1; -1, no ordering, without `sync`), its SYCL
/// queue as a `dpctl.SyclQueue` (None without `sync`), or None for queues with neither.
pub(crate) fn consumer_stream_argument<'py>(
    py: Python<'py>,
    queue: &PyQueue,
    sync: bool,
) -> PyResult<Option<Bound<'py, PyAny>>> {
    if let Some(stream) = queue.queue.native_stream() {
        let stream = match stream {
            _ if !sync => -1,
            0 => 1,
            stream => stream as i64,
        };
        return Ok(Some(stream.into_pyobject(py)?.into_any()));
    }
    if !sync {
        return Ok(None);
    }
    Ok(backend::dpctl_queue(py, queue)?.map(|queue| queue.into_bound(py)))
}

/// After a no-sync DLPack export (the C exchange table), orders later work on `buffer` (just
/// imported) after the producer's current work stream, which `current_work_stream` writes out.
/// Only queues with native streams need it.
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
    order_after_cai_stream(py, buffer, Some(stream), true)
}

/// CAI v3's consumer rule for `buffer`, just imported: when the producer names a stream, later
/// work on the buffer waits for it (an event on the producer's stream, waited on by ours: no host
/// block; host views and re-exports wait for it too), and the producer's stream waits for work
/// devbuf enqueues on the buffer; unless `sync` is off or `DEVBUF_CUDA_ARRAY_INTERFACE_SYNC=0`
/// turned it off. 0 is refused either way.
pub(crate) fn order_after_cai_stream(
    py: Python<'_>,
    buffer: &Buffer,
    stream: Option<i64>,
    sync: bool,
) -> PyResult<()> {
    match backend::cuda_queue(buffer.queue()) {
        // SAFETY: a CAI producer's `stream` names one of its live CUDA streams, alive while the
        // data is used (CAI v3's contract).
        Some(cuda) if sync => py
            .detach(|| unsafe { cuda.sync_cai_import(buffer, stream) })
            .py(),
        _ => devbuf::cuda::protocol::decode_cai_stream(stream)
            .map(drop)
            .py(),
    }
}
