//! [`Buffer`]: bytes with an owner.
//!
//! Either devbuf allocated the bytes (they go back to the queue that made them, exactly once,
//! when the last view is dropped), or they are foreign and the caller says how they are kept
//! alive: an owner object held until the last view goes, or a deleter run exactly once then.

// Caller numbers become addresses here: every size, count, offset and alignment is checked
// (docs/architecture.md, "Untrusted numbers").
#![deny(clippy::arithmetic_side_effects)]

mod allocation;
mod hints;
mod on_queue;
mod ordering;
mod resize;
mod shared;
mod strided;
mod transfer;

use std::any::Any;
use std::fmt;
use std::ops::Range;
use std::ptr::NonNull;
use std::sync::Arc;

use std::sync::atomic::AtomicU8;

use crate::mr::{self, MemoryResource};
use crate::{
    DEFAULT_ALIGNMENT, DeviceInfo, Error, ForeignQueue, KeptAlive, MemKind, Owner, Queue, Result,
};
use allocation::{
    Allocation, Pending, PendingList, Release, SharedAllocation, check_allocation, exported,
};
pub use ordering::Access;
pub use strided::Runs;

/// A contiguous range of bytes in one allocation; cheap to clone, and every clone or sub-view
/// keeps the allocation alive.
#[derive(Clone)]
pub struct Buffer {
    alloc: SharedAllocation,
    offset: usize,
    len: usize,
}

impl Buffer {
    /// Allocates `nbytes` of `kind` memory on `queue`, aligned to [`DEFAULT_ALIGNMENT`].
    ///
    /// ```
    /// use devbuf_core::{Backend, Buffer, HostBackend, MemKind};
    ///
    /// let queue = HostBackend.open("")?;
    /// let buffer = Buffer::alloc(&queue, MemKind::Device, 256)?;
    /// assert_eq!(buffer.len(), 256);
    /// assert_eq!(queue.kind_of(buffer.ptr()), MemKind::Device);
    /// # Ok::<(), devbuf_core::Error>(())
    /// ```
    pub fn alloc(queue: &Arc<dyn Queue>, kind: MemKind, nbytes: usize) -> Result<Buffer> {
        Self::alloc_aligned(queue, kind, nbytes, DEFAULT_ALIGNMENT)
    }

    /// Allocates `nbytes` of `kind` memory on `queue`, aligned to `align` (a power of two),
    /// through the device's current resource for `kind` ([`mr::current`]) when one is set on
    /// this queue.
    ///
    /// A zero-byte buffer holds no memory and has a null pointer where the queue says so
    /// ([`Queue::empty_buffers_are_null`]); elsewhere it owns a real (1-byte) allocation, so its
    /// pointer is unique and classifies as `kind`.
    pub fn alloc_aligned(
        queue: &Arc<dyn Queue>,
        kind: MemKind,
        nbytes: usize,
        align: usize,
    ) -> Result<Buffer> {
        match mr::current(&queue.device().selector, kind) {
            // A device's current resource serves the queue it allocates on (another queue of the
            // device may have a context of its own, which cannot reach that memory).
            Some(resource) if Arc::ptr_eq(resource.queue(), queue) => {
                Self::alloc_from(&resource, kind, nbytes, align)
            }
            _ => Self::alloc_on_queue(queue, kind, nbytes, align),
        }
    }

    /// Allocates `nbytes` of `kind` memory from `resource`, aligned to `align` (a power of two):
    /// of the resource's kind instead when it serves one ([`MemoryResource::serves`]). The buffer's
    /// queue is the resource's, and its memory goes back to `resource`.
    pub fn alloc_from(
        resource: &Arc<dyn MemoryResource>,
        kind: MemKind,
        nbytes: usize,
        align: usize,
    ) -> Result<Buffer> {
        let queue = resource.queue();
        // A resource of one kind (RMM's) decides the kind, as RMM's resources do.
        let kind = resource.serves(kind, nbytes.max(1), align);
        check_allocation(queue, kind, align)?;
        let size = allocation_size(queue, nbytes);
        let release = Release::Resource {
            resource: Arc::clone(resource),
            size,
            align,
        };
        if size == 0 {
            return Ok(Self::empty(kind, release));
        }
        let ptr = resource.allocate(kind, size, align)?;
        Self::allocated(kind, ptr, nbytes, release, queue.allocates_in_order(kind))
    }

    fn alloc_on_queue(
        queue: &Arc<dyn Queue>,
        kind: MemKind,
        nbytes: usize,
        align: usize,
    ) -> Result<Buffer> {
        check_allocation(queue, kind, align)?;
        let size = allocation_size(queue, nbytes);
        let release = Release::Queue {
            queue: Arc::clone(queue),
            size,
            align,
        };
        if size == 0 {
            return Ok(Self::empty(kind, release));
        }
        let ptr = queue.allocate(kind, size, align)?;
        Self::allocated(kind, ptr, nbytes, release, queue.allocates_in_order(kind))
    }

    /// A 0-byte buffer of `kind` with a null pointer and no memory: `release` (of size 0) names
    /// only where more of it would come from ([`Buffer::grown`]), and frees nothing.
    fn empty(kind: MemKind, release: Release) -> Buffer {
        Buffer {
            alloc: SharedAllocation::new(|| Allocation {
                base: 0,
                kind,
                release,
                pending: Pending::default(),
                exported: AtomicU8::new(exported::NO),
                read_only: false,
            }),
            offset: 0,
            len: 0,
        }
    }

    /// The buffer of fresh memory at `ptr`. With `in_order`, the allocation itself is work on the
    /// queue that nothing else may overtake, recorded when something first orders after it
    /// ([`Pending::allocated_in_order`]).
    fn allocated(
        kind: MemKind,
        ptr: NonNull<u8>,
        nbytes: usize,
        release: Release,
        in_order: bool,
    ) -> Result<Buffer> {
        let pending = if in_order {
            Pending::allocated_in_order()
        } else {
            Pending::default()
        };
        Ok(Buffer {
            alloc: SharedAllocation::new(|| Allocation {
                base: ptr.as_ptr() as usize,
                kind,
                release,
                pending,
                exported: AtomicU8::new(exported::NO),
                read_only: false,
            }),
            offset: 0,
            len: nbytes,
        })
    }

    /// Wraps foreign memory. `queue` is the queue that can reach it (for copies and fills) and
    /// `owner` keeps it alive or frees it after the last view.
    ///
    /// # Safety
    /// `ptr` is valid for `len` bytes of `kind` memory reachable by `queue` (or `len` is 0) for as
    /// long as `owner` has not been dropped or run.
    pub unsafe fn from_foreign(
        queue: Arc<dyn Queue>,
        ptr: *mut u8,
        len: usize,
        kind: MemKind,
        owner: Owner,
    ) -> Buffer {
        // SAFETY: the caller's contract.
        unsafe { Self::foreign(queue, ptr, len, kind, owner, false, PendingList::default()) }
    }

    /// Wraps foreign memory, as [`Buffer::from_foreign`], whose producer may still have work on
    /// it in `producer`, its queue: as [`Buffer::record_producer`] right after, without taking
    /// the lock (nothing else views the buffer yet).
    ///
    /// # Safety
    /// As for [`Buffer::from_foreign`].
    pub unsafe fn from_foreign_produced_by(
        queue: Arc<dyn Queue>,
        ptr: *mut u8,
        len: usize,
        kind: MemKind,
        owner: Owner,
        producer: Arc<dyn ForeignQueue>,
    ) -> Buffer {
        let pending = PendingList::produced_by(producer);
        // SAFETY: the caller's contract.
        unsafe { Self::foreign(queue, ptr, len, kind, owner, false, pending) }
    }

    /// Wraps foreign memory that may only be read, as [`Buffer::from_foreign`]: every write
    /// through the buffer (fills, copies into it) is refused with an error.
    ///
    /// # Safety
    /// As for [`Buffer::from_foreign`], with the memory valid for reads only.
    pub unsafe fn from_foreign_read_only(
        queue: Arc<dyn Queue>,
        ptr: *mut u8,
        len: usize,
        kind: MemKind,
        owner: Owner,
    ) -> Buffer {
        // SAFETY: the caller's contract; nothing writes through a read-only buffer.
        unsafe { Self::foreign(queue, ptr, len, kind, owner, true, PendingList::default()) }
    }

    /// # Safety
    /// As for [`Buffer::from_foreign`]; writable too unless `read_only`.
    unsafe fn foreign(
        queue: Arc<dyn Queue>,
        ptr: *mut u8,
        len: usize,
        kind: MemKind,
        owner: Owner,
        read_only: bool,
        pending: PendingList,
    ) -> Buffer {
        Buffer {
            alloc: SharedAllocation::new(|| Allocation {
                base: ptr as usize,
                kind,
                release: Release::Foreign {
                    queue,
                    owner: Some(owner),
                    size: len,
                },
                pending: Pending::of(pending),
                exported: AtomicU8::new(exported::NO),
                read_only,
            }),
            offset: 0,
            len,
        }
    }

    /// Address of the first byte of this view.
    #[allow(
        clippy::arithmetic_side_effects,
        reason = "a view lies inside its allocation, whose span was checked not to wrap when it \
                  was made or imported"
    )]
    pub fn ptr(&self) -> *mut u8 {
        (self.alloc.base + self.offset) as *mut u8
    }

    /// Length of this view in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether this view has no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The kind of memory.
    pub fn kind(&self) -> MemKind {
        self.alloc.kind
    }

    /// The queue that allocated (or can reach) this memory.
    pub fn queue(&self) -> &Arc<dyn Queue> {
        self.alloc.queue()
    }

    /// The device the memory belongs to.
    pub fn device(&self) -> &DeviceInfo {
        self.alloc.queue().device()
    }

    /// Whether devbuf allocated this memory (rather than wrapping foreign memory).
    pub fn is_owned(&self) -> bool {
        matches!(
            self.alloc.release,
            Release::Queue { .. } | Release::Resource { .. }
        )
    }

    /// The object that keeps this foreign memory alive, when it is a `T` (how a shareable
    /// allocation is found again from its buffers).
    pub fn keep_alive<T: Any + Clone>(&self) -> Option<T> {
        match &self.alloc.release {
            Release::Foreign { owner, .. } => match owner {
                Some(Owner::KeepAlive(keep)) => keep.downcast_ref::<T>().cloned(),
                _ => None,
            },
            Release::Queue { .. } | Release::Resource { .. } => None,
        }
    }

    /// An error once the memory is gone with its context although devbuf still holds it
    /// ([`crate::Interop::check_memory_alive`]): host views check it before handing out pages.
    #[inline]
    pub fn check_alive(&self) -> Result<()> {
        self.alloc.queue().interop().check_memory_alive()
    }

    /// The keep-alive object of this foreign memory while this view is the only reference to
    /// its allocation, else `None`: what a garbage collector may count as held through this view
    /// alone (Python's, through an import's `__traverse__`; an allocation other views or pending
    /// work share is never reported, so that no reference is counted twice).
    pub fn sole_keep_alive(&self) -> Option<&KeptAlive> {
        if !self.alloc.is_unique() {
            return None;
        }
        match &self.alloc.release {
            Release::Foreign {
                owner: Some(Owner::KeepAlive(keep)),
                ..
            } => Some(keep),
            _ => None,
        }
    }

    /// Whether the memory may only be read ([`Buffer::from_foreign_read_only`]): fills and copies
    /// into it are refused.
    pub fn is_read_only(&self) -> bool {
        self.alloc.read_only
    }

    /// Whether the host CPU may read and write these bytes directly. Host memory is, on every
    /// queue (what [`MemKind::Host`] means), told without asking the queue: the buffer protocol
    /// asks on every export, and the question costs a chain of dependent loads.
    #[inline]
    pub fn is_host_accessible(&self) -> bool {
        self.alloc.kind == MemKind::Host || self.alloc.queue().host_accessible(self.alloc.kind)
    }

    /// Whether these bytes live in the host's own memory ([`Queue::host_resident`]): the host
    /// writes them as fast as any command would.
    pub fn is_host_resident(&self) -> bool {
        self.alloc.queue().host_resident(self.alloc.kind)
    }

    /// Whether two views share one allocation.
    pub fn same_allocation(&self, other: &Buffer) -> bool {
        SharedAllocation::ptr_eq(&self.alloc, &other.alloc)
    }

    /// A sub-view of `range` (relative to this view), sharing ownership of the allocation.
    pub fn slice(&self, range: Range<usize>) -> Result<Buffer> {
        if range.start > range.end || range.end > self.len {
            return Err(Error::invalid(
                "range",
                format!(
                    "{}..{} is outside the buffer of {} bytes",
                    range.start, range.end, self.len
                ),
            ));
        }
        Ok(Buffer {
            alloc: self.alloc.clone(),
            // Inside this view (checked above), so inside the allocation.
            offset: self.offset.saturating_add(range.start),
            len: range.len(),
        })
    }
}

/// The bytes to allocate for a buffer of `nbytes` on `queue`: none for an empty buffer where the
/// queue's empty buffers are null, else at least one.
fn allocation_size(queue: &Arc<dyn Queue>, nbytes: usize) -> usize {
    if nbytes == 0 && queue.empty_buffers_are_null() {
        0
    } else {
        nbytes.max(1)
    }
}

impl fmt::Debug for Buffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Buffer")
            .field("ptr", &self.ptr())
            .field("len", &self.len)
            .field("kind", &self.kind())
            .field("device", &self.device().selector)
            .field("owned", &self.is_owned())
            .finish()
    }
}

#[cfg(test)]
mod foreign_work_tests;
#[cfg(test)]
mod tests;
