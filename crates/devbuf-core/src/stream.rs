//! Streams a user asks for: [`StreamOptions`] for a new one ([`crate::Backend::open_stream`]),
//! the owner that keeps another library's stream alive while devbuf works on it
//! ([`crate::Backend::adopt_stream`]), and what a stream's own operations cover: all work on it,
//! other libraries' included ([`all_work_event`]).

use std::any::Any;
use std::sync::Arc;

use crate::{Event, Queue, Result};

/// How a new stream is made, in cuda.core's terms (`StreamOptions`) and CuPy's
/// (`Stream(non_blocking, priority)`). A backend without such a notion ignores what it cannot
/// honour and says so in its documentation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamOptions {
    /// Whether the stream runs without synchronising with the legacy default stream (CUDA's
    /// `CU_STREAM_NON_BLOCKING`).
    pub non_blocking: bool,
    /// The stream's priority where the runtime has priorities (CUDA: lower numbers are greater
    /// priorities, clamped to the device's range by the driver); `None` for the default.
    pub priority: Option<i32>,
    /// Whether the stream's events keep when they completed ([`crate::Queue::record_timed_event`])
    /// where the runtime decides that per stream: a SYCL queue made with
    /// `property::queue::enable_profiling` (which costs every command on it a few timestamps).
    /// CUDA's and the host's events time on any stream.
    pub timing: bool,
}

impl Default for StreamOptions {
    /// Non-blocking, default priority: what devbuf's own queues use, and cuda.core's default.
    fn default() -> Self {
        StreamOptions {
            non_blocking: true,
            priority: None,
            timing: false,
        }
    }
}

/// Where a stream handle given to [`crate::Backend::adopt_stream`] came from: a backend's
/// protocols give some values meanings that differ by where they appear (CUDA's 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HandleSource {
    /// The handle of a stream protocol's pair (`__cuda_stream__`'s second item).
    StreamProtocol,
    /// A bare handle a caller passed (`Stream.from_handle`).
    Bare,
}

/// Whatever keeps another library's stream alive (its Python object, say), held by the queue that
/// adopted it for as long as that queue or any memory it allocated lives.
pub type StreamOwner = Box<dyn Any + Send + Sync>;

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
