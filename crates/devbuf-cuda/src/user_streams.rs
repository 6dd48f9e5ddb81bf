//! Users' streams: a queue on a new stream made as `StreamOptions` ask (cuda.core's
//! `Device.create_stream`, CuPy's `Stream(non_blocking, priority)`), and a queue on another
//! library's stream (anything with `__cuda_stream__`), found on the device the stream belongs to.

use std::sync::Arc;

use devbuf_core::{Error, Queue, Result, StreamOptions, StreamOwner};

use crate::backend::CudaBackend;
use crate::loader::{self, BACKEND};
use crate::protocol::ProtocolStream;
use crate::queue::{CudaQueue, open_device, stream_context};
use crate::stream::Stream;

/// A queue on device `ordinal` with a stream of its own, made as `options` ask, in the device's
/// primary context (so it reaches the memory of every other queue of the device).
pub(crate) fn open_stream(ordinal: u32, options: StreamOptions) -> Result<Arc<dyn Queue>> {
    let (caps, context) = open_device(ordinal)?;
    let stream = Stream::create_with(&context, options)?;
    Ok(Arc::new(CudaQueue::with(caps, stream)))
}

/// A queue on `handle`, another library's stream kept alive by `owner`, on device `ordinal`, or,
/// for `None`, on the device whose primary context the stream belongs to.
///
/// # Safety
/// `handle` names a live stream for as long as `owner` is alive.
pub(crate) unsafe fn adopt_stream(
    ordinal: Option<u32>,
    handle: usize,
    owner: StreamOwner,
) -> Result<Arc<dyn Queue>> {
    let ordinal = match ordinal {
        Some(ordinal) => ordinal,
        None => device_of_stream(handle)?,
    };
    // SAFETY: the caller's promise; the queue holds `owner` as long as it uses the stream.
    let queue = unsafe { CudaQueue::with_borrowed_stream(ordinal, handle, Some(owner))? };
    Ok(Arc::new(queue))
}

/// The device whose primary context `handle` belongs to (device 0 for the legacy default stream,
/// which names no device of its own).
fn device_of_stream(handle: usize) -> Result<u32> {
    if matches!(ProtocolStream::from_handle(handle)?, ProtocolStream::Legacy) {
        return Ok(0);
    }
    let devices = loader::loaded()?.device_count;
    for ordinal in 0..devices {
        let queue = CudaBackend::shared_queue(ordinal)?;
        if stream_context(queue.context(), handle)? == queue.context().raw() {
            return Ok(ordinal);
        }
    }
    Err(Error::invalid(
        "stream",
        format!(
            "{handle:#x} belongs to no {BACKEND} device's primary context (devbuf's queues work \
             in primary contexts, as CuPy's, PyTorch's and cuda.core's do)"
        ),
    ))
}

/// The device ordinal a selector's spec names ("" is device 0), as [`CudaBackend`] opens it.
pub(crate) fn ordinal_of(spec: &str) -> Result<u32> {
    match spec {
        "" => Ok(0),
        spec => spec.parse().map_err(|_| Error::DeviceNotFound {
            selector: format!("{BACKEND}:{spec}"),
            reason: "a CUDA selector is \"cuda\" or \"cuda:N\" with N a device ordinal".into(),
        }),
    }
}
