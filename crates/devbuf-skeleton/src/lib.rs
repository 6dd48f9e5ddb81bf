//! The smallest devbuf backend: host memory from the process's allocator, one device, no streams
//! of its own, nothing handed to other libraries. It is the template of docs/architecture.md's
//! "Adding a backend": the same files as every backend, each with the answer of a backend whose
//! runtime lacks the feature, and `tests/conformance.rs` running the kit and the descriptor checks
//! on it. Never linked into `devbuf`.

// Caller numbers become addresses here: every size, count, offset and alignment is checked
// (docs/architecture.md, "Untrusted numbers").
#![deny(clippy::arithmetic_side_effects)]

mod backend;
mod device;
mod interop;
mod ipc;
mod memory;
mod queue;

use std::sync::Arc;

use devbuf_core::{Backend, Queue};

pub use backend::{DESCRIPTOR, SkeletonBackend};
pub use device::SKELETON;
pub use queue::SkeletonQueue;

/// The default queue, or why there is none: what the conformance kit and tools take.
pub fn default_queue() -> Result<Arc<dyn Queue>, String> {
    SkeletonBackend.open("").map_err(|err| err.to_string())
}
