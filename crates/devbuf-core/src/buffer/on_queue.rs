//! A [`Buffer`]'s commands on a queue the caller picks (a stream of the user's, not the buffer's
//! own queue): the pending-work tracking then follows that queue, so other queues, host views and
//! exports wait for it as they wait for the buffer's own queue.

use std::sync::Arc;

use super::Buffer;
use super::ordering::record_enqueued;
use super::transfer::{Reach, check_reaches};
use crate::{Error, Event, Queue, Result};

impl Buffer {
    /// Enqueues setting this view to `byte` on `queue` (which must reach it), ordered after
    /// pending work on the allocation, and returns without waiting; the work is recorded like
    /// [`Buffer::enqueue_copy_from`]'s.
    pub fn enqueue_fill_on(&self, byte: u8, queue: &Arc<dyn Queue>) -> Result<Event> {
        self.check_writable()?;
        check_reaches(queue, self, Reach::Fill)?;
        self.order_on(queue)?;
        if self.len > 0 {
            // SAFETY: the view is in range and reachable by `queue`; the allocation records the
            // work and outlives it.
            unsafe { queue.fill(self.ptr(), byte, self.len)? };
        }
        record_enqueued(queue, &[self], None)
    }

    /// Copies this view into `dst` (host memory, same length) on `queue` (which must reach it),
    /// ordered after pending work on the allocation, and waits for `queue`.
    pub fn copy_to_host_on(&self, dst: &mut [u8], queue: &Arc<dyn Queue>) -> Result<()> {
        if dst.len() != self.len {
            return Err(Error::invalid(
                "out",
                format!(
                    "destination has {} bytes, source has {}",
                    dst.len(),
                    self.len
                ),
            ));
        }
        check_reaches(queue, self, Reach::CopyToHost)?;
        if self.len == 0 {
            return Ok(());
        }
        self.order_on(queue)?;
        // SAFETY: `dst` is exclusively borrowed host memory; we wait before returning.
        unsafe { queue.copy(dst.as_mut_ptr(), self.ptr(), self.len)? };
        self.finish_on(queue, &[])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{HostQueue, MemKind};

    #[test]
    fn work_on_another_queue_is_tracked_there() {
        let home: Arc<dyn Queue> = Arc::new(HostQueue::new());
        let other: Arc<dyn Queue> = Arc::new(HostQueue::new());
        let buffer = Buffer::alloc(&home, MemKind::Host, 8).unwrap();
        buffer.enqueue_fill_on(7, &other).unwrap().wait().unwrap();
        let mut back = [0; 8];
        buffer.copy_to_host_on(&mut back, &other).unwrap();
        assert_eq!(back, [7; 8]);
        assert!(buffer.copy_to_host_on(&mut [0; 4], &other).is_err());
    }
}
