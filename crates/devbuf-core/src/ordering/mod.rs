//! The ordering invariant, in one place (docs/architecture.md, "The ordering invariant"): what
//! devbuf hands out, a consumer may write on any stream or queue devbuf handed out; devbuf's next
//! touch of those bytes (host view, command, get, pickle, IPC, re-export, pool reuse, free, close)
//! waits for all of them, and the consumers' next work follows devbuf's commands. Every path that
//! orders work calls into this module and never re-derives the rule; `ci/ordering-guard` fails
//! when code elsewhere calls the runtimes' wait, record or barrier primitives.
//!
//! - [`access`]: every access to an allocation's bytes ([`crate::Buffer::order_access`]), what a
//!   hand-out records, and what devbuf's commands record and publish.
//! - `handed_out`: one of devbuf's queues as the libraries it was handed to see it.
//! - `pending`: what one allocation records (the work that may still touch it, where it was
//!   handed out).
//! - [`release`]: freeing after that work, for allocations and for every memory resource.
//! - [`streams`]: what a stream's own operations cover, and one stream after another.

pub mod access;
mod handed_out;
pub(crate) mod pending;
pub mod release;
pub mod streams;

pub use access::Access;
pub(crate) use handed_out::devbuf_queue_of;
pub use handed_out::{as_foreign_queue, handed_out};
pub use release::{release_to_queue, wait_before_handing_back};
pub use streams::{
    all_work_event, free_after_stream, order_stream_after, stream_is_idle, stream_waits_for,
    synchronize_device, synchronize_stream, timed_event, wait_for_event,
};
