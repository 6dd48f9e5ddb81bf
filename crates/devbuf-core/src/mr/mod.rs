//! Memory resources, in RMM's shape: a small interface that allocates and frees (kind, size,
//! alignment) for one queue, each backend's queue as the bottom resource ([`QueueResource`]), and
//! adaptors that wrap any resource ([`Adaptor`]): [`PoolResource`], [`BinningResource`] with
//! [`FixedSizeResource`] bins, [`LimitingResource`], [`StatisticsResource`],
//! [`TrackingResource`], [`LoggingResource`] (whose logs [`replay`] runs again) and
//! [`FailureCallbackResource`] and [`PrefetchResource`].
//!
//! Each device and kind has a current resource ([`set_current`], [`current`]), which every
//! [`crate::Buffer::alloc`] without an explicit resource goes through; with none set, buffers
//! allocate from their queue directly.

// Caller numbers become addresses here: every size, count, offset and alignment is checked
// (docs/architecture.md, "Untrusted numbers").
#![deny(clippy::arithmetic_side_effects)]

mod adaptor;
mod binning;
mod bytes;
mod current;
mod failure_callback;
mod fixed_size;
mod graph;
mod handouts;
mod limiting;
mod logging;
mod one_kind;
mod pool;
mod prefetch;
mod release_threshold;
mod replay;
mod statistics;
mod tracking;

use std::any::Any;
use std::fmt;
use std::ptr::NonNull;
use std::sync::Arc;

pub use adaptor::Adaptor;
pub use binning::BinningResource;
pub use bytes::parse_bytes;
pub use current::{current, reset_current, set_current};
pub use failure_callback::{FailureCallback, FailureCallbackResource};
pub use fixed_size::{DEFAULT_BLOCK_SIZE, DEFAULT_BLOCKS_TO_PREALLOCATE, FixedSizeResource};
pub use graph::{MAX_DEPTH, check_depth, check_upstream};
pub use handouts::Handouts;
pub use limiting::LimitingResource;
pub use logging::{FileSink, LOG_HEADER, LogSink, LoggingResource};
pub use one_kind::OneKindResource;
pub use pool::{PoolOptions, PoolResource};
pub use prefetch::PrefetchResource;
pub use release_threshold::ReleaseThresholdResource;
pub use replay::{ReplayReport, replay};
pub use statistics::{Statistics, StatisticsResource};
pub use tracking::{Origin, OutstandingAllocation, TrackingResource};

pub use crate::ordering::FreeAfter;
use crate::{MemKind, Queue, Result};

/// Allocates and frees memory of any kind its queue supports.
///
/// Buffers allocate through a resource explicitly ([`crate::Buffer::alloc_from`]) or through the
/// current resource of their device and kind ([`set_current`]):
///
/// ```
/// use devbuf_core::mr::{self, MemoryResource, QueueResource, StatisticsResource};
/// use devbuf_core::{Backend, Buffer, HostBackend, MemKind};
///
/// let queue = HostBackend.open("")?;
/// let stats = StatisticsResource::new(QueueResource::new(queue.clone()));
/// mr::set_current(MemKind::Shared, stats.clone())?;
/// let buffer = Buffer::alloc(&queue, MemKind::Shared, 100)?; // through `stats`
/// assert_eq!(stats.statistics().current_bytes, 100);
/// drop(buffer);
/// assert_eq!(stats.statistics().current_bytes, 0);
/// # Ok::<(), devbuf_core::Error>(())
/// ```
pub trait MemoryResource: Send + Sync + fmt::Debug + 'static {
    /// The queue the memory belongs to: buffers allocated here use it for their copies, fills
    /// and ordering, and take fresh memory as ordered work when that queue allocates in order
    /// ([`Queue::allocates_in_order`]), whichever adaptors stand between.
    fn queue(&self) -> &Arc<dyn Queue>;

    /// Allocates `size` bytes (never 0) of `kind` aligned to `align` (a power of two).
    fn allocate(&self, kind: MemKind, size: usize, align: usize) -> Result<NonNull<u8>>;

    /// Frees memory from [`MemoryResource::allocate`]. Work on it may still be running on this
    /// resource's queue and where `after` says: the memory is handed out again, or freed, only
    /// once that work is done ([`crate::ordering::release_to_queue`] decides how for a queue).
    ///
    /// # Safety
    /// `ptr`, `kind`, `size` and `align` are exactly those of one earlier successful `allocate`
    /// on this resource, the memory is freed once, and no other devbuf queue has pending work on
    /// it.
    unsafe fn deallocate(
        &self,
        ptr: NonNull<u8>,
        kind: MemKind,
        size: usize,
        align: usize,
        after: FreeAfter,
    );

    /// The resources this one allocates from (an adaptor's upstream, a binning resource's bins;
    /// none for a queue's): the resource graph's edges, which devbuf keeps acyclic and shallow
    /// ([`check_upstream`]).
    fn upstreams(&self) -> Vec<Arc<dyn MemoryResource>> {
        Vec::new()
    }

    /// Downcasting, so that bindings can reach an adaptor's own methods.
    fn as_any(&self) -> &dyn Any;

    /// The kind of memory an allocation of `size` bytes aligned to `align` gets when `asked` is
    /// asked: `asked`, unless the resource serves one kind whatever is asked
    /// ([`OneKindResource`], what wraps one, a binning resource's bin of one). Buffers take their
    /// kind from it.
    fn serves(&self, asked: MemKind, _size: usize, _align: usize) -> MemKind {
        asked
    }
}

/// A queue as a memory resource: the bottom of every stack of adaptors.
#[derive(Debug, Clone)]
pub struct QueueResource(Arc<dyn Queue>);

impl QueueResource {
    /// `queue`'s own allocator as a resource.
    pub fn new(queue: Arc<dyn Queue>) -> Arc<Self> {
        Arc::new(QueueResource(queue))
    }
}

impl MemoryResource for QueueResource {
    fn queue(&self) -> &Arc<dyn Queue> {
        &self.0
    }

    fn allocate(&self, kind: MemKind, size: usize, align: usize) -> Result<NonNull<u8>> {
        self.0.allocate(kind, size, align)
    }

    unsafe fn deallocate(
        &self,
        ptr: NonNull<u8>,
        kind: MemKind,
        size: usize,
        align: usize,
        after: FreeAfter,
    ) {
        // SAFETY: forwarded from our caller.
        unsafe { crate::ordering::release_to_queue(&self.0, ptr, kind, size, align, after) }
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// The error of a resource that refuses an allocation.
pub(crate) fn refused(
    queue: &Arc<dyn Queue>,
    kind: MemKind,
    size: usize,
    reason: String,
) -> crate::Error {
    crate::Error::OutOfMemory {
        kind,
        size,
        device: queue.device().selector.clone(),
        reason,
    }
}

#[cfg(test)]
mod rmm_resource_tests;
#[cfg(test)]
mod tests;
