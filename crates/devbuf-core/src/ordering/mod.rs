//! The ordering invariant (docs/architecture.md, "The ordering invariant"): what devbuf hands out,
//! a consumer may write on any stream or queue devbuf handed out; devbuf's next touch of those
//! bytes (host view, command, get, pickle, IPC, re-export, pool reuse, free, close) waits for all
//! of them, and the consumers' next work follows devbuf's commands. Every path that orders work
//! calls this module, never re-deriving the rule; `ci/ordering-guard` fails when code elsewhere
//! calls the runtimes' wait, record or barrier primitives. It has two layers, because memory
//! resources sit between them:
//!
//! - here, under the memory resources: what a stream's own operations cover and one stream after
//!   another ([`streams`]), a devbuf queue as the libraries it was handed to see it
//!   ([`handed_out`]), and memory given back after the work on it ([`FreeAfter`],
//!   [`release_to_queue`]);
//! - `crate::buffer`'s `ordering`, over them: every access to a buffer's bytes
//!   ([`crate::Buffer::order_access`]), what an allocation records, and its release.

mod free_after;
mod handed_out;
pub mod streams;

pub use crate::buffer::Access;
pub(crate) use free_after::wait_for_freed_blocks;
pub use free_after::{FreeAfter, release_to_queue, wait_before_handing_back};
pub(crate) use handed_out::devbuf_queue_of;
pub use handed_out::{as_foreign_queue, handed_out};
pub use streams::{
    all_work_event, free_after_stream, order_stream_after, stream_is_idle, stream_waits_for,
    synchronize_device, synchronize_stream, timed_event, wait_for_event,
};
