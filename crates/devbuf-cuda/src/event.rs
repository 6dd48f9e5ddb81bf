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
        record(self.raw, self.context, stream)
    }

    pub fn raw(&self) -> CUevent {
        self.raw
    }

    /// The handle, which the caller now destroys (`context::destroy_event`).
    fn into_raw(self) -> CUevent {
        std::mem::ManuallyDrop::new(self).raw
    }
}

impl Drop for RawEvent {
    fn drop(&mut self) {
        context::destroy_event(self.context, self.raw);
    }
}

// SAFETY: events are driver handles usable from any thread.
unsafe impl Send for RawEvent {}
// SAFETY: as above; `&RawEvent` only records, waits and queries, which the driver serialises.
unsafe impl Sync for RawEvent {}

/// Records `event`, of `context`, after all work enqueued on `stream` so far.
fn record(event: CUevent, context: CUcontext, stream: CUstream) -> Result<(), DriverError> {
    context::on_stream(context, stream, || {
        // SAFETY: the event is alive, the stream is alive (its owner's promise) and of the
        // event's context.
        call("cuEventRecord", || unsafe {
            sys::cuEventRecord(event, stream)
        })
    })
}

/// An event a [`crate::CudaQueue`] recorded on its stream; what its `record_event` returns.
#[derive(Debug)]
pub struct CudaEvent {
    raw: CUevent,
    /// The context the event belongs to: the stream's.
    context: CUcontext,
    /// Whether the event was made with timing (see `timing`).
    pub(crate) timed: bool,
    /// Whether the event is one of `primary`'s reusable ones ([`PrimaryContext::take_event`]),
    /// given back when dropped; else it is destroyed.
    spare: bool,
    /// The device's primary context, kept alive while the event lives.
    pub(crate) primary: Arc<PrimaryContext>,
}

// SAFETY: events and contexts are driver handles usable from any thread; the context is kept
// alive by `primary` (or, for another library's stream, by its owner while the event is used).
unsafe impl Send for CudaEvent {}
// SAFETY: as above; `&CudaEvent` only waits and queries, which the driver serialises.
unsafe impl Sync for CudaEvent {}

impl CudaEvent {
    /// Records an event on `stream`, a stream of `context`: one driver call, reusing one of the
    /// context's events.
    pub(crate) fn record(
        context: &Arc<PrimaryContext>,
        stream: CUstream,
    ) -> Result<Self, DriverError> {
        Self::record_in(context, context.raw(), stream)
    }

    /// Records an event on `stream`, a stream of `event_context` (another library's), keeping
    /// `context` alive with it.
    pub(crate) fn record_in(
        context: &Arc<PrimaryContext>,
        event_context: CUcontext,
        stream: CUstream,
    ) -> Result<Self, DriverError> {
        let spare = event_context == context.raw();
        let raw = if spare {
            context.take_event()?
        } else {
            // Another library's context, which may go before ours: an event of its own.
            RawEvent::create(event_context)?.into_raw()
        };
        // Dropped (given back or destroyed) if the record fails.
        let event = CudaEvent {
            raw,
            context: event_context,
            timed: false,
            spare,
            primary: Arc::clone(context),
        };
        record(raw, event_context, stream)?;
        Ok(event)
    }

    /// The `CUevent` handle, for libraries that wait on it themselves.
    pub fn handle(&self) -> usize {
        self.raw as usize
    }

    pub(crate) fn raw(&self) -> CUevent {
        self.raw
    }
}

impl Drop for CudaEvent {
    fn drop(&mut self) {
        if self.spare {
            self.primary.give_back_event(self.raw);
        } else {
            context::destroy_event(self.context, self.raw);
        }
    }
}

impl QueueEvent for CudaEvent {
    fn wait(&self) -> Result<()> {
        context::without_context(self.context, || {
            // SAFETY: the event is alive and recorded.
            call("cuEventSynchronize", || unsafe {
                sys::cuEventSynchronize(self.raw)
            })
        })?;
        Ok(())
    }

    fn is_complete(&self) -> Result<bool> {
        // SAFETY: the event is alive and recorded.
        let query = || call("cuEventQuery", || unsafe { sys::cuEventQuery(self.raw) });
        match context::without_context(self.context, query) {
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
    context::on_stream(context, stream, || {
        // SAFETY: the stream is alive (ours, or its owner's promise) in `context`, and the event
        // is alive and recorded; waiting on another context's event is allowed.
        call("cuStreamWaitEvent", || unsafe {
            sys::cuStreamWaitEvent(stream, event, 0)
        })
    })
}

/// Records a new event with timing on `stream`, a stream of `context`.
pub(crate) fn record_timed(
    context: &Arc<PrimaryContext>,
    stream: CUstream,
) -> Result<CudaEvent, DriverError> {
    let created = RawEvent::create_with(context.raw(), CUevent_flags::CU_EVENT_DEFAULT)?;
    let event = CudaEvent {
        raw: created.into_raw(),
        context: context.raw(),
        timed: true,
        spare: false,
        primary: Arc::clone(context),
    };
    record(event.raw, event.context, stream)?;
    Ok(event)
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
        let _current = context::enter(end.context)?;
        let mut ms = 0.0f32;
        // SAFETY: both events are alive and were made with timing; `ms` is a valid out-pointer.
        // "If either event was last recorded in a non-NULL stream and either event is not yet
        // complete, CUDA_ERROR_NOT_READY is returned" (CUDA Driver API, cuEventElapsedTime): the
        // caller waits for `end` first.
        call("cuEventElapsedTime", || unsafe {
            sys::cuEventElapsedTime(&mut ms, start.raw, end.raw)
        })?;
        Ok(ms)
    };
    Some(elapsed().map_err(Into::into))
}
