//! Streams a user asks for: [`StreamOptions`] for a new one ([`crate::Backend::open_stream`]),
//! and the owner that keeps another library's stream alive while devbuf works on it
//! ([`crate::Backend::adopt_stream`]). What a stream's own operations cover is
//! [`crate::ordering`]'s.

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
pub type StreamOwner = Box<dyn KeepsStream>;

/// What keeps another library's stream alive, as devbuf asks it.
pub trait KeepsStream: Send + Sync + std::fmt::Debug + 'static {
    /// Whether the stream still exists: false once its owner destroyed it anyway (cuda.core's
    /// `Stream.close()` does, whoever else holds the object). devbuf then no longer asks the
    /// stream for what may still run there (the runtime finishes that work by itself), and waits
    /// for the device instead. True unless the keeper can tell.
    fn stream_alive(&self) -> bool {
        true
    }
}

/// Nothing keeps the stream alive but the caller's promise.
impl KeepsStream for () {}
