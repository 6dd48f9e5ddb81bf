//! Streams devbuf orders work with but does not own: the stream a CAI producer names, the one a
//! DLPack consumer passes; what is done with them is [`crate::interop`]'s.

use std::sync::Arc;

use cudarc::driver::sys::{CUcontext, CUstream};
use devbuf_core::{Event, ForeignQueue, Result};

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
