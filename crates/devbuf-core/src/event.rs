//! Points in a queue's work: [`Event`] (a backend's [`QueueEvent`], shareable), the
//! [`CompletedEvent`] synchronous backends record, and [`ForeignQueue`], another library's queue
//! devbuf orders its work with.

use std::any::Any;
use std::fmt;
use std::sync::Arc;

use crate::Result;

/// Another library's queue or stream (a dpctl queue that produced imported memory, or the one a
/// DLPack consumer passes as `stream`): devbuf orders work with it but never enqueues its own.
pub trait ForeignQueue: Send + Sync + fmt::Debug {
    /// Records an event that completes when all work enqueued on it so far has completed, without
    /// blocking the host (a barrier on an out-of-order SYCL queue).
    fn record_event(&self) -> Result<Event>;

    /// Makes work enqueued on it from now on wait for `event`, without blocking the host where
    /// the runtime allows it.
    fn wait_event(&self, event: &Event) -> Result<()>;

    /// Downcasting, for the one kind devbuf makes itself: one of devbuf's own queues as another
    /// library that holds its handle sees it ([`crate::ordering::handed_out`]), so that memory
    /// handed to it is recorded as handed out on that queue. `None` for every other library's.
    fn as_any(&self) -> Option<&dyn Any> {
        None
    }
}

/// A backend's event: a point in one queue's stream of work.
pub trait QueueEvent: Send + Sync + fmt::Debug {
    /// Blocks until the event has completed.
    fn wait(&self) -> Result<()>;
    /// Whether the event has completed, without blocking.
    fn is_complete(&self) -> Result<bool>;
    /// Milliseconds from `start` to this event, both recorded with timing on one backend
    /// ([`crate::Queue::record_timed_event`]); `None` where either has no timing.
    fn elapsed_ms_since(&self, _start: &Event) -> Option<Result<f32>> {
        None
    }
    /// Downcasting, so a queue can wait on its own backend's events on the device.
    fn as_any(&self) -> &dyn Any;
}

/// A shareable handle to a [`QueueEvent`].
#[derive(Clone, Debug)]
pub struct Event(Arc<dyn QueueEvent>);

impl Event {
    /// Wraps a backend event.
    pub fn new(event: impl QueueEvent + 'static) -> Self {
        Event(Arc::new(event))
    }

    /// Blocks until the event has completed.
    pub fn wait(&self) -> Result<()> {
        self.0.wait()
    }

    /// Whether the event has completed, without blocking.
    pub fn is_complete(&self) -> Result<bool> {
        self.0.is_complete()
    }

    /// Milliseconds from `start` to this event, where both were recorded with timing
    /// ([`crate::Queue::record_timed_event`]); `None` where either has none.
    pub fn elapsed_ms_since(&self, start: &Event) -> Option<Result<f32>> {
        self.0.elapsed_ms_since(start)
    }

    /// Whether both handles name the same event.
    pub fn same_as(&self, other: &Event) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }

    /// The backend's own event, if it is of type `T`.
    pub fn downcast_ref<T: 'static>(&self) -> Option<&T> {
        self.0.as_any().downcast_ref()
    }
}

/// An event that has already completed: what synchronous backends record.
#[derive(Debug, Clone, Copy, Default)]
pub struct CompletedEvent;

impl QueueEvent for CompletedEvent {
    fn wait(&self) -> Result<()> {
        Ok(())
    }
    fn is_complete(&self) -> Result<bool> {
        Ok(true)
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}
