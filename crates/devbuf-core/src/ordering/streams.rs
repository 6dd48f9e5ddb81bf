//! What a stream's own operations cover: all work on it, other libraries' included, as
//! cuda.core's and dpctl's do (`record`, `wait`, `synchronize`, `query`), and ordering one stream
//! after another (a stream-ordered allocation handed to another stream, memory given back after
//! the work on a stream).

use std::sync::Arc;

use crate::ordering::FreeAfter;
use crate::{Event, Queue, Result};

/// An event that completes once all work enqueued on `queue` so far has, whoever enqueued it: a
/// consumer's work on a stream or queue devbuf handed out included (a SYCL queue's barrier, not
/// devbuf's last command). What a devbuf stream's `record`, `wait` and `query` mean, as
/// cuda.core's and dpctl's do.
pub fn all_work_event(queue: &Arc<dyn Queue>) -> Result<Event> {
    if queue.interop().untracked_foreign_work() {
        queue.interop().handed_out_event()
    } else {
        queue.record_event()
    }
}

/// Blocks until all work enqueued on `queue` so far has completed, whoever enqueued it
/// ([`all_work_event`]): a devbuf stream's `synchronize`.
pub fn synchronize_stream(queue: &Arc<dyn Queue>) -> Result<()> {
    if queue.interop().untracked_foreign_work() {
        queue.interop().handed_out_event()?.wait()?;
    }
    queue.wait()
}

/// Makes work enqueued on `later` from now on wait for all work enqueued on `earlier` so far,
/// whoever enqueued it, on the device where the runtime can (nothing when they are one queue: it
/// runs in order). A stream-ordered allocation handed to `later`, or memory given back on
/// `earlier` to a resource whose queue is `later`.
pub fn order_stream_after(later: &Arc<dyn Queue>, earlier: &Arc<dyn Queue>) -> Result<()> {
    if Arc::ptr_eq(later, earlier) {
        return Ok(());
    }
    later.wait_event(&all_work_event(earlier)?)
}

/// When memory may be reused after the work enqueued on `stream` so far, whoever enqueued it: a
/// free "after the work on stream S" (RMM's `deallocate(ptr, bytes, stream)`), which every
/// resource honours ([`crate::ordering::release_to_queue`]).
pub fn free_after_stream(stream: &Arc<dyn Queue>) -> Result<FreeAfter> {
    all_work_event(stream).map(FreeAfter::Event)
}

/// Makes work on `queue` from now on wait for `event` (a devbuf stream's `wait(event)`).
pub fn stream_waits_for(queue: &Arc<dyn Queue>, event: &Event) -> Result<()> {
    queue.wait_event(event)
}

/// Whether all work enqueued on `queue` so far has completed, whoever enqueued it (a devbuf
/// stream's `query()`).
pub fn stream_is_idle(queue: &Arc<dyn Queue>) -> Result<bool> {
    queue.is_idle()
}

/// An event like [`all_work_event`] that also keeps when it completed (`record(timing=True)`).
pub fn timed_event(queue: &Arc<dyn Queue>) -> Result<Event> {
    queue.record_timed_event()
}

/// Blocks until all work devbuf can see on `queue`'s device has completed, whichever library
/// enqueued it (a device's `sync()`).
pub fn synchronize_device(queue: &Arc<dyn Queue>) -> Result<()> {
    queue.wait_device()
}

/// Blocks until `event` has completed (an Event's `synchronize()`, a command the caller asked to
/// wait for).
pub fn wait_for_event(event: &Event) -> Result<()> {
    event.wait()
}
