//! Contexts: a device's primary context, retained, and a guard that makes a context current on the
//! calling thread for the length of one operation, then restores whatever was current before.
//!
//! The primary context is the one the CUDA runtime, CuPy, torch and Numba all use, so memory and
//! streams devbuf makes are theirs too, and theirs are ours. Driver calls without a stream take
//! their context from the calling thread, and Python calls us from any thread; hence [`enter`]
//! around every such call. A call on a stream takes the stream's context ([`on_stream`]): it costs
//! no context call at all, whatever is current.

use std::marker::PhantomData;
use std::ptr;

use cudarc::driver::sys::{self, CUcontext, CUdevice, CUevent, CUevent_flags, CUresult, CUstream};
use parking_lot::Mutex;

use crate::loader::{CONTEXT_ID_ENTRY_POINT, DriverError, call};
use crate::protocol::{CU_STREAM_LEGACY, CU_STREAM_PER_THREAD};

/// How many events a context keeps for reuse ([`PrimaryContext::take_event`]): more than the
/// work one allocation or one stream keeps pending at a time.
const SPARE_EVENTS: usize = 64;

/// A device's primary context, retained while this value lives.
#[derive(Debug)]
pub(crate) struct PrimaryContext {
    ordinal: u32,
    device: CUdevice,
    raw: CUcontext,
    /// The context's id when retained (`cuCtxGetId`, CUDA 12.0; `None` from a driver without
    /// it): a reset gives the context a new one.
    id: Option<u64>,
    /// Ordering events of this context (timing off) no longer in use, kept for the next record:
    /// `cuEventCreate` and `cuEventDestroy` are two driver calls per ordering point otherwise.
    /// Raw handles (`CUevent` as an address), destroyed with the context's last retain.
    spare_events: Mutex<Vec<usize>>,
}

// SAFETY: a CUcontext is a driver handle usable from any thread (each call makes it current on its
// own thread first); retain and release are thread-safe.
unsafe impl Send for PrimaryContext {}
// SAFETY: as above; `&PrimaryContext` only hands out the handle.
unsafe impl Sync for PrimaryContext {}

impl PrimaryContext {
    /// Retains device `ordinal`'s primary context (creating it if no library has yet).
    pub fn retain(ordinal: u32) -> Result<Self, DriverError> {
        let mut device = 0;
        // SAFETY: `device` is a valid out-pointer; a bad ordinal is an error code.
        call("cuDeviceGet", || unsafe {
            sys::cuDeviceGet(&mut device, ordinal as i32)
        })?;
        let mut raw = ptr::null_mut();
        // SAFETY: `raw` is a valid out-pointer and `device` a device handle from the driver.
        call("cuDevicePrimaryCtxRetain", || unsafe {
            sys::cuDevicePrimaryCtxRetain(&mut raw, device)
        })?;
        let id = context_id(raw).ok();
        Ok(PrimaryContext {
            ordinal,
            device,
            raw,
            id,
            spare_events: Mutex::new(Vec::new()),
        })
    }

    /// An event of this context, timing off, to record ([`PrimaryContext::give_back_event`] when
    /// done): a spare one, or a new one. "Once this call has returned, any functions (including
    /// cuEventRecord() and cuEventDestroy()) may be called on hEvent again, and subsequent calls
    /// will not have any effect on hStream" (CUDA Driver API, cuStreamWaitEvent): a wait already
    /// enqueued keeps the record it saw, so an event may be recorded again once nobody holds it.
    pub fn take_event(&self) -> Result<CUevent, DriverError> {
        if let Some(event) = self.spare_events.lock().pop() {
            return Ok(event as CUevent);
        }
        let _current = self.enter()?;
        let mut event = ptr::null_mut();
        // SAFETY: `event` is a valid out-pointer and the context is current.
        call("cuEventCreate", || unsafe {
            sys::cuEventCreate(&mut event, CUevent_flags::CU_EVENT_DISABLE_TIMING as u32)
        })?;
        Ok(event)
    }

    /// Keeps `event`, one of [`PrimaryContext::take_event`]'s that nobody holds any more, for the
    /// next record; destroys it when enough are kept.
    pub fn give_back_event(&self, event: CUevent) {
        let mut spare = self.spare_events.lock();
        if spare.len() < SPARE_EVENTS {
            spare.push(event as usize);
            return;
        }
        drop(spare);
        destroy_event(self.raw, event);
    }

    /// An error once the context is no longer the one retained: another library reset the
    /// device's primary context (Numba's `cuda.close()`, the runtime's `cudaDeviceReset`), which
    /// "destroy[s] all allocations and reset[s] all state on the primary context" (the
    /// documentation of `cuDevicePrimaryCtxReset`). The driver tells so by a new id for the
    /// context, or by refusing to name it; a driver without `cuCtxGetId` cannot tell.
    pub fn check_not_reset(&self) -> Result<(), DriverError> {
        let Some(retained) = self.id else {
            return Ok(());
        };
        match context_id(self.raw) {
            Ok(id) if id == retained => Ok(()),
            Ok(_) => Err(DriverError {
                operation: CONTEXT_ID_ENTRY_POINT,
                code: Some(sys::CUresult::CUDA_ERROR_CONTEXT_IS_DESTROYED),
                message: format!(
                    "the primary context of cuda:{} was reset since devbuf retained it (by \
                     another library: Numba's cuda.close(), cudaDeviceReset), which freed every \
                     allocation in it",
                    self.ordinal
                ),
            }),
            Err(err) => Err(err),
        }
    }

    /// The device's ordinal.
    pub fn ordinal(&self) -> u32 {
        self.ordinal
    }

    /// The raw context handle.
    pub fn raw(&self) -> CUcontext {
        self.raw
    }

    /// Makes this context current on the calling thread until the guard drops.
    pub fn enter(&self) -> Result<Current, DriverError> {
        enter(self.raw)
    }

    /// Blocks until all work in this context, on every stream of every library, has completed.
    pub fn synchronize(&self) -> Result<(), DriverError> {
        let _current = self.enter()?;
        // SAFETY: the context is retained and current on this thread.
        call("cuCtxSynchronize", || unsafe { sys::cuCtxSynchronize() })
    }
}

impl Drop for PrimaryContext {
    fn drop(&mut self) {
        for event in self.spare_events.get_mut().drain(..) {
            destroy_event(self.raw, event as CUevent);
        }
        // SAFETY: this value holds exactly one retain of `device`'s primary context. A failure (the
        // driver already shut down at process exit) leaves nothing to release.
        let _ = call("cuDevicePrimaryCtxRelease", || unsafe {
            sys::cuDevicePrimaryCtxRelease_v2(self.device)
        });
    }
}

/// Blocks until all work has completed in the primary context of every device where one is active
/// (retained by devbuf or another library): other libraries' work on memory handed to them may run
/// on any device, since pinned and managed memory is reachable from every device, and device memory
/// through copies.
pub(crate) fn synchronize_active_primary_contexts(device_count: u32) -> Result<(), DriverError> {
    for ordinal in 0..device_count {
        let mut device = 0;
        // SAFETY: `device` is a valid out-pointer; a bad ordinal is an error code.
        call("cuDeviceGet", || unsafe {
            sys::cuDeviceGet(&mut device, ordinal as i32)
        })?;
        let (mut flags, mut active) = (0u32, 0i32);
        // SAFETY: valid out-pointers and a device handle from the driver.
        call("cuDevicePrimaryCtxGetState", || unsafe {
            sys::cuDevicePrimaryCtxGetState(device, &mut flags, &mut active)
        })?;
        if active != 0 {
            PrimaryContext::retain(ordinal)?.synchronize()?;
        }
    }
    Ok(())
}

/// The id the driver gives `context` (`cuCtxGetId`): "unique for the life of the program", so a
/// context made again, after a reset, has another.
fn context_id(context: CUcontext) -> Result<u64, DriverError> {
    let mut id = 0;
    // SAFETY: `id` is a valid out-pointer; a stale or destroyed context is an error code.
    call("cuCtxGetId", || unsafe {
        sys::cuCtxGetId(context, &mut id)
    })?;
    Ok(id)
}

/// Destroys `event`, of `context`. The driver releases a recorded event once it completes; waits
/// already enqueued on it are unaffected. A failure (the driver already shut down at process exit)
/// leaves nothing to destroy.
pub(crate) fn destroy_event(context: CUcontext, event: CUevent) {
    if let Ok(_current) = enter(context) {
        // SAFETY: the caller created this event in `context` and destroys it once.
        let _ = call("cuEventDestroy", || unsafe {
            sys::cuEventDestroy_v2(event)
        });
    }
}

/// Runs `operation`, one driver call on `stream` (a stream of `context`), without making a
/// context current: the driver takes the context from the stream handle. The CUDA Programming
/// Guide says so of the runtime built on it ("Stream and Event Behavior", multi-device: "A memory
/// copy will succeed even if it is issued to a stream that is not associated to the current
/// device"; "cudaStreamWaitEvent() will succeed even if the input stream and input event are
/// associated to different devices"), and `cuMemAllocAsync` allocates "from the memory pool
/// current to the stream's device". So the hot paths cost no context call, whatever the thread has
/// current (issue 46: the first GPU run measured devbuf's per-call context handling at 3-5x the
/// bare allocation pair). The special handles 1 and 2 name a default stream *of the current
/// context*: for them `context` is made current. A driver that wants a current context anyway
/// answers CUDA_ERROR_INVALID_CONTEXT and did nothing: the call is made again with `context`
/// current.
pub(crate) fn on_stream<T>(
    context: CUcontext,
    stream: CUstream,
    operation: impl Fn() -> Result<T, DriverError>,
) -> Result<T, DriverError> {
    if matches!(stream as usize, 0 | CU_STREAM_LEGACY | CU_STREAM_PER_THREAD) {
        let _current = enter(context)?;
        return operation();
    }
    without_context(context, operation)
}

/// Runs `operation`, a driver call on a handle of `context` (a stream or an event: "cudaEventSynchronize()
/// and cudaEventQuery() will succeed even if the input event is associated to a device that is
/// different from the current device", the same section), without making a context current; made
/// again with `context` current where the driver answers CUDA_ERROR_INVALID_CONTEXT.
pub(crate) fn without_context<T>(
    context: CUcontext,
    operation: impl Fn() -> Result<T, DriverError>,
) -> Result<T, DriverError> {
    match operation() {
        Err(err) if err.is(CUresult::CUDA_ERROR_INVALID_CONTEXT) => {
            let _current = enter(context)?;
            operation()
        }
        done => done,
    }
}

/// Proof that a context is current on this thread; restores the previous one when dropped.
/// Not `Send`: the context stack it pops is the creating thread's.
#[must_use]
pub(crate) struct Current {
    pushed: bool,
    _thread_bound: PhantomData<*const ()>,
}

/// Makes `context` current on the calling thread until the returned guard drops. Costs one
/// `cuCtxGetCurrent` when the context already is current (the common case).
pub(crate) fn enter(context: CUcontext) -> Result<Current, DriverError> {
    let mut current = ptr::null_mut();
    // SAFETY: `current` is a valid out-pointer.
    call("cuCtxGetCurrent", || unsafe {
        sys::cuCtxGetCurrent(&mut current)
    })?;
    let pushed = current != context;
    if pushed {
        // SAFETY: `context` is a live context: the caller holds a retain on it, or (for a foreign
        // stream's context) the stream's owner keeps it alive for the duration of the call.
        call("cuCtxPushCurrent", || unsafe {
            sys::cuCtxPushCurrent_v2(context)
        })?;
    }
    Ok(Current {
        pushed,
        _thread_bound: PhantomData,
    })
}

impl Drop for Current {
    fn drop(&mut self) {
        if self.pushed {
            let mut popped = ptr::null_mut();
            // SAFETY: this guard pushed one context on this thread (it is not Send) and guards drop
            // in reverse order of creation, so the top of the stack is ours.
            let _ = call("cuCtxPopCurrent", || unsafe {
                sys::cuCtxPopCurrent_v2(&mut popped)
            });
        }
    }
}
