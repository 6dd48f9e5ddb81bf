//! [`LimitingResource`]: refuses allocations past a byte limit.

use std::any::Any;
use std::ptr::NonNull;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::{FreeAfter, MemoryResource, refused};
use crate::{MemKind, Queue, Result};

/// Passes allocations on to `upstream` while the bytes it has handed out stay within a limit.
#[derive(Debug)]
pub struct LimitingResource {
    upstream: Arc<dyn MemoryResource>,
    limit: usize,
    in_use: AtomicUsize,
}

impl LimitingResource {
    /// Limits what `upstream` hands out through this adaptor to `limit` bytes.
    pub fn new(upstream: Arc<dyn MemoryResource>, limit: usize) -> Arc<Self> {
        Arc::new(LimitingResource {
            upstream,
            limit,
            in_use: AtomicUsize::new(0),
        })
    }

    /// The limit in bytes.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Bytes handed out and not yet freed.
    pub fn in_use(&self) -> usize {
        self.in_use.load(Ordering::Relaxed)
    }

    /// The wrapped resource.
    pub fn upstream(&self) -> &Arc<dyn MemoryResource> {
        &self.upstream
    }
}

impl MemoryResource for LimitingResource {
    fn queue(&self) -> &Arc<dyn Queue> {
        self.upstream.queue()
    }

    fn allocate(&self, kind: MemKind, size: usize, align: usize) -> Result<NonNull<u8>> {
        // Reserve first, so that threads racing for the last bytes cannot both pass.
        let before = self.in_use.fetch_add(size, Ordering::Relaxed);
        if before
            .checked_add(size)
            .is_none_or(|after| after > self.limit)
        {
            self.in_use.fetch_sub(size, Ordering::Relaxed);
            return Err(refused(
                self.queue(),
                kind,
                size,
                format!(
                    "the limiting resource's limit of {} bytes would be exceeded \
                     ({before} bytes in use)",
                    self.limit
                ),
            ));
        }
        self.upstream.allocate(kind, size, align).inspect_err(|_| {
            self.in_use.fetch_sub(size, Ordering::Relaxed);
        })
    }

    unsafe fn deallocate(
        &self,
        ptr: NonNull<u8>,
        kind: MemKind,
        size: usize,
        align: usize,
        after: FreeAfter,
    ) {
        // SAFETY: forwarded from our caller, who got `ptr` from our `allocate`, i.e. upstream's.
        unsafe { self.upstream.deallocate(ptr, kind, size, align, after) };
        self.in_use.fetch_sub(size, Ordering::Relaxed);
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
