//! CUDA events: points in a stream's work that other streams can wait for on the device. Timed
//! ones are made without `CU_EVENT_DISABLE_TIMING` (devbuf's ordering events keep it, since timing
//! costs) and measure the milliseconds between two of them (`cuEventElapsedTime`).

use std::any::Any;
use std::ptr;
use std::sync::Arc;

use cudarc::driver::sys::{self, CUcontext, CUevent, CUevent_flags, CUresult, CUstream};
use devbuf_core::{Error, Event, QueueEvent, Result};

use crate::context::{self, PrimaryContext};
use crate::loader::{DriverError, call};

/// An event in some context, destroyed on drop. Timing is off: we only order work with it.
#[derive(Debug)]
pub(crate) struct RawEvent {
    raw: CUevent,
    context: CUcontext,
}

impl RawEvent {
    /// Creates an event in `context`, which the caller keeps alive while the event lives.
    pub fn create(context: CUcontext) -> Result<Self, DriverError> {
        Self::create_with(context, CUevent_flags::CU_EVENT_DISABLE_TIMING)
    }

    /// Creates an event in `context` with `flags` (timing on with `CU_EVENT_DEFAULT`).
    pub fn create_with(context: CUcontext, flags: CUevent_flags) -> Result<Self, DriverError> {
        let _current = context::enter(context)?;
        let mut raw = ptr::null_mut();
        // SAFETY: `raw` is a valid out-pointer and `context` is current.
        call("cuEventCreate", || unsafe {
            sys::cuEventCreate(&mut raw, flags as u32)
        })?;
        Ok(RawEvent { raw, context })
    }

    /// Records the event after all work enqueued on `stream` so far. `stream` is a stream of the
    /// event's context, or one of the special handles 1 and 2 (resolved in that context).
    pub fn record(&self, stream: CUstream) -> Result<(), DriverError> {
        let _current = context::enter(self.context)?;
        // SAFETY: the event is alive, the stream is alive (its owner's promise) and in the current
        // context.
        call("cuEventRecord", || unsafe {
            sys::cuEventRecord(self.raw, stream)
        })
    }

    pub fn raw(&self) -> CUevent {
        self.raw
    }

    pub fn context(&self) -> CUcontext {
        self.context
    }
}

impl Drop for RawEvent {
    fn drop(&mut self) {
        // The driver releases a recorded event once it completes; waits already enqueued on it
        // are unaffected.
        if let Ok(_current) = context::enter(self.context) {
            // SAFETY: we created this event and destroy it once, in its own context.
            let _ = call("cuEventDestroy", || unsafe {
                sys::cuEventDestroy_v2(self.raw)
            });
        }
    }
}

// SAFETY: events are driver handles usable from any thread.
unsafe impl Send for RawEvent {}
// SAFETY: as above; `&RawEvent` only records, waits and queries, which the driver serialises.
unsafe impl Sync for RawEvent {}

/// An event a [`crate::CudaQueue`] recorded on its stream; what its `record_event` returns.
#[derive(Debug)]
pub struct CudaEvent {
    pub(crate) event: RawEvent,
    /// Whether the event was made with timing (see `timing`).
    pub(crate) timed: bool,
    /// The device's primary context, kept alive while the event lives (dropped after `event`).
    pub(crate) primary: Arc<PrimaryContext>,
}

impl CudaEvent {
    /// Records a new event on `stream`, a stream of `context`.
    pub(crate) fn record(
        context: &Arc<PrimaryContext>,
        stream: CUstream,
    ) -> Result<Self, DriverError> {
        Self::record_in(context, context.raw(), stream)
    }

    /// Records a new event on `stream`, a stream of `event_context` (another library's), keeping
    /// `context` alive with it.
    pub(crate) fn record_in(
        context: &Arc<PrimaryContext>,
        event_context: CUcontext,
        stream: CUstream,
    ) -> Result<Self, DriverError> {
        let event = RawEvent::create(event_context)?;
        event.record(stream)?;
        Ok(CudaEvent {
            event,
            timed: false,
            primary: Arc::clone(context),
        })
    }

    /// The `CUevent` handle, for libraries that wait on it themselves.
    pub fn handle(&self) -> usize {
        self.event.raw() as usize
    }

    pub(crate) fn raw(&self) -> CUevent {
        self.event.raw()
    }
}

impl QueueEvent for CudaEvent {
    fn wait(&self) -> Result<()> {
        let _current = context::enter(self.event.context)?;
        // SAFETY: the event is alive and recorded.
        call("cuEventSynchronize", || unsafe {
            sys::cuEventSynchronize(self.event.raw)
        })?;
        Ok(())
    }

    fn is_complete(&self) -> Result<bool> {
        let _current = context::enter(self.event.context)?;
        // SAFETY: the event is alive and recorded.
        match call("cuEventQuery", || unsafe {
            sys::cuEventQuery(self.event.raw)
        }) {
            Ok(()) => Ok(true),
            Err(err) if err.is(CUresult::CUDA_ERROR_NOT_READY) => Ok(false),
            Err(err) => Err(err.into()),
        }
    }

    fn elapsed_ms_since(&self, start: &Event) -> Option<Result<f32>> {
        elapsed_ms_since(self, start)
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// Makes work enqueued on `stream` (of `context`) from now on wait for `event`, without blocking
/// the host.
pub(crate) fn enqueue_wait(
    stream: CUstream,
    context: CUcontext,
    event: CUevent,
) -> Result<(), DriverError> {
    let _current = context::enter(context)?;
    // SAFETY: the stream is alive (ours, or its owner's promise) in the current context, and the
    // event is alive and recorded; waiting on another context's event is allowed.
    call("cuStreamWaitEvent", || unsafe {
        sys::cuStreamWaitEvent(stream, event, 0)
    })
}

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
        primary: Arc::clone(context),
    })
}

/// Milliseconds from `start` to `end`; `None` unless both are CUDA events made with timing.
pub(crate) fn elapsed_ms_since(end: &CudaEvent, start: &Event) -> Option<Result<f32>> {
    let start = start.downcast_ref::<CudaEvent>()?;
    if !(start.timed && end.timed) {
        return None;
    }
    // "cudaEventElapsedTime() will fail if the two input events are associated to different
    // devices" (CUDA Programming Guide, multi-device "Stream and Event Behavior"): say so in
    // devbuf's words rather than with the driver's bare CUDA_ERROR_INVALID_HANDLE.
    let (from, to) = (start.primary.ordinal(), end.primary.ordinal());
    if from != to {
        return Some(Err(Error::invalid(
            "start, end",
            format!(
                "the events were recorded on two devices (start on cuda:{from}, end on \
                 cuda:{to}); CUDA times events of one device only"
            ),
        )));
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
