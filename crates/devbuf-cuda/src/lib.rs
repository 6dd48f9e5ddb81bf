//! devbuf's CUDA backend, on the CUDA driver API through cudarc's generated `sys` bindings,
//! loaded at run time: the crate builds without a CUDA toolkit and reports CUDA as unavailable,
//! with a reason, where there is no driver.
//!
//! Layers, bottom up:
//! - `loader`: the one door to the driver. Every driver call goes through one guard
//!   (`loader::call`) that turns failure codes and cudarc's panics (no `libcuda`, a symbol an old
//!   driver lacks) into errors; the driver is probed once (`loader::driver`).
//! - `context`, `stream`, `event`, `memory`: small RAII wrappers (primary contexts made current
//!   per call and thread, streams, events, the three kinds of memory, pointer attributes).
//! - [`CudaQueue`] and [`CudaBackend`]: the core model's `Queue` (with its `Interop` half,
//!   `interop.rs`) and `Backend`.
//! - `ipc`: device memory shared between processes (`cuIpcGetMemHandle`/`cuIpcOpenMemHandle`).
//! - [`protocol`]: how CAI v3 and DLPack name streams with integers, and the CAI sync opt-out.
//!
//! The exchange protocols reach it through core's questions (`devbuf_core::exchange`), which the
//! Python layer asks without naming a backend:
//! - CAI export: the buffer's pending work names [`CudaQueue::stream`] while it may touch the data.
//! - CAI import: `Backend::claim_pointer` (the queue for `data`, when the driver knows it), then
//!   `Interop::order_after_producer` with the `stream` entry (for a producer that names
//!   none, [`protocol::implied_cai_stream`]): our stream waits for the producer's, the import is
//!   pending work, and later non-blocking work holds the producer's stream back (CAI v3).
//! - DLPack export: `Interop::dlpack_consumer` with `__dlpack__`'s `stream` argument.
//! - DLPack import: the queue for the producer's `__dlpack_device__`
//!   (`Backend::queue_for_dlpack_device`) passes its native stream as `stream=`.

// Caller numbers become addresses here: every size, count, offset and alignment is checked
// (docs/architecture.md, "Untrusted numbers").
#![deny(clippy::arithmetic_side_effects)]

mod backend;
mod context;
mod device;
mod event;
mod foreign;
mod hints;
mod interop;
mod ipc;
mod loader;
mod memory;
mod peer;
pub mod protocol;
mod queue;
mod rows;
mod stream;

pub use backend::{CudaBackend, DESCRIPTOR, classify, default_queue, queue_for_pointer};
/// The driver's result codes, as [`returned`] takes them.
pub use cudarc::driver::sys::CUresult;
pub use event::CudaEvent;
pub use loader::{BACKEND, returned};
pub use protocol::ProtocolStream;
pub use queue::CudaQueue;
