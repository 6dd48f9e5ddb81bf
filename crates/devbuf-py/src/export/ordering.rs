//! Ordering at the export boundary: core applies every rule (`devbuf::exchange`,
//! `Buffer::order_access`); this module only turns a consumer's Python `stream` argument into
//! what core reads.

use devbuf::dlpark::ffi::DLDevice;
use devbuf::{Array, ForeignObject};
use pyo3::prelude::*;

use crate::errors::IntoPyResult;
use crate::objects::foreign_objects;

/// Whether `__cuda_array_interface__` names the stream with pending work (True, the default) or
/// always says None, leaving synchronization to the user (CAI v3's producer option).
#[pyfunction]
pub fn set_cai_export_stream(enabled: bool) {
    devbuf::exchange::set_cai_export_stream(enabled);
}

/// Readies memory for a zero-copy DLPack export to `device`, per the consumer's `stream`
/// argument (`devbuf::exchange::prepare_dlpack_export`).
pub(crate) fn prepare_dlpack_export(
    array: &Array,
    device: DLDevice,
    stream: Option<&Bound<'_, PyAny>>,
) -> PyResult<()> {
    let buffer = array.buffer();
    // SAFETY: the consumer passed `stream` to name one of its live streams or queues (DLPack's
    // contract); `ask` holds the object a handle was read from.
    let prepare = |stream: &ForeignObject<'_>| unsafe {
        devbuf::exchange::prepare_dlpack_export(buffer, device, stream)
    };
    match stream.filter(|s| !s.is_none()) {
        // No stream (the common case) needs no Python object read.
        None => prepare(&ForeignObject::Nothing),
        Some(stream) => foreign_objects::ask(stream, prepare)?,
    }
    .py()
}

/// [`prepare_dlpack_export`] for `stream=None` where the memory's backend has no rule for it
/// (`devbuf::exchange::prepare_streamless_dlpack_export`).
#[inline]
pub(crate) fn prepare_streamless_dlpack_export(array: &Array) -> PyResult<()> {
    devbuf::exchange::prepare_streamless_dlpack_export(array.buffer()).py()
}
