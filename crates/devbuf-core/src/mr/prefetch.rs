//! [`PrefetchResource`]: shared memory migrated to the device as it is allocated.

use std::ptr::NonNull;
use std::sync::Arc;

use super::{Adaptor, FreeAfter, MemoryResource};
use crate::{Error, Location, MemKind, Result};

/// Passes allocations on to `upstream` and enqueues a prefetch of each shared one to the queue's
/// device (RMM's `prefetch_resource_adaptor`), so that kernels find it there. On a backend
/// without prefetch the memory is served as it is; any other failure to prefetch gives the
/// memory back and is the allocation's error.
#[derive(Debug)]
pub struct PrefetchResource {
    upstream: Arc<dyn MemoryResource>,
}

impl PrefetchResource {
    /// Prefetches the shared allocations made through it from `upstream`.
    pub fn new(upstream: Arc<dyn MemoryResource>) -> Arc<Self> {
        Arc::new(PrefetchResource { upstream })
    }
}

impl Adaptor for PrefetchResource {
    fn upstream(&self) -> &Arc<dyn MemoryResource> {
        &self.upstream
    }

    fn serve(&self, kind: MemKind, size: usize, align: usize) -> Result<NonNull<u8>> {
        let ptr = self.upstream.allocate(kind, size, align)?;
        if kind != MemKind::Shared {
            return Ok(ptr);
        }
        // SAFETY: upstream just allocated these bytes of shared memory on its queue; the queue
        // frees after its own work, the prefetch included.
        let prefetched = unsafe {
            self.upstream
                .queue()
                .prefetch(ptr.as_ptr(), size, Location::Device)
        };
        match prefetched {
            Ok(()) | Err(Error::Unsupported { .. }) => Ok(ptr),
            Err(err) => {
                // SAFETY: upstream's allocation with these arguments, given back once; the
                // queue's own work on it (a prefetch it may have enqueued) is covered by its free.
                unsafe {
                    self.upstream
                        .deallocate(ptr, kind, size, align, FreeAfter::Now)
                };
                Err(err)
            }
        }
    }
}
