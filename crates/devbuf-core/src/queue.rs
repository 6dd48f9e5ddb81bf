//! [`Queue`]: the device half of what a backend implements, one device and context with an
//! in-order stream of work on it.
//!
//! The trait is deliberately small, in the spirit of RMM's `device_memory_resource` and wgpu-hal:
//! raw allocation, ordered copies and fills, waits, events and pointer classification. The
//! exchange half, what the protocols ask of a backend, is a capability the queue hands out
//! ([`Queue::interop`]). Ownership, sub-views and the exchange protocols are built once on top
//! of both ([`crate::Buffer`], [`crate::interface`], [`crate::exchange`]).

use std::any::Any;
use std::fmt;
use std::ptr::NonNull;

use crate::hints::{Advice, Location};
use crate::interop::Interop;
use crate::{DeviceInfo, Event, MemKind, Result};

/// The alignment [`crate::Buffer::alloc`] asks of [`Queue::allocate`]: DLPack's recommended data
/// alignment, and CUDA's own.
pub const DEFAULT_ALIGNMENT: usize = 256;

/// A device and context with an in-order stream of work on it.
///
/// Implementations never panic and never let a foreign exception reach Rust: every runtime
/// failure is an [`crate::Error`].
pub trait Queue: Send + Sync + fmt::Debug + 'static {
    /// The device this queue runs on.
    fn device(&self) -> &DeviceInfo;

    /// Whether this queue can allocate `kind` memory.
    fn supports(&self, kind: MemKind) -> bool {
        self.device().supports(kind)
    }

    /// Whether the host CPU may dereference memory of `kind` that this queue allocated.
    fn host_accessible(&self, kind: MemKind) -> bool {
        matches!(kind, MemKind::Host | MemKind::Shared)
    }

    /// Whether this queue's device is the host's own processor (a CPU device), so that its
    /// host-accessible memory is the host's own ([`Queue::host_resident`]). False unless a
    /// backend says otherwise.
    fn on_the_host_processor(&self) -> bool {
        false
    }

    /// Whether memory of `kind` that this queue allocated lives in the host's own memory, so that
    /// the host CPU writes it at memory speed, with no page migration and no bus in between: host
    /// memory (pinned or USM host allocations), and any host-accessible kind of a device that is
    /// the host's processor ([`Queue::on_the_host_processor`]). Writes that would take one runtime
    /// command per contiguous run (a strided view's elements) then run on the host instead, after
    /// the host's wait for the work on the memory (docs/architecture.md, "Strided writes"). Not
    /// a GPU's shared memory: its pages migrate to whichever processor touches them.
    fn host_resident(&self, kind: MemKind) -> bool {
        kind == MemKind::Host || (self.on_the_host_processor() && self.host_accessible(kind))
    }

    /// Allocates `size` bytes (never 0: an empty [`crate::Buffer`] takes none or 1) aligned to `align` (a power
    /// of two). The memory must be released with [`Queue::deallocate`] with the same arguments.
    fn allocate(&self, kind: MemKind, size: usize, align: usize) -> Result<NonNull<u8>>;

    /// Whether memory of `kind` from [`Queue::allocate`] becomes usable only when this queue's
    /// work reaches the allocation (a stream-ordered allocator, whose block may still be in use
    /// by its previous owner's queued work): [`crate::Buffer`] then records the allocation as
    /// pending work, which other queues, host views and exports wait for.
    fn allocates_in_order(&self, _kind: MemKind) -> bool {
        false
    }

    /// Whether [`Queue::deallocate`] frees `ptr`, an allocation of `kind` of this queue, in stream
    /// order, after the work enqueued on this queue so far (CUDA's `cuMemFreeAsync`). Where it
    /// does not, the runtime frees at once, and core waits for the work on the memory first
    /// ([`crate::ordering::release_to_queue`]). False unless a backend says otherwise.
    fn frees_in_order(&self, _ptr: NonNull<u8>, _kind: MemKind) -> bool {
        false
    }

    /// Releases memory from [`Queue::allocate`]: at once, or in stream order on this queue where
    /// [`Queue::frees_in_order`] says so. A backend never waits here: core has ordered the release
    /// after every piece of work that may still touch the memory
    /// ([`crate::ordering::release_to_queue`]), and leaks memory whose wait failed.
    ///
    /// # Safety
    /// `ptr`, `kind`, `size` and `align` are exactly those of one earlier successful `allocate` on
    /// this queue, the memory is released once, and no work on it is still running (or, where
    /// this queue frees in stream order, none but on this queue).
    unsafe fn deallocate(&self, ptr: NonNull<u8>, kind: MemKind, size: usize, align: usize);

    /// Enqueues a copy of `len` bytes, ordered after earlier work on this queue. The copy may still
    /// be running when this returns: call [`Queue::wait`] before the host reads `dst` or reuses `src`.
    ///
    /// # Safety
    /// Both ranges are valid for `len` bytes, reachable by this queue (its own allocations or host
    /// memory), do not overlap, and stay alive until the copy completes.
    unsafe fn copy(&self, dst: *mut u8, src: *const u8, len: usize) -> Result<()>;

    /// Enqueues copies of `rows.count` rows of `rows.width` bytes, row `i` from
    /// `src + i * rows.src_pitch` to `dst + i * rows.dst_pitch`, ordered like [`Queue::copy`]:
    /// what a strided view's elements take (a column, every other row). The default is
    /// [`copy_row_by_row`]; a runtime with a 2-D copy makes it one command (CUDA's
    /// `cuMemcpy2DAsync`), where a command per row would cost microseconds each.
    ///
    /// # Safety
    /// Every row is a range [`Queue::copy`] takes, and the rows of one side do not overlap
    /// (each pitch is at least the width).
    unsafe fn copy_rows(&self, dst: *mut u8, src: *const u8, rows: Rows) -> Result<()> {
        // SAFETY: the caller's.
        unsafe { copy_row_by_row(self, dst, src, rows) }
    }

    /// Enqueues setting `len` bytes at `dst` to `byte`, ordered like [`Queue::copy`]. Memory the
    /// runtime will not set is set from the host only where the runtime shows it is host memory;
    /// elsewhere the runtime's error is returned (an address it does not know may be a device's).
    ///
    /// # Safety
    /// `dst` is valid for `len` bytes, reachable by this queue, and alive until the fill completes.
    unsafe fn fill(&self, dst: *mut u8, byte: u8, len: usize) -> Result<()>;

    /// Blocks the calling thread until all work enqueued so far has completed.
    fn wait(&self) -> Result<()>;

    /// Blocks until all work on this queue's device and context has completed, whichever library
    /// enqueued it (foreign streams included, where the runtime can tell). Memory that was handed
    /// to other libraries is only released after this, since their work on it is not ordered with
    /// ours. Defaults to [`Queue::wait`].
    fn wait_device(&self) -> Result<()> {
        self.wait()
    }

    /// Records an event that completes when all work enqueued so far has completed.
    fn record_event(&self) -> Result<Event>;

    /// Whether [`Queue::record_timed_event`] works here: the runtime keeps when this queue's
    /// work completed. False unless a backend says otherwise.
    fn keeps_time(&self) -> bool {
        false
    }

    /// Records an event like [`Queue::record_event`] that also carries when it completed, for
    /// [`Event::elapsed_ms_since`]; an [`crate::Error::Unsupported`] where the runtime keeps no
    /// such time for this queue.
    fn record_timed_event(&self) -> Result<Event> {
        Err(crate::Error::Unsupported {
            device: self.device().selector.clone(),
            what: "a timed event".into(),
            reason: format!(
                "the {} backend's events carry no timing",
                self.device().backend
            ),
        })
    }

    /// The device's free and total memory in bytes, as its runtime reports them now (CUDA's
    /// `cuMemGetInfo`, CuPy's `Device.mem_info`); an [`crate::Error::Unsupported`] where the
    /// runtime does not say.
    fn memory_info(&self) -> Result<(usize, usize)> {
        Err(crate::Error::Unsupported {
            device: self.device().selector.clone(),
            what: "memory information".into(),
            reason: format!(
                "the {} backend's runtime does not report free memory",
                self.device().backend
            ),
        })
    }

    /// Makes work enqueued on this queue from now on wait for `event`, without blocking the host
    /// where the runtime allows it.
    fn wait_event(&self, event: &Event) -> Result<()>;

    /// Whether work can still be enqueued on this queue: false once the library that owns the
    /// stream it adopted destroyed it ([`crate::KeepsStream::stream_alive`]). The work already
    /// there completes by itself and its events stay valid to wait for, so devbuf joins that work
    /// on another queue instead of on this one (docs/architecture.md, "The ordering invariant").
    fn takes_work(&self) -> bool {
        true
    }

    /// Whether all work enqueued so far has completed, without blocking, other libraries' work on
    /// this queue included (a devbuf stream's `query`). The default asks an
    /// event recorded now, which a runtime whose records are work of their own may not have
    /// completed yet: such a backend asks its runtime instead.
    fn is_idle(&self) -> Result<bool> {
        self.record_event()?.is_complete()
    }

    /// Classifies a pointer: the kind of this queue's own allocations, [`MemKind::Unknown`] for
    /// everything else (another context's memory, stack, heap, garbage).
    fn kind_of(&self, ptr: *const u8) -> MemKind;

    /// Whether [`Queue::copy`] reaches `ptr` although it is not this queue's memory: another
    /// device's memory that the runtime copies to and from directly (CUDA peers, through
    /// `cuMemcpyPeerAsync`). False unless a backend says otherwise.
    fn copies_reach(&self, _ptr: *const u8) -> bool {
        false
    }

    /// Whether this queue's work runs on the host processor, so that it reaches any host memory of
    /// the process, its own allocations or not: it fills and copies another runtime's host memory,
    /// takes a foreign host pointer as a buffer of its own ([`crate::Buffer::from_foreign`]), and
    /// its device memory is host memory (the host backend's). False unless a backend says
    /// otherwise: a device runtime's fill takes only memory it knows (CUDA refuses pageable host
    /// memory; Intel's runtimes may crash on a pointer they do not know).
    fn reaches_any_host_memory(&self) -> bool {
        false
    }

    /// Whether [`Queue::allocate`] takes about as long as a function call (tens of nanoseconds),
    /// so that a caller holding a lock other threads wait for (Python's GIL) keeps it around the
    /// call instead of paying more to release and take it again. False unless a backend says
    /// otherwise.
    fn allocates_cheaply(&self) -> bool {
        false
    }

    /// Whether a 0-byte buffer of this queue holds no memory and has a null pointer, as RMM's,
    /// CuPy's and PyTorch's do (CAI and DLPack allow a null data pointer for an array of no
    /// elements). False unless a backend says otherwise: a 0-byte buffer then owns a 1-byte
    /// allocation, so its pointer classifies as its kind, which a backend whose consumers refuse
    /// a null pointer needs (docs/guide/memory-kinds.md, "Empty buffers").
    fn empty_buffers_are_null(&self) -> bool {
        false
    }

    /// Enqueues migrating `len` bytes of this queue's shared memory at `ptr` toward `to`, a hint
    /// the runtime may act on later; unsupported by default.
    ///
    /// # Safety
    /// `ptr..ptr + len` lies in one shared allocation of this queue, alive until the work is done.
    unsafe fn prefetch(&self, _ptr: *const u8, _len: usize, to: Location) -> Result<()> {
        Err(hint_unsupported(
            self.device(),
            &format!("prefetching to the {to}"),
        ))
    }

    /// Tells the runtime how `len` bytes of this queue's shared memory at `ptr` will be used;
    /// unsupported by default.
    ///
    /// # Safety
    /// `ptr..ptr + len` lies in one shared allocation of this queue.
    unsafe fn advise(&self, _ptr: *const u8, _len: usize, advice: Advice) -> Result<()> {
        Err(hint_unsupported(self.device(), &format!("{advice:?}")))
    }

    /// The exchange half of this queue: how its memory and work cross library boundaries.
    fn interop(&self) -> &dyn Interop;

    /// Downcasting, for backend-specific protocol details.
    fn as_any(&self) -> &dyn Any;
}

/// Rows of equal width a fixed distance apart on each side of a copy ([`Queue::copy_rows`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rows {
    /// Bytes per row.
    pub width: usize,
    /// How many rows.
    pub count: usize,
    /// Bytes from one row's start to the next one's in the destination (at least `width`).
    pub dst_pitch: usize,
    /// The same in the source.
    pub src_pitch: usize,
}

/// [`Queue::copy_rows`] as one [`Queue::copy`] per row: the default, and a backend's fallback
/// where its runtime refuses a 2-D copy.
///
/// # Safety
/// As for [`Queue::copy_rows`].
pub unsafe fn copy_row_by_row<Q: Queue + ?Sized>(
    queue: &Q,
    dst: *mut u8,
    src: *const u8,
    rows: Rows,
) -> Result<()> {
    for row in 0..rows.count {
        // SAFETY: every row is a range `copy` takes (the caller's).
        unsafe {
            queue.copy(
                dst.add(row * rows.dst_pitch),
                src.add(row * rows.src_pitch),
                rows.width,
            )?
        };
    }
    Ok(())
}

/// The error of a backend without memory hints.
fn hint_unsupported(device: &DeviceInfo, what: &str) -> crate::Error {
    crate::Error::Unsupported {
        device: device.selector.clone(),
        what: what.to_owned(),
        reason: "this backend takes no hints about shared memory".into(),
    }
}
