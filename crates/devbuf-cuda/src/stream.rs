//! A queue's stream: one it created (non-blocking, destroyed with the queue) or one it borrows.

use std::ptr;
use std::sync::Arc;

use cudarc::driver::sys::{self, CUresult, CUstream, CUstream_flags};

use devbuf_core::{StreamOptions, StreamOwner};

use crate::context::{self, PrimaryContext};
use crate::loader::{DriverError, call};

/// A stream in a primary context.
#[derive(Debug)]
pub(crate) struct Stream {
    raw: CUstream,
    owned: bool,
    context: Arc<PrimaryContext>,
    /// What keeps a borrowed stream alive (another library's stream object), if we hold it.
    owner: Option<StreamOwner>,
}

// SAFETY: a CUstream is a driver handle usable from any thread; the driver serialises the work
// enqueued on it from several threads.
unsafe impl Send for Stream {}
// SAFETY: as above; `&Stream` only hands out the handle.
unsafe impl Sync for Stream {}

impl Stream {
    /// A new stream that does not synchronise with the legacy default stream, so that other
    /// libraries' default-stream work does not serialise with ours.
    pub fn create(context: &Arc<PrimaryContext>) -> Result<Self, DriverError> {
        let _current = context.enter()?;
        let mut raw = ptr::null_mut();
        // SAFETY: `raw` is a valid out-pointer and the context is current.
        call("cuStreamCreate", || unsafe {
            sys::cuStreamCreate(&mut raw, CUstream_flags::CU_STREAM_NON_BLOCKING as u32)
        })?;
        Ok(Stream {
            raw,
            owned: true,
            context: Arc::clone(context),
            owner: None,
        })
    }

    /// A new stream made as `options` ask: blocking or not with the legacy default stream, at a
    /// priority (cuda.core's and CuPy's user streams).
    pub fn create_with(
        context: &Arc<PrimaryContext>,
        options: StreamOptions,
    ) -> Result<Self, DriverError> {
        let _current = context.enter()?;
        let flags = if options.non_blocking {
            CUstream_flags::CU_STREAM_NON_BLOCKING
        } else {
            CUstream_flags::CU_STREAM_DEFAULT
        };
        let mut raw = ptr::null_mut();
        // SAFETY: `raw` is a valid out-pointer and the context is current. A priority outside the
        // device's range is valid: "If the specified priority is outside the numerical range
        // returned by cuCtxGetStreamPriorityRange, it will automatically be clamped to the lowest
        // or the highest number in the range" (CUDA Driver API, cuStreamCreateWithPriority).
        call("cuStreamCreateWithPriority", || unsafe {
            sys::cuStreamCreateWithPriority(&mut raw, flags as u32, options.priority.unwrap_or(0))
        })?;
        Ok(Stream {
            raw,
            owned: true,
            context: Arc::clone(context),
            owner: None,
        })
    }

    /// Borrows `raw`, a stream of `context` (or one of the special handles 1 and 2) that its owner
    /// keeps alive for as long as this value lives.
    pub fn borrow(context: &Arc<PrimaryContext>, raw: CUstream) -> Self {
        Stream {
            raw,
            owned: false,
            context: Arc::clone(context),
            owner: None,
        }
    }

    /// Borrows `raw` as [`Stream::borrow`] does, holding `owner`, which keeps it alive, until the
    /// stream is dropped.
    pub fn borrow_owned_by(
        context: &Arc<PrimaryContext>,
        raw: CUstream,
        owner: StreamOwner,
    ) -> Self {
        Stream {
            raw,
            owned: false,
            context: Arc::clone(context),
            owner: Some(owner),
        }
    }

    pub fn raw(&self) -> CUstream {
        self.raw
    }

    pub fn context(&self) -> &Arc<PrimaryContext> {
        &self.context
    }

    /// Whether the stream still exists: a borrowed stream whose owner destroyed it does not
    /// ([`devbuf_core::KeepsStream::stream_alive`]).
    pub fn is_alive(&self) -> bool {
        self.owner.as_ref().is_none_or(|owner| owner.stream_alive())
    }

    /// Whether all work enqueued so far has completed, without blocking.
    pub fn is_idle(&self) -> Result<bool, DriverError> {
        // SAFETY: the stream is alive (owned, or kept alive by its owner).
        let query = || call("cuStreamQuery", || unsafe { sys::cuStreamQuery(self.raw) });
        match context::on_stream(self.context.raw(), self.raw, query) {
            Ok(()) => Ok(true),
            Err(err) if err.is(CUresult::CUDA_ERROR_NOT_READY) => Ok(false),
            Err(err) => Err(err),
        }
    }

    /// Blocks until all work enqueued so far has completed.
    pub fn synchronize(&self) -> Result<(), DriverError> {
        context::on_stream(self.context.raw(), self.raw, || {
            // SAFETY: the stream is alive (owned, or kept alive by its owner).
            call("cuStreamSynchronize", || unsafe {
                sys::cuStreamSynchronize(self.raw)
            })
        })
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        if !self.owned {
            return;
        }
        // The driver releases the stream once work still on it completes.
        if let Ok(_current) = self.context.enter() {
            // SAFETY: we created this stream and destroy it once; its context is current.
            let _ = call("cuStreamDestroy", || unsafe {
                sys::cuStreamDestroy_v2(self.raw)
            });
        }
    }
}
