//! [`FailureCallbackResource`]: asks a callback what to do when upstream is out of memory.

use std::fmt;
use std::ptr::NonNull;
use std::sync::Arc;

use super::{Adaptor, MemoryResource};
use crate::{Error, MemKind, Result};

/// What a [`FailureCallbackResource`] calls when upstream refuses an allocation: the kind and
/// size asked for and upstream's error. It frees what it can (a cache spilled, a collection run)
/// and returns whether to try again; an error it returns reaches the caller instead.
pub type FailureCallback = dyn Fn(MemKind, usize, &Error) -> Result<bool> + Send + Sync;

/// Passes allocations on to `upstream`; when upstream is out of memory, calls its callback and
/// tries again for as long as the callback says so (RMM's `failure_callback_resource_adaptor`,
/// how Dask and cuDF spill). Other errors reach the caller at once.
pub struct FailureCallbackResource {
    upstream: Arc<dyn MemoryResource>,
    callback: Box<FailureCallback>,
}

impl fmt::Debug for FailureCallbackResource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FailureCallbackResource")
            .field("upstream", &self.upstream)
            .finish_non_exhaustive()
    }
}

impl FailureCallbackResource {
    /// Allocates from `upstream`, calling `callback` on each out-of-memory error.
    pub fn new(
        upstream: Arc<dyn MemoryResource>,
        callback: impl Fn(MemKind, usize, &Error) -> Result<bool> + Send + Sync + 'static,
    ) -> Arc<Self> {
        Arc::new(FailureCallbackResource {
            upstream,
            callback: Box::new(callback),
        })
    }
}

impl Adaptor for FailureCallbackResource {
    fn upstream(&self) -> &Arc<dyn MemoryResource> {
        &self.upstream
    }

    fn serve(&self, kind: MemKind, size: usize, align: usize) -> Result<NonNull<u8>> {
        loop {
            match self.upstream.allocate(kind, size, align) {
                Err(error @ Error::OutOfMemory { .. }) => {
                    if !(self.callback)(kind, size, &error)? {
                        return Err(error);
                    }
                }
                served => return served,
            }
        }
    }
}
