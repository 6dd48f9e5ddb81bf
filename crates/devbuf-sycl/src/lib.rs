//! devbuf's SYCL backend: USM allocation, copies, fills, events and pointer classification on
//! SYCL devices, through dpctl's SYCL C API (`libDPCTLSyclInterface.so`, shipped by the dpctl
//! Python package) loaded at run time.
//!
//! - [`Runtime`]: finding and loading the library ([`Runtime::load`] for an explicit path,
//!   [`Runtime::find`] for `DEVBUF_SYCL_LIBRARY`, then the loader's path).
//! - [`SyclBackend`]: availability, devices (by dpctl filter string), default queue.
//! - [`SyclQueue`]: the queue devbuf hands out with its memory (for a device's default queue, the
//!   one dpnp makes its arrays on) and the in-order queue devbuf's commands run on, or one adopted
//!   from a "SyclQueueRef"/"SyclContextRef" payload; implements [`devbuf_core::Queue`].
//!
//! # Importing and exporting SYCL objects
//! For SUAI's `syclobj` (after [`SyclBackend::runtime`]):
//! - a filter string: [`SyclQueue::open`];
//! - a "SyclQueueRef" capsule (`dpctl.SyclQueue._get_capsule()`): [`SyclQueue::from_queue_ref`],
//!   or [`SyclQueue::from_producer_queue_ref`] with the producer's queue to order after;
//! - a "SyclContextRef" capsule (`dpctl.SyclContext._get_capsule()`):
//!   [`SyclQueue::from_context_ref_and_pointer`] (the queue on the data's device, and its kind),
//!   or [`SyclQueue::from_context_ref`].
//!
//! A DLPack consumer's `stream` (a dpctl queue): [`SyclQueue::from_producer_queue_ref`].
//!
//! Then [`devbuf_core::Queue::kind_of`] tells whether the data is USM of that context (`unknown`:
//! reject it, as dpctl does). Exports: [`devbuf_core::Interop::export_handle`] ("SyclQueueRef") and
//! [`SyclQueue::export_context_handle`] ("SyclContextRef"); DLPack: kDLOneAPI with
//! [`SyclQueue::dlpack_device_id`], only for memory of the default context
//! ([`SyclQueue::is_default_context`]), the only memory dpctl and dpnp accept.
//!
//! # Exceptions
//! A C++ exception that reaches Rust aborts the process. dpctl's C API catches them in most
//! functions, but not in these, which devbuf only calls once they cannot throw:
//! - `DPCTLaligned_alloc_host` throws on a device without `usm_host_allocations` (PoCL): every
//!   allocation first checks the device's aspect for its kind.
//! - `DPCTLUSM_GetPointerType` throws in a context whose devices have no USM: pointers are only
//!   classified in contexts with a USM-capable device; elsewhere they are `unknown`.
//! - `DPCTLUSM_GetPointerDevice` throws for memory the context does not know: only called after
//!   classification.
//! - `DPCTLfree_with_queue`: only our own allocations, freed through the queue that made them.
//! - `DPCTLQueue_Wait` and `DPCTLPlatform_GetDefaultContext` are not used: waits go through
//!   events (`DPCTLEvent_Wait` catches), default contexts through dpctl's device cache.
//!
//! Queues are created with an asynchronous error handler, since SYCL's default one terminates.

// Caller numbers become addresses here: every size, count, offset and alignment is checked
// (docs/architecture.md, "Untrusted numbers").
#![deny(clippy::arithmetic_side_effects)]

mod backend;
mod device;
mod event;
mod foreign;
mod hints;
mod interop;
mod ipc;
mod loader;
mod memory;
mod queue;
mod raw;
mod row_kernel;
mod rows;

use std::sync::Arc;

use devbuf_core::Queue;

pub use backend::{DESCRIPTOR, SyclBackend};
pub use event::SyclEvent;
pub use loader::{LIBRARY_ENV, Runtime, SYCL};
pub use queue::SyclQueue;

/// The default SYCL queue ([`SyclBackend::default_queue`]), or why there is none: what the
/// conformance kit and tools take.
pub fn default_queue() -> Result<Arc<dyn Queue>, String> {
    SyclBackend::new()
        .default_queue()
        .map(|queue| queue as Arc<dyn Queue>)
        .map_err(|err| err.to_string())
}
