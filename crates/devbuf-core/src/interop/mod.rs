//! [`Interop`]: how a queue's memory and work cross library boundaries, the questions the
//! exchange protocols ask of a backend, each answered for its own runtime. A queue hands out its
//! answers through [`crate::Queue::interop`], as it does its sharing between processes
//! ([`Interop::ipc`]).
//!
//! No method has a default: a backend states each answer, even "none", so that a new backend
//! never inherits a wrong one silently. A queue that hands nothing out to other libraries states
//! the fourteen answers that follow from that in one named line, [`crate::hands_nothing_out!`]
//! (or its halves, [`crate::hands_out_no_handle!`] and [`crate::takes_no_foreign_stream!`]). The
//! conformance kit checks the answers against each other and against the queue's device
//! operations, written or named. Core applies them once for every backend: the
//! descriptors ([`crate::interface`], [`crate::dlpack`]), the extent check ([`crate::extent`]),
//! the ordering of pending work ([`crate::Buffer`], [`crate::exchange`]).

// Caller numbers become addresses here: every size, count, offset and alignment is checked
// (docs/architecture.md, "Untrusted numbers").
#![deny(clippy::arithmetic_side_effects)]

mod foreign;
mod handles;
mod holder;
mod ipc_handle;
mod ipc_sharing;

use dlpark::ffi::DLDevice;

pub use foreign::{ConsumerOrder, ForeignObject, ProducerStream, ProducerWork};
pub use handles::{ExportedHandle, StreamHandle};
pub use holder::Holder;
pub use ipc_handle::IpcHandle;
pub(crate) use ipc_handle::bad_handle;
pub use ipc_sharing::{IpcSharing, OpenedAllocation, SharedAllocation, unsupported};

use crate::{Event, MemKind, Result};

/// The exchange half of a queue (the device half is [`crate::Queue`]).
///
/// Implementations never panic and never let a foreign exception reach Rust, like the queue's.
pub trait Interop: Send + Sync {
    // -- Where the memory is: what importers check and exporters describe.

    /// The DLPack device of memory of `kind` allocated by this queue.
    fn dlpack_device(&self, kind: MemKind) -> DLDevice;

    /// Why memory of this queue cannot leave through DLPack zero-copy on its own device although
    /// DLPack has a pointer form for it (SYCL memory outside the device's default context, the
    /// only one DLPack consumers look in), if it cannot.
    fn dlpack_export_refusal(&self) -> Option<String>;

    /// Which allocation holds `ptr`, as far as the runtime can tell: imports check the whole
    /// extent a descriptor claims against the answer ([`crate::extent`]). Never dereferences
    /// `ptr`. Consistent with [`crate::Queue::kind_of`]: [`Holder::Unknown`] exactly where that
    /// says [`MemKind::Unknown`], the same kind elsewhere (the host backend, which cannot tell
    /// foreign host memory from garbage, answers [`Holder::Unchecked`] instead).
    fn holder_of(&self, ptr: *const u8) -> Result<Holder>;

    /// An error once the memory of this queue's context is gone although devbuf still holds it:
    /// the runtime says the context died under devbuf (on CUDA, another library reset the
    /// primary context, which frees every allocation in it). No new host view may then hand out
    /// its pages. Runtimes whose contexts cannot die under devbuf keep the default.
    fn check_memory_alive(&self) -> Result<()> {
        Ok(())
    }

    // -- The handles other libraries are given, by which they reach this queue's work.

    /// The native stream work is enqueued on, as the stream protocols name it (CAI's `stream`,
    /// the `stream` argument of a DLPack producer, `__cuda_stream__`), where the backend has one,
    /// numbered as they number it: never 0, which they reserve, so a runtime whose default stream
    /// is 0 answers with the protocols' number for it. Callers pass it on unchanged.
    fn native_stream(&self) -> Option<StreamHandle>;

    /// The handle DLPack's C exchange API names as this queue's current work stream: the native
    /// stream, or the runtime's queue object (a `sycl::queue*` for kDLOneAPI); `None` where the
    /// API names none (the CPU's null stream).
    fn dlpack_work_stream(&self) -> Option<usize>;

    /// A fresh, owned copy of the runtime's handle to this queue, for protocols that pass queues
    /// between libraries (SUAI's `syclobj`, dpctl's `sycl_queue`). `None` where the backend has
    /// no such handle.
    fn export_handle(&self) -> Option<ExportedHandle>;

    // -- Ordering with other libraries' work, both ways (docs/architecture.md, "The ordering
    // invariant").

    /// Whether other libraries may enqueue work devbuf does not track on queues or streams this
    /// backend lets devbuf know of: this queue itself, once its handle was handed out
    /// ([`Interop::native_stream`], [`Interop::dlpack_work_stream`], [`Interop::export_handle`]),
    /// and, on CUDA, the legacy default stream, the ecosystem's default. Memory that was handed out
    /// is then ordered after that work whenever devbuf touches it again
    /// ([`Interop::order_after_foreign_work`], [`Interop::foreign_work_event`]). A queue that
    /// hands out any handle says yes; only then do the protocols treat it as a queue other
    /// libraries work on ([`crate::ordering::as_foreign_queue`]).
    fn untracked_foreign_work(&self) -> bool;

    /// Makes work enqueued on this queue from now on wait for the work other libraries have
    /// enqueued so far on the queues and streams of [`Interop::untracked_foreign_work`], without
    /// blocking the host. Nothing to do for work they enqueue on this very queue when it runs in
    /// order, or where there is none.
    fn order_after_foreign_work(&self) -> Result<()>;

    /// An event that completes once the work of [`Interop::order_after_foreign_work`] and this
    /// queue's own work so far have, for the host and other queues to wait for; `None` when none
    /// of it can still be running.
    fn foreign_work_event(&self) -> Result<Option<Event>>;

    /// An event that completes once all work enqueued on this queue so far has, by devbuf and by
    /// the libraries its handle was handed to: what that work looks like from outside (a stream's
    /// event; a barrier on a SYCL queue, whose last command does not cover theirs).
    fn handed_out_event(&self) -> Result<Event>;

    /// Whether the handles this queue hands out name the very queue its commands run on, in
    /// order, so that other libraries' later work there follows devbuf's commands by itself (a
    /// CUDA stream, an in-order SYCL queue, a queue nothing is handed out of); false for a queue
    /// handed out beside a private command queue, whose later work devbuf orders after its
    /// commands with [`Interop::order_handed_out_after`].
    fn hands_out_command_queue(&self) -> bool;

    /// Makes work that other libraries enqueue from now on through this queue's handles
    /// ([`Interop::untracked_foreign_work`]) wait for `event` (devbuf's command on memory handed
    /// out with this queue), without blocking the host: the other direction of
    /// [`Interop::handed_out_event`]. Where the handle is the queue devbuf's commands run on, in
    /// order, that is [`crate::Queue::wait_event`]; a SYCL queue handed out beside a private
    /// command queue takes a barrier that waits for the event.
    fn order_handed_out_after(&self, event: &Event) -> Result<()>;

    /// Whether [`crate::Queue::wait_device`] covers every queue other libraries may use this
    /// queue's memory on once it was handed out, so that devbuf may free it, or a pool hand it out
    /// again, after that wait. Where it does not (SYCL: other libraries' own queues are out of its
    /// sight, and only the runtime's own free waits for their work on the memory), a pool gives
    /// such memory back to the runtime instead.
    fn wait_device_covers_every_queue(&self) -> bool;

    /// The consumer of a zero-copy DLPack export of this queue's memory to `device`, read from
    /// its `stream` argument, and how it is ordered after the memory's pending work, where this
    /// backend has a rule for `device` (CUDA streams, SYCL queues); `None` leaves the export to
    /// the generic rule (waiting for pending work). A `stream` the rule does not accept is an
    /// error naming `stream`.
    ///
    /// # Safety
    /// A stream handle in `stream` names one of the consumer's live streams or queues (DLPack's
    /// contract).
    unsafe fn dlpack_consumer(
        &self,
        device: DLDevice,
        stream: &ForeignObject<'_>,
    ) -> Option<Result<ConsumerOrder>>;

    /// Whether [`Interop::dlpack_consumer`] has a rule for a zero-copy export to `device` when
    /// the consumer passes no stream (`stream=None`), as `dlpack_consumer(device,
    /// &ForeignObject::Nothing).is_some()` answers (the conformance kit checks that they agree).
    /// Where it has none, exporters apply the generic rule without asking (`__dlpack__` is a hot
    /// path: the answer is kept per array).
    fn dlpack_orders_streamless_export(&self, device: DLDevice) -> bool;

    /// Orders later work on this queue after the producer's `stream` (for memory just imported
    /// onto this queue), unless `sync` is off, and says what the import records
    /// ([`ProducerWork`]); a stream value the protocol forbids is refused either way. Nothing for
    /// a form this backend does not read.
    ///
    /// # Safety
    /// A stream handle in `stream` names one of the producer's live streams (the protocol's
    /// contract), alive while the data is used.
    unsafe fn order_after_producer(
        &self,
        stream: ProducerStream<'_>,
        sync: bool,
    ) -> Result<ProducerWork>;

    // -- Other processes.

    /// How this queue shares memory with other processes on the machine, or why it cannot (an
    /// [`crate::Error::Unsupported`] with the reason, made with [`unsupported`]).
    fn ipc(&self) -> Result<&dyn IpcSharing>;
}
