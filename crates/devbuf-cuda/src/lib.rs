//! devbuf's CUDA backend, on the CUDA driver API through cudarc's generated `sys` bindings,
//! loaded at run time: the crate builds without a CUDA toolkit and reports CUDA as unavailable,
//! with a reason, where there is no driver.
//!
//! Layers, bottom up:
//! - `driver`: every driver call goes through one guard that turns failure codes
//!   and cudarc's panics (no `libcuda`, a symbol an old driver lacks) into errors; the driver is
//!   probed once.
//! - `context`, `stream`, `event`, `memory`: small RAII wrappers (primary contexts made current
//!   per call and thread, streams, events, the three kinds of memory, pointer attributes).
//! - [`CudaQueue`] and [`CudaBackend`]: the core model's `Queue` and `Backend`.
//! - `ipc`: device memory shared between processes (`cuIpcGetMemHandle`/`cuIpcOpenMemHandle`).
//! - [`protocol`]: how CAI v3 and DLPack name streams with integers, and the CAI sync opt-out.
//!
//! For the exchange protocols (the Python layer):
//! - CAI export: `stream` is [`CudaQueue::stream`] while the queue may have work on the data.
//! - CAI import: [`queue_for_pointer`] picks the queue and kind for `data`, then
//!   [`CudaQueue::sync_cai_import`] with the imported buffer and the `stream` entry (for a
//!   producer that names none, [`protocol::implied_cai_stream`]).
//! - DLPack export: [`CudaQueue::sync_dlpack_export`] with `__dlpack__`'s `stream` argument.
//! - DLPack import: pass [`CudaQueue::stream`] of the queue for the producer's
//!   `__dlpack_device__` ([`devbuf_core::Backend::queue_for_dlpack_device`]) as `stream=`.

mod backend;
mod context;
mod device;
mod driver;
mod event;
mod foreign;
mod ipc;
mod memory;
pub mod protocol;
mod queue;
mod stream;

pub use backend::{CudaBackend, classify, default_queue, queue_for_pointer};
pub use driver::BACKEND;
pub use event::CudaEvent;
pub use protocol::ProtocolStream;
pub use queue::CudaQueue;
