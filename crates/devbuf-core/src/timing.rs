//! Timed events: [`crate::Queue::record_timed_event`] records an event that also says when it
//! completed, so that two of them give the time between (CUDA's `cuEventElapsedTime`, cuda.core's
//! `end - start`, CuPy's `get_elapsed_time`). The host's is the moment it was recorded: its work
//! is done before each call returns.

use std::any::Any;
use std::time::Instant;

use crate::{Event, QueueEvent, Result};

/// A host event with its moment: the host's work up to it was done when it was recorded.
#[derive(Debug, Clone, Copy)]
pub struct InstantEvent(pub Instant);

impl QueueEvent for InstantEvent {
    fn wait(&self) -> Result<()> {
        Ok(())
    }

    fn is_complete(&self) -> Result<bool> {
        Ok(true)
    }

    fn elapsed_ms_since(&self, start: &Event) -> Option<Result<f32>> {
        let start = start.downcast_ref::<InstantEvent>()?;
        let ms = if self.0 >= start.0 {
            self.0.duration_since(start.0).as_secs_f32()
        } else {
            -start.0.duration_since(self.0).as_secs_f32()
        };
        Some(Ok(ms * 1000.0))
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{CompletedEvent, HostQueue, Queue};

    #[test]
    fn host_timed_events_measure_the_time_between() {
        let queue = HostQueue::new();
        let start = queue.record_timed_event().unwrap();
        std::thread::sleep(std::time::Duration::from_millis(5));
        let end = queue.record_timed_event().unwrap();
        let ms = end.elapsed_ms_since(&start).unwrap().unwrap();
        assert!(ms >= 5.0, "{ms}");
        assert!(start.elapsed_ms_since(&end).unwrap().unwrap() <= -5.0);
        // An event without timing has none to give.
        assert!(end.elapsed_ms_since(&Event::new(CompletedEvent)).is_none());
    }
}
