//! A [`Buffer`]'s hints about shared memory: prefetch (ordered work, tracked as any command) and
//! advice.

use std::sync::Arc;

use super::Buffer;
use super::ordering::record_enqueued;
use super::transfer::{Reach, check_reaches};
use crate::{Advice, Error, Event, Location, MemKind, Queue, Result};

impl Buffer {
    /// Enqueues migrating this view's bytes toward `to` on the buffer's queue, after pending work
    /// on the allocation (RMM's `DeviceBuffer.prefetch`, SYCL's `queue::prefetch`); the work is
    /// recorded like a fill's. Shared memory only.
    pub fn prefetch(&self, to: Location) -> Result<Event> {
        self.prefetch_on(to, self.queue())
    }

    /// [`Buffer::prefetch`] on `queue` (a stream of the buffer's device, which must reach it).
    pub fn prefetch_on(&self, to: Location, queue: &Arc<dyn Queue>) -> Result<Event> {
        self.check_shared("prefetch")?;
        check_reaches(queue, self, Reach::Prefetch)?;
        self.order_on(queue)?;
        if self.len > 0 {
            // SAFETY: the view lies in one shared allocation of the buffer's device, which
            // records the work and outlives it.
            unsafe { queue.prefetch(self.ptr(), self.len, to)? };
        }
        record_enqueued(queue, &[self], None)
    }

    /// Tells the runtime how this view's bytes will be used (`cuMemAdvise`, SYCL's
    /// `mem_advise`). Shared memory only.
    pub fn advise(&self, advice: Advice) -> Result<()> {
        self.check_shared("advise")?;
        if self.len == 0 {
            return Ok(());
        }
        // SAFETY: the view lies in one shared allocation of the buffer's queue.
        unsafe { self.queue().advise(self.ptr(), self.len, advice) }
    }

    fn check_shared(&self, what: &'static str) -> Result<()> {
        if self.kind() == MemKind::Shared {
            return Ok(());
        }
        Err(Error::invalid(
            "kind",
            format!("{what} takes shared (managed) memory, not {}", self.kind()),
        ))
    }
}
