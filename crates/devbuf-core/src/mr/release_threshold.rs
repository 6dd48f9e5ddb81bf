//! [`ReleaseThresholdResource`]: a pool that keeps at most a threshold of bytes it does not use,
//! the `release_threshold` of RMM's `CudaAsyncMemoryResource` (a CUDA memory pool's attribute).

use std::ptr::NonNull;
use std::sync::Arc;

use super::{Adaptor, MemoryResource, PoolResource};
use crate::MemKind;

/// Serves from `pool`, and gives the pool's empty blocks back upstream
/// ([`PoolResource::release`]) after a free whenever the pool holds more than `threshold` bytes.
#[derive(Debug)]
pub struct ReleaseThresholdResource {
    pool: Arc<PoolResource>,
    upstream: Arc<dyn MemoryResource>,
    threshold: usize,
}

impl ReleaseThresholdResource {
    /// `pool`, keeping no more than `threshold` bytes from upstream once memory is freed.
    pub fn new(pool: Arc<PoolResource>, threshold: usize) -> Arc<Self> {
        let upstream: Arc<dyn MemoryResource> = pool.clone();
        Arc::new(ReleaseThresholdResource {
            pool,
            upstream,
            threshold,
        })
    }

    /// The pool it serves from.
    pub fn pool(&self) -> &Arc<PoolResource> {
        &self.pool
    }

    /// Bytes the pool may keep from upstream after a free.
    pub fn release_threshold(&self) -> usize {
        self.threshold
    }
}

impl Adaptor for ReleaseThresholdResource {
    fn upstream(&self) -> &Arc<dyn MemoryResource> {
        &self.upstream
    }

    // The pool decides which blocks are empty (and when a freed block's work is done): this
    // only asks it to give them back.
    fn freed(&self, _ptr: NonNull<u8>, _kind: MemKind, _size: usize, _align: usize) {
        if self.pool.pool_size() > self.threshold {
            self.pool.release();
        }
    }
}
