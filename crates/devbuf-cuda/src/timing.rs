//! Timed CUDA events: made without `CU_EVENT_DISABLE_TIMING` (devbuf's ordering events keep it,
//! since timing costs), and the milliseconds between two of them (`cuEventElapsedTime`).

use std::sync::Arc;

use cudarc::driver::sys::{self, CUevent_flags, CUstream};
use devbuf_core::{Event, Result};

use crate::context::{self, PrimaryContext};
use crate::loader::{DriverError, call};
use crate::event::{CudaEvent, RawEvent};

/// Records a new event with timing on `stream`, a stream of `context`.
pub(crate) fn record_timed(
    context: &Arc<PrimaryContext>,
    stream: CUstream,
) -> Result<CudaEvent, DriverError> {
    let event = RawEvent::create_with(context.raw(), CUevent_flags::CU_EVENT_DEFAULT)?;
    event.record(stream)?;
    Ok(CudaEvent {
        event,
        timed: true,
        _context: Arc::clone(context),
    })
}

/// Milliseconds from `start` to `end`; `None` unless both are CUDA events made with timing.
pub(crate) fn elapsed_ms_since(end: &CudaEvent, start: &Event) -> Option<Result<f32>> {
    let start = start.downcast_ref::<CudaEvent>()?;
    if !(start.timed && end.timed) {
        return None;
    }
    let elapsed = || -> Result<f32, DriverError> {
        let _current = context::enter(end.event.context())?;
        let mut ms = 0.0f32;
        // SAFETY: both events are alive and were made with timing; `ms` is a valid out-pointer.
        // "If either event was last recorded in a non-NULL stream and either event is not yet
        // complete, CUDA_ERROR_NOT_READY is returned" (CUDA Driver API, cuEventElapsedTime): the
        // caller waits for `end` first.
        call("cuEventElapsedTime", || unsafe {
            sys::cuEventElapsedTime(&mut ms, start.event.raw(), end.event.raw())
        })?;
        Ok(ms)
    };
    Some(elapsed().map_err(Into::into))
}
