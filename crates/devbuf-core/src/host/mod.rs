//! The host backend: always available, the embedded default. Every kind is aligned host memory
//! from the global allocator; copies and fills run synchronously on the calling thread. It keeps
//! a registry of its allocations so that `kind_of` answers for them (and only them).
//!
//! Like malloc's thread caches and devbuf's pool, the queue keeps a few small freed blocks for the
//! next request of exactly the same size, alignment and kind: the allocate-use-free loop of one
//! size then skips the system allocator's aligned path (`posix_memalign` splits and merges chunks
//! for every 256-byte-aligned request) and the registry's update, most of an allocation's cost.
//! A kept block stays in the registry: it is still the queue's memory, and no other owner can hand
//! out an address inside it. The queue frees a block only once `Buffer` has ordered the release
//! after every use of it, so reusing one is as safe as freeing it.

// Caller numbers become addresses here: every size, count, offset and alignment is checked
// (docs/architecture.md, "Untrusted numbers").
#![deny(clippy::arithmetic_side_effects)]

mod address_space;
mod backend;
mod device;
mod interop;
mod ipc;
mod memory;
mod queue;

pub use address_space::{past_user_space, user_address_limit};
pub use backend::{DESCRIPTOR, HostBackend};
pub use queue::HostQueue;

/// The name of the host backend and its one selector (defined with [`crate::DeviceInfo`], whose
/// `backend` it names, so that `Buffer` can tell the host backend's queues without depending on
/// the backend).
pub use crate::kind::HOST;
