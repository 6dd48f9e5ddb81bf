//! [`LimitingResource`]: refuses allocations past a byte limit.

use std::ptr::NonNull;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::{Adaptor, MemoryResource, refused};
use crate::{MemKind, Result};

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
}

impl Adaptor for LimitingResource {
    fn upstream(&self) -> &Arc<dyn MemoryResource> {
        &self.upstream
    }

    fn admit(&self, kind: MemKind, size: usize, _align: usize) -> Result<()> {
        // Reserve first, so that threads racing for the last bytes cannot both pass.
        let before = self.in_use.fetch_add(size, Ordering::Relaxed);
        if before
            .checked_add(size)
            .is_none_or(|after| after > self.limit)
        {
            self.in_use.fetch_sub(size, Ordering::Relaxed);
            return Err(refused(
                self.upstream.queue(),
                kind,
                size,
                format!(
                    "the limiting resource's limit of {} bytes would be exceeded \
                     ({before} bytes in use)",
                    self.limit
                ),
            ));
        }
        Ok(())
    }

    fn allocated(&self, ptr: Option<NonNull<u8>>, _kind: MemKind, size: usize, _align: usize) {
        if ptr.is_none() {
            self.in_use.fetch_sub(size, Ordering::Relaxed);
        }
    }

    // Counted free only once upstream has it back, so that the limit holds while it frees.
    fn freed(&self, _ptr: NonNull<u8>, _kind: MemKind, size: usize, _align: usize) {
        self.in_use.fetch_sub(size, Ordering::Relaxed);
    }
}
