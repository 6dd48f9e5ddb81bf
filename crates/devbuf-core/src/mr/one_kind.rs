//! [`OneKindResource`]: RMM's resources, each of which serves one kind of memory
//! (`CudaMemoryResource` device memory, `ManagedMemoryResource` managed, `PinnedHostMemoryResource`
//! pinned host), over devbuf's per-allocation kinds.

use std::ptr::NonNull;
use std::sync::Arc;

use super::{Adaptor, FreeAfter, MemoryResource};
use crate::{Error, MemKind, Result};

/// Serves every allocation with `kind` memory from `upstream`, whatever kind is asked: a buffer
/// allocated through it, directly or as the current resource of any kind, is of `kind`
/// ([`MemoryResource::serves`]). The adaptors and pools above it serve that kind too.
#[derive(Debug)]
pub struct OneKindResource {
    upstream: Arc<dyn MemoryResource>,
    kind: MemKind,
}

impl OneKindResource {
    /// `upstream`'s `kind` memory only; an error naming `kind` when `upstream`'s device has no
    /// such memory.
    pub fn new(upstream: Arc<dyn MemoryResource>, kind: MemKind) -> Result<Arc<Self>> {
        let device = &upstream.queue().device().selector;
        if !upstream.queue().supports(kind) {
            return Err(Error::invalid(
                "kind",
                format!("{device} has no {kind} memory"),
            ));
        }
        Ok(Arc::new(OneKindResource { upstream, kind }))
    }
}

impl Adaptor for OneKindResource {
    fn upstream(&self) -> &Arc<dyn MemoryResource> {
        &self.upstream
    }

    fn serves(&self, _asked: MemKind, _size: usize, _align: usize) -> MemKind {
        self.kind
    }

    fn serve(&self, _kind: MemKind, size: usize, align: usize) -> Result<NonNull<u8>> {
        self.upstream.allocate(self.kind, size, align)
    }

    unsafe fn take_back(
        &self,
        ptr: NonNull<u8>,
        _kind: MemKind,
        size: usize,
        align: usize,
        after: FreeAfter,
    ) {
        // SAFETY: forwarded from our caller; `serve` allocated `ptr` as `self.kind` upstream.
        unsafe { self.upstream.deallocate(ptr, self.kind, size, align, after) }
    }
}
