//! What a memory strategy is ([`MemoryStrategy`]) and what it uses of its queue
//! ([`QueueAccess`]).

use std::collections::BTreeMap;
use std::ptr::NonNull;

use cl3::error_codes::error_text;
use devbuf_core::interop::Holder;
use devbuf_core::{Error, MemKind, Queue, Result};
use opencl3::command_queue::CommandQueue;
use opencl3::context::Context;
use opencl3::event::Event as ClEvent;
use opencl3::types::{cl_device_id, cl_int};
use parking_lot::Mutex;

/// What a strategy uses of the queue it serves, beyond [`Queue`]. The queue implements it and
/// holds the strategy, so that strategies need not know the queue.
pub(crate) trait QueueAccess: Queue {
    /// The queue's context, which holds only its device.
    fn context(&self) -> &Context;
    fn device_id(&self) -> cl_device_id;
    /// Enqueues one command with `enqueue` (which returns its event, or the error code), records
    /// it as the queue's last and submits it.
    fn submit(
        &self,
        operation: &'static str,
        enqueue: &mut dyn FnMut(&CommandQueue) -> std::result::Result<ClEvent, cl_int>,
    ) -> Result<()>;

    /// The error of an operation the device or its memory cannot do.
    fn unsupported(&self, what: String, reason: String) -> Error {
        Error::Unsupported {
            device: self.device().selector.clone(),
            what,
            reason,
        }
    }
}

/// How a queue allocates, frees, copies, fills and tells its own memory.
pub(crate) trait MemoryStrategy: Send + Sync {
    /// "usm", "svm" or "none".
    fn name(&self) -> &'static str;

    /// `size` bytes (not 0) of `kind`, which the device supports, aligned to `align` (a power
    /// of two that fits OpenCL's 32-bit alignments).
    fn allocate(
        &self,
        queue: &dyn QueueAccess,
        kind: MemKind,
        size: usize,
        align: usize,
    ) -> Result<NonNull<u8>>;

    /// Frees memory from [`MemoryStrategy::allocate`] once the queue's commands are done with it.
    ///
    /// # Safety
    /// `ptr` is an allocation of this strategy on `queue`, freed once.
    unsafe fn free(&self, queue: &dyn QueueAccess, ptr: NonNull<u8>);

    /// Enqueues a copy of `len` bytes (not 0).
    ///
    /// # Safety
    /// Both ranges are valid for `len` bytes until the copy has run.
    unsafe fn copy(
        &self,
        queue: &dyn QueueAccess,
        dst: *mut u8,
        src: *const u8,
        len: usize,
    ) -> Result<()>;

    /// Enqueues a fill of `len` bytes (not 0) with `byte`.
    ///
    /// # Safety
    /// `dst` is valid for `len` bytes until the fill has run.
    unsafe fn fill(
        &self,
        queue: &dyn QueueAccess,
        dst: *mut u8,
        byte: u8,
        len: usize,
    ) -> Result<()>;

    /// The kind of memory at `ptr` (not null) in `context`: Unknown for memory this strategy does
    /// not know.
    fn kind_of(&self, context: &Context, ptr: *const u8) -> MemKind;

    /// The allocation holding `ptr` (not null) in `context`, as far as the strategy can tell.
    fn holder_of(&self, context: &Context, ptr: *const u8) -> Holder;
}

/// The error of an allocation the runtime refused: `operation` returned no memory, with `code`.
pub(super) fn out_of_memory(
    queue: &dyn QueueAccess,
    operation: &str,
    kind: MemKind,
    size: usize,
    code: cl_int,
) -> Error {
    Error::OutOfMemory {
        kind,
        size,
        device: queue.device().selector.clone(),
        reason: format!("{operation} returned no memory ({})", error_text(code)),
    }
}

/// The error of a fill of memory the runtime does not know: it may be anything, a device address
/// included, so the host touches none of it.
pub(super) fn unknown_fill(queue: &dyn QueueAccess, dst: *mut u8, len: usize) -> Error {
    queue.unsupported(
        format!("filling {len} bytes at {dst:p}"),
        "the OpenCL runtime does not know this memory, and devbuf never writes from the host to \
         memory the runtime has not shown to be host memory"
            .into(),
    )
}

/// The span holding `ptr` among `spans` (allocations by the address devbuf handed out, each
/// `len` bytes long), with that address.
pub(super) fn span_holding<T: Copy>(
    spans: &Mutex<BTreeMap<usize, T>>,
    ptr: *const u8,
    len: impl Fn(&T) -> usize,
) -> Option<(usize, T)> {
    let address = ptr as usize;
    spans
        .lock()
        .range(..=address)
        .next_back()
        // `range(..=address)`: the start is at or below the address.
        .filter(|(start, span)| address.saturating_sub(**start) < len(span))
        .map(|(&start, &span)| (start, span))
}
