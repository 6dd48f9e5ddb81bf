//! Streams devbuf orders work with but does not own: the stream a CAI producer names, the one a
//! DLPack consumer passes; what is done with them is [`crate::interop`]'s. And devbuf's own
//! streams as another library hands them back ([`own_stream`]).

use std::sync::{Arc, Weak};

use cudarc::driver::sys::{CUcontext, CUstream};
use devbuf_core::{Event, ForeignQueue, Queue, Result};
use parking_lot::Mutex;

use crate::context::PrimaryContext;
use crate::event::{self, CudaEvent};
use crate::queue::{CudaQueue, stream_context};

/// Another library's stream, which its owner keeps alive while devbuf uses it.
#[derive(Debug)]
struct ForeignStream {
    handle: usize,
    /// The context the stream belongs to (for 1 and 2, the primary context, where they resolve).
    context: CUcontext,
    /// The primary context of the device the stream was imported with, kept alive with it.
    primary: Arc<PrimaryContext>,
}

// SAFETY: stream and context handles are usable from any thread; the owner keeps them alive.
unsafe impl Send for ForeignStream {}
// SAFETY: as above; `&ForeignStream` only records and waits, which the driver serialises.
unsafe impl Sync for ForeignStream {}

impl ForeignQueue for ForeignStream {
    fn record_event(&self) -> Result<Event> {
        let event = CudaEvent::record_in(&self.primary, self.context, self.handle as CUstream)?;
        Ok(Event::new(event))
    }

    fn wait_event(&self, event: &Event) -> Result<()> {
        match event.downcast_ref::<CudaEvent>() {
            Some(cuda) => Ok(event::enqueue_wait(
                self.handle as CUstream,
                self.context,
                cuda.raw(),
            )?),
            // Another backend's event: the stream cannot wait for it, the host can.
            None => event.wait(),
        }
    }
}

impl CudaQueue {
    /// Another library's stream `handle` (1 and 2 resolved in this queue's context).
    pub(crate) fn foreign_stream(&self, handle: usize) -> Result<Arc<dyn ForeignQueue>> {
        let context = stream_context(self.context(), handle)?;
        Ok(Arc::new(ForeignStream {
            handle,
            context,
            primary: Arc::clone(self.context()),
        }))
    }
}

/// devbuf's queues by stream handle, while they live: a handle another library passes back (a
/// devbuf stream as a DLPack consumer's `stream`) names the devbuf queue it is.
static OWN_STREAMS: Mutex<Vec<(usize, Weak<dyn Queue>)>> = Mutex::new(Vec::new());

/// Records `queue` as one of devbuf's queues, found again by its stream handle ([`own_stream`]).
pub(crate) fn register_own(queue: Arc<CudaQueue>) -> Arc<CudaQueue> {
    let dynamic: Arc<dyn Queue> = Arc::clone(&queue) as Arc<dyn Queue>;
    let mut own = OWN_STREAMS.lock();
    own.retain(|(_, queue)| queue.strong_count() > 0);
    own.push((queue.stream(), Arc::downgrade(&dynamic)));
    queue
}

/// The devbuf queue whose stream is `handle`, while it lives.
pub(crate) fn own_stream(handle: usize) -> Option<Arc<dyn Queue>> {
    OWN_STREAMS
        .lock()
        .iter()
        .filter(|(own, _)| *own == handle)
        .find_map(|(_, queue)| queue.upgrade())
}
