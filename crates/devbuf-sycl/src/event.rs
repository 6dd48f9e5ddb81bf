//! [`SyclEvent`]: a point in a SYCL queue's work, and the barriers that make one where devbuf's
//! last command does not cover what it must (other libraries' work on a queue, another queue's
//! event).

use std::any::Any;
use std::sync::Arc;
use std::time::{Duration, Instant};

use devbuf_core::{Error, ExportedHandle, QueueEvent, Result};
use devbuf_sycl_sys as sys;

use crate::loader::SYCL;
use crate::raw::{RawEvent, RawQueue, owned_handle};

/// Runs `call`, a submission to the SYCL runtime or a wait, as a call that may block
/// ([`devbuf_core::blocking`]: Python's GIL released): a submission waits for the scheduler's
/// lock, which another thread may hold while it waits for a host task, and dpnp's host tasks take
/// the GIL (docs/architecture.md, "Blocking calls and the GIL").
pub(crate) fn through_the_scheduler<T>(call: impl FnOnce() -> T) -> T {
    devbuf_core::blocking(call)
}

/// Submits a barrier on `queue`: its event completes after all work enqueued there so far.
pub(crate) fn barrier(queue: &RawQueue) -> Result<RawEvent> {
    // SAFETY: the queue is live; the call catches the runtime's exceptions.
    let event = through_the_scheduler(|| unsafe {
        queue.rt.api().DPCTLQueue_SubmitBarrier(queue.as_ptr())
    });
    // SAFETY: `event` is null or an event we own.
    unsafe { RawEvent::from_raw(queue.rt, event) }.ok_or_else(|| {
        Error::runtime(
            SYCL,
            "DPCTLQueue_SubmitBarrier",
            "the SYCL runtime refused it",
        )
    })
}

/// Submits a barrier on `queue` that waits for `event` (of the same runtime): commands submitted
/// there later run after it, and the host does not block.
pub(crate) fn barrier_for(queue: &RawQueue, event: &SyclEvent) -> Result<RawEvent> {
    let dependencies = [event.event.as_ptr()];
    // SAFETY: the queue and the event are live and of one runtime; the call catches the
    // runtime's exceptions and returns the barrier's event, which we own.
    let barrier = through_the_scheduler(|| unsafe {
        queue.rt.api().DPCTLQueue_SubmitBarrierForEvents(
            queue.as_ptr(),
            dependencies.as_ptr(),
            dependencies.len(),
        )
    });
    // SAFETY: `barrier` is null or an event we own.
    unsafe { RawEvent::from_raw(queue.rt, barrier) }.ok_or_else(|| {
        Error::runtime(
            SYCL,
            "DPCTLQueue_SubmitBarrierForEvents",
            "the SYCL runtime refused it",
        )
    })
}

/// A point in a SYCL queue's work: the event of its last command, or of a barrier.
#[derive(Debug)]
pub struct SyclEvent {
    pub(crate) event: Arc<RawEvent>,
    /// The identity of the [`SyclQueue`] that recorded it.
    pub(crate) recorded_by: Arc<()>,
    /// Whether it was recorded on a profiling queue for its time
    /// ([`devbuf_core::Queue::record_timed_event`]).
    pub(crate) timed: bool,
}

impl SyclEvent {
    /// A fresh owned copy of the event as a "SyclEventRef" payload (destroyed with
    /// `DPCTLEvent_Delete`), for libraries that take dpctl's events.
    pub(crate) fn export_handle(&self) -> Option<ExportedHandle> {
        let api = self.event.rt.api();
        let delete = *api.DPCTLEvent_Delete.as_ref().ok()?;
        // SAFETY: the event is live; Copy returns a new handle, or null.
        let copy = unsafe { api.DPCTLEvent_Copy(self.event.as_ptr()) };
        owned_handle(c"SyclEventRef", copy, delete)
    }

    /// When its command ended, in the device's nanoseconds, once it has (waited for here: SYCL
    /// has no timestamp for a command that has not run).
    fn end_ns(&self) -> Result<u64> {
        self.wait()?;
        // SAFETY: the event is live and of a profiling queue (`timed`); the call catches the
        // runtime's exceptions.
        Ok(unsafe {
            self.event
                .rt
                .api()
                .DPCTLEvent_GetProfilingInfoEnd(self.event.as_ptr())
        })
    }

    /// The runtime's own wait: for an event whose status it cannot give, or still pending after
    /// `wait`'s polling.
    fn wait_inside_the_runtime(&self) -> Result<()> {
        // SAFETY: the event is live; the call catches the runtime's exceptions.
        unsafe { self.event.rt.api().DPCTLEvent_Wait(self.event.as_ptr()) };
        match self.status() {
            sys::DPCTLSyclEventStatusType_DPCTL_COMPLETE => Ok(()),
            status => Err(Error::runtime(
                SYCL,
                "DPCTLEvent_Wait",
                format!("the event is not complete after waiting (status {status})"),
            )),
        }
    }

    fn status(&self) -> sys::DPCTLSyclEventStatusType {
        // SAFETY: the event is live; the call catches the runtime's exceptions.
        unsafe {
            self.event
                .rt
                .api()
                .DPCTLEvent_GetCommandExecutionStatus(self.event.as_ptr())
        }
    }
}

impl QueueEvent for SyclEvent {
    /// Asks for the event's status until it is complete rather than waiting inside the runtime
    /// (`DPCTLEvent_Wait`): a SYCL wait holds the scheduler's graph lock while it waits for host
    /// tasks before the event, dpnp's host tasks take the GIL, and a thread holding the GIL (dpnp
    /// submitting on another thread) waits for that lock: a deadlock, seen with dpnp working on
    /// other threads (docs/architecture.md, "Blocking calls and the GIL"). The runtime enqueues
    /// work held behind a host task when the task ends, so the status completes without our
    /// wait. Past `POLLING`, or for a status the runtime cannot give, the runtime's own wait
    /// takes over: it also pushes work the runtime has not started (a random ordering-machine
    /// run under load stalled once with every waiter polling).
    fn wait(&self) -> Result<()> {
        /// Yields before the first sleep: most waits end within microseconds.
        const YIELDS: u32 = 64;
        const LONGEST_PAUSE: Duration = Duration::from_micros(100);
        const POLLING: Duration = Duration::from_millis(200);
        through_the_scheduler(|| {
            let started = Instant::now();
            let (mut yields, mut pause) = (0, Duration::from_micros(1));
            loop {
                match self.status() {
                    sys::DPCTLSyclEventStatusType_DPCTL_COMPLETE => return Ok(()),
                    sys::DPCTLSyclEventStatusType_DPCTL_SUBMITTED
                    | sys::DPCTLSyclEventStatusType_DPCTL_RUNNING
                        if started.elapsed() < POLLING => {}
                    _ => return self.wait_inside_the_runtime(),
                }
                if yields < YIELDS {
                    yields = yields.saturating_add(1);
                    std::thread::yield_now();
                } else {
                    std::thread::sleep(pause);
                    pause = pause.saturating_mul(2).min(LONGEST_PAUSE);
                }
            }
        })
    }

    fn is_complete(&self) -> Result<bool> {
        match self.status() {
            sys::DPCTLSyclEventStatusType_DPCTL_UNKNOWN_STATUS => Err(Error::runtime(
                SYCL,
                "DPCTLEvent_GetCommandExecutionStatus",
                "the SYCL runtime could not say",
            )),
            status => Ok(status == sys::DPCTLSyclEventStatusType_DPCTL_COMPLETE),
        }
    }

    fn elapsed_ms_since(&self, start: &devbuf_core::Event) -> Option<Result<f32>> {
        let start = start.downcast_ref::<SyclEvent>()?;
        if !(self.timed && start.timed) {
            return None;
        }
        Some((|| {
            let (from, to) = (start.end_ns()?, self.end_ns()?);
            Ok(((to as f64 - from as f64) / 1e6) as f32)
        })())
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
