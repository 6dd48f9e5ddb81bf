//! Contexts: a device's primary context, retained, and a guard that makes a context current on the
//! calling thread for the length of one operation, then restores whatever was current before.
//!
//! The primary context is the one the CUDA runtime, CuPy, torch and Numba all use, so memory and
//! streams devbuf makes are theirs too, and theirs are ours. Driver calls take their context from
//! the calling thread, and Python calls us from any thread; hence [`enter`] around every call that
//! needs one.

use std::marker::PhantomData;
use std::ptr;

use cudarc::driver::sys::{self, CUcontext, CUdevice};

use crate::loader::{CONTEXT_ID_ENTRY_POINT, DriverError, call};

/// A device's primary context, retained while this value lives.
#[derive(Debug)]
pub(crate) struct PrimaryContext {
    ordinal: u32,
    device: CUdevice,
    raw: CUcontext,
    /// The context's id when retained (`cuCtxGetId`, CUDA 12.0; `None` from a driver without
    /// it): a reset gives the context a new one.
    id: Option<u64>,
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
        })
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
