//! One allocation shared by every view: its memory, how it is released (the release itself, after
//! the work that may still touch it, is [`crate::ordering`]'s), and what the ordering module
//! records about it.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::AtomicU8;

use super::shared::Shared;
use crate::Owner;
use crate::mr::MemoryResource;
use crate::ordering::pending::Pending;
use crate::{Error, MemKind, Queue, Result};

/// How an allocation is released when its last view is dropped, with the queue that can reach
/// it (for memory from a resource, the resource's: a buffer holds no second count of it).
pub(crate) enum Release {
    /// devbuf allocated it: back to the queue that made it.
    Queue {
        queue: Arc<dyn Queue>,
        size: usize,
        align: usize,
    },
    /// devbuf allocated it through a memory resource: back to that resource.
    Resource {
        resource: Arc<dyn MemoryResource>,
        size: usize,
        align: usize,
    },
    /// Foreign memory: drop the owner (taken out exactly once, in `Drop`; read through `&self`
    /// only as a keep-alive object, which is `Sync`).
    Foreign {
        queue: Arc<dyn Queue>,
        owner: Option<Owner>,
    },
}

impl Release {
    /// The queue that allocated (or can reach) the memory.
    #[inline]
    pub(crate) fn queue(&self) -> &Arc<dyn Queue> {
        match self {
            Release::Queue { queue, .. } | Release::Foreign { queue, .. } => queue,
            Release::Resource { resource, .. } => resource.queue(),
        }
    }

    /// The owner of foreign memory, taken out (to be leaked when its memory may still be in use).
    pub(crate) fn take_owner(&mut self) -> Option<Owner> {
        match self {
            Release::Foreign { owner, .. } => owner.take(),
            Release::Queue { .. } | Release::Resource { .. } => None,
        }
    }
}

/// The counted reference to an allocation that every view holds.
pub(crate) type SharedAllocation = Shared<Allocation>;

/// One allocation, shared by every [`Buffer`] that views it.
pub(crate) struct Allocation {
    /// Address of the first byte (0 only for empty foreign memory).
    pub(crate) base: usize,
    pub(crate) kind: MemKind,
    pub(crate) release: Release,
    /// At most one entry per queue: queues are in order, so a queue's latest event covers its
    /// earlier work.
    pub(crate) pending: Pending,
    /// Whether the memory was handed to another library (DLPack, CAI, SUAI), whose work on it is
    /// not ordered with ours: one of the `ordering::pending::exported` states.
    pub(crate) exported: AtomicU8,
    /// Whether the memory may only be read (it is mapped read-only, e.g. from a read-only IPC
    /// handle): every write through a [`Buffer`] is refused.
    pub(crate) read_only: bool,
}

impl Allocation {
    /// The queue that allocated (or can reach) the memory.
    #[inline]
    pub(crate) fn queue(&self) -> &Arc<dyn Queue> {
        self.release.queue()
    }
}

impl Drop for Allocation {
    #[inline]
    fn drop(&mut self) {
        crate::ordering::release::release(self);
    }
}

/// Drops the owner of foreign memory after its last view. A panicking deleter must not unwind
/// into a C caller (DLPack deleters run this from `extern "C"` code); the panic message has
/// already been printed.
pub(crate) fn let_go(owner: Owner) {
    let _ = catch_unwind(AssertUnwindSafe(move || drop(owner)));
}

/// Refuses allocations `queue` cannot make.
#[inline]
pub(crate) fn check_allocation(queue: &Arc<dyn Queue>, kind: MemKind, align: usize) -> Result<()> {
    if align.is_power_of_two() && kind != MemKind::Unknown && queue.supports(kind) {
        return Ok(());
    }
    Err(refusal(queue, kind, align))
}

/// Why `check_allocation` refused.
#[cold]
fn refusal(queue: &Arc<dyn Queue>, kind: MemKind, align: usize) -> Error {
    if !align.is_power_of_two() {
        return Error::invalid("alignment", format!("{align} is not a power of two"));
    }
    if kind == MemKind::Unknown {
        return Error::invalid("kind", "\"unknown\" memory cannot be allocated");
    }
    let device = queue.device();
    Error::Unsupported {
        device: device.selector.clone(),
        what: format!("{kind} allocation"),
        reason: device
            .unusable_reason
            .clone()
            .unwrap_or_else(|| format!("the device has no {kind} memory")),
    }
}
