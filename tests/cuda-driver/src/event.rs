//! Events: a recorded point in a stream's work, which the host can query or wait for and other
//! streams can wait for (`cuStreamWaitEvent`), across contexts and devices.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use cudarc::driver::sys::{CUevent, CUresult, CUstream};
use parking_lot::Mutex;

use crate::context::{self, Context};
use crate::device::entry;
use crate::errors::{DriverResult, write_out};
use crate::ops::{Mark, Op};
use crate::stream::{self, Dependency, NullStream};

/// `CU_EVENT_DISABLE_TIMING`, `CU_EVENT_INTERPROCESS`.
const DISABLE_TIMING: u32 = 0x2;
const INTERPROCESS: u32 = 0x4;
/// Every flag `cuEventCreate` knows: blocking sync, disable timing, interprocess.
const KNOWN_FLAGS: u32 = 0x1 | 0x2 | 0x4;
/// Handles of events count up from here, distinct from streams'.
const FIRST_HANDLE: usize = 0x5_e000_0000;

struct Recorded {
    at: Dependency,
    mark: Arc<Mark>,
}

struct Event {
    handle: usize,
    context: &'static Context,
    generation: u64,
    flags: u32,
    recorded: Mutex<Option<Recorded>>,
}

static NEXT_HANDLE: AtomicUsize = AtomicUsize::new(FIRST_HANDLE);
static EVENTS: Mutex<Vec<Arc<Event>>> = Mutex::new(Vec::new());

fn find(handle: CUevent) -> DriverResult<Arc<Event>> {
    let event = EVENTS
        .lock()
        .iter()
        .find(|event| event.handle == handle as usize)
        .cloned()
        .ok_or(CUresult::CUDA_ERROR_INVALID_HANDLE)?;
    if event.generation != event.context.generation() {
        return Err(CUresult::CUDA_ERROR_INVALID_HANDLE);
    }
    event.context.usable()?;
    Ok(event)
}

impl Event {
    /// Where the last record put it; `None` if it was never recorded.
    fn last_recorded(&self) -> Option<(Dependency, Arc<Mark>)> {
        self.recorded
            .lock()
            .as_ref()
            .map(|recorded| (recorded.at.clone(), Arc::clone(&recorded.mark)))
    }
}

/// # Safety
/// `event` is null or valid for writing a CUevent.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuEventCreate(event: *mut CUevent, flags: u32) -> CUresult {
    entry("cuEventCreate", || {
        // "CU_EVENT_INTERPROCESS must be specified along with CU_EVENT_DISABLE_TIMING."
        let timed_interprocess = flags & INTERPROCESS != 0 && flags & DISABLE_TIMING == 0;
        if flags & !KNOWN_FLAGS != 0 || timed_interprocess || event.is_null() {
            return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
        }
        let context = context::current()?;
        let created = Arc::new(Event {
            handle: NEXT_HANDLE.fetch_add(0x10, Ordering::Relaxed),
            context,
            generation: context.generation(),
            flags,
            recorded: Mutex::new(None),
        });
        EVENTS.lock().push(Arc::clone(&created));
        // SAFETY: the caller's out-pointer, checked non-null.
        unsafe { write_out(event, created.handle as CUevent) }
    })
}

fn record(event: CUevent, stream: CUstream, flags: u32, null: NullStream) -> CUresult {
    entry("cuEventRecord", || {
        // Only CU_EVENT_RECORD_EXTERNAL (1), which matters for graphs alone.
        if flags & !1 != 0 {
            return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
        }
        let event = find(event)?;
        let stream = stream::resolve_as(stream, null)?;
        if !std::ptr::eq(event.context, stream.context) {
            return Err(CUresult::CUDA_ERROR_INVALID_HANDLE);
        }
        let mark = Arc::new(Mark::default());
        let sequence = stream.enqueue(Op::Mark(Arc::clone(&mark)), vec![]);
        *event.recorded.lock() = Some(Recorded {
            at: Dependency { stream, sequence },
            mark,
        });
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn cuEventRecord(event: CUevent, stream: CUstream) -> CUresult {
    record(event, stream, 0, NullStream::Legacy)
}

#[unsafe(no_mangle)]
pub extern "C" fn cuEventRecord_ptsz(event: CUevent, stream: CUstream) -> CUresult {
    record(event, stream, 0, NullStream::PerThread)
}

#[unsafe(no_mangle)]
pub extern "C" fn cuEventRecordWithFlags(event: CUevent, stream: CUstream, flags: u32) -> CUresult {
    record(event, stream, flags, NullStream::Legacy)
}

#[unsafe(no_mangle)]
pub extern "C" fn cuEventRecordWithFlags_ptsz(
    event: CUevent,
    stream: CUstream,
    flags: u32,
) -> CUresult {
    record(event, stream, flags, NullStream::PerThread)
}

#[unsafe(no_mangle)]
pub extern "C" fn cuEventQuery(event: CUevent) -> CUresult {
    entry("cuEventQuery", || {
        let event = find(event)?;
        match event.last_recorded() {
            Some((at, _)) if !at.is_met() => Err(CUresult::CUDA_ERROR_NOT_READY),
            _ => event.context.sticky_error(),
        }
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn cuEventSynchronize(event: CUevent) -> CUresult {
    entry("cuEventSynchronize", || {
        let event = find(event)?;
        if let Some((at, _)) = event.last_recorded() {
            at.wait();
        }
        crate::pool::release_over_thresholds();
        event.context.sticky_error()
    })
}

fn destroy(event: CUevent) -> CUresult {
    entry("cuEventDestroy", || {
        let found = find(event)?;
        // Waits already enqueued keep their own reference to the recorded point.
        EVENTS.lock().retain(|other| !Arc::ptr_eq(other, &found));
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn cuEventDestroy_v2(event: CUevent) -> CUresult {
    destroy(event)
}

#[unsafe(no_mangle)]
pub extern "C" fn cuEventDestroy(event: CUevent) -> CUresult {
    destroy(event)
}

/// # Safety
/// `milliseconds` is null or valid for writing a float.
unsafe fn elapsed(milliseconds: *mut f32, start: CUevent, end: CUevent) -> CUresult {
    entry("cuEventElapsedTime", || {
        let (start, end) = (find(start)?, find(end)?);
        if (start.flags | end.flags) & DISABLE_TIMING != 0 {
            return Err(CUresult::CUDA_ERROR_INVALID_HANDLE);
        }
        // "cudaEventElapsedTime() will fail if the two input events are associated to different
        // devices" (CUDA Programming Guide, "Stream and Event Behavior" of multi-device systems).
        // The code is the double's choice: the guide names none, and the driver's
        // cuEventElapsedTime documents CUDA_ERROR_INVALID_HANDLE for events it cannot time.
        if start.context.ordinal != end.context.ordinal {
            return Err(CUresult::CUDA_ERROR_INVALID_HANDLE);
        }
        let reached = |event: &Event| -> DriverResult<Instant> {
            let (at, mark) = event
                .last_recorded()
                .ok_or(CUresult::CUDA_ERROR_INVALID_HANDLE)?;
            if !at.is_met() {
                return Err(CUresult::CUDA_ERROR_NOT_READY);
            }
            mark.reached().ok_or(CUresult::CUDA_ERROR_NOT_READY)
        };
        let (from, to) = (reached(&start)?, reached(&end)?);
        let signed = if to >= from {
            to.duration_since(from).as_secs_f32()
        } else {
            -from.duration_since(to).as_secs_f32()
        };
        // SAFETY: the caller's out-pointer.
        unsafe { write_out(milliseconds, signed * 1000.0) }
    })
}

/// # Safety
/// `milliseconds` is null or valid for writing a float.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuEventElapsedTime(
    milliseconds: *mut f32,
    start: CUevent,
    end: CUevent,
) -> CUresult {
    // SAFETY: the same contract.
    unsafe { elapsed(milliseconds, start, end) }
}

/// CUDA 12.8's variant; the same for the double.
///
/// # Safety
/// `milliseconds` is null or valid for writing a float.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuEventElapsedTime_v2(
    milliseconds: *mut f32,
    start: CUevent,
    end: CUevent,
) -> CUresult {
    // SAFETY: the same contract.
    unsafe { elapsed(milliseconds, start, end) }
}

#[unsafe(no_mangle)]
pub extern "C" fn cuStreamWaitEvent(stream: CUstream, event: CUevent, flags: u32) -> CUresult {
    wait_event(stream, event, flags, NullStream::Legacy)
}

#[unsafe(no_mangle)]
pub extern "C" fn cuStreamWaitEvent_ptsz(stream: CUstream, event: CUevent, flags: u32) -> CUresult {
    wait_event(stream, event, flags, NullStream::PerThread)
}

fn wait_event(stream: CUstream, event: CUevent, flags: u32, null: NullStream) -> CUresult {
    entry("cuStreamWaitEvent", || {
        // CU_EVENT_WAIT_DEFAULT or CU_EVENT_WAIT_EXTERNAL (graphs only).
        if flags & !1 != 0 {
            return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
        }
        let stream = stream::resolve_as(stream, null)?;
        let event = find(event)?;
        // Waiting for an event never recorded is a no-op, as documented.
        let after = event
            .last_recorded()
            .map(|(at, _)| at)
            .into_iter()
            .collect();
        stream.enqueue(Op::Wait, after);
        Ok(())
    })
}
