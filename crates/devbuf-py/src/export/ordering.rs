//! Ordering at the export boundary, for the consumer: which stream a CAI export names, and what a
//! DLPack export does with the consumer's `stream` argument. Pending work is tracked per
//! allocation in `devbuf-core`; this module only applies each protocol's rule.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};

use devbuf::dlpark::ffi::{DLDevice, DLDeviceType};
use devbuf::{Array, ForeignObject, StreamHandle};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::errors::IntoPyResult;
use crate::objects::foreign_objects;

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
/// pending work on the memory, or None. The backend numbers it as the protocols do
/// (`Interop::native_stream`).
pub(crate) fn cai_export_stream(array: &Array) -> devbuf::Result<Option<usize>> {
    if !cai_export_stream_flag().load(Ordering::Relaxed) {
        return Ok(None);
    }
    let buffer = array.buffer();
    Ok(buffer
        .sync_queue(buffer.queue())?
        .and_then(|queue| queue.interop().native_stream())
        .map(StreamHandle::get))
}

/// Readies memory for a zero-copy DLPack export to `device`, per the consumer's `stream`
/// argument (the array API's rules). The memory's backend applies its own rule where it has one
/// for `device` (CUDA streams; SYCL queues for kDLOneAPI); otherwise -1 means the consumer
/// synchronizes itself, the CPU takes only None (or -1), and pending work is completed first
/// (other libraries' too, once the memory was handed out: see `Buffer::synchronize`).
pub(crate) fn prepare_dlpack_export(
    py: Python<'_>,
    array: &Array,
    device: DLDevice,
    stream: Option<&Bound<'_, PyAny>>,
) -> PyResult<()> {
    let stream = stream.filter(|s| !s.is_none());
    let buffer = array.buffer();
    // SAFETY: the consumer passed `stream` to name one of its live streams or queues (DLPack's
    // contract); `ask` holds the object a handle was read from.
    let order = |stream: &ForeignObject<'_>| unsafe {
        devbuf::exchange::order_dlpack_export(buffer, device, stream)
    };
    // No stream (the common case) needs no Python object read.
    let handled = match stream {
        None => order(&ForeignObject::Nothing),
        Some(stream) => foreign_objects::ask(stream, order)?,
    };
    if let Some(done) = handled {
        return done.py();
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
    prepare_streamless_dlpack_export(py, array)
}

/// The generic rule of [`prepare_dlpack_export`] for `stream=None`, alone: pending work is
/// completed first. Callers go straight here for a device whose backend has no rule for a
/// consumer without a stream (`Interop::dlpack_orders_streamless_export`).
#[inline]
pub(crate) fn prepare_streamless_dlpack_export(py: Python<'_>, array: &Array) -> PyResult<()> {
    if !array.buffer().needs_synchronize() {
        return Ok(());
    }
    synchronize(py, array)
}

/// Waits for the memory's pending work with the GIL released (out of line: exports are hot paths,
/// and most have nothing to wait for).
#[cold]
#[inline(never)]
fn synchronize(py: Python<'_>, array: &Array) -> PyResult<()> {
    let buffer = array.buffer();
    py.detach(|| buffer.synchronize()).py()
}
