//! One of devbuf's queues as the libraries it was handed to see it ([`handed_out`]): its events
//! cover their work on it, and making it wait orders their next work there.

use std::fmt;
use std::sync::Arc;

use crate::{Event, ForeignQueue, Queue, Result};

/// `queue` as the libraries it was handed to see it once they hold its handle (a producer whose
/// work an import waits for, a DLPack consumer's `stream`): its events then cover their work on
/// it too ([`crate::Interop::handed_out_event`]). `None` where no other library can enqueue on it
/// ([`crate::Interop::untracked_foreign_work`]).
pub fn as_foreign_queue(queue: &Arc<dyn Queue>) -> Option<Arc<dyn ForeignQueue>> {
    queue
        .interop()
        .untracked_foreign_work()
        .then(|| handed_out(Arc::clone(queue)))
}

/// `queue` as another library that holds its handle sees it, for a backend that knows one does
/// (a SYCL queue adopted from its producer's in-order queue, which is that very queue).
pub fn handed_out(queue: Arc<dyn Queue>) -> Arc<dyn ForeignQueue> {
    Arc::new(HandedOut(queue))
}

/// One of devbuf's queues as another library that holds its handle sees it.
struct HandedOut(Arc<dyn Queue>);

impl fmt::Debug for HandedOut {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "HandedOut({:?})", self.0)
    }
}

impl ForeignQueue for HandedOut {
    fn record_event(&self) -> Result<Event> {
        self.0.interop().handed_out_event()
    }

    fn wait_event(&self, event: &Event) -> Result<()> {
        self.0.interop().order_handed_out_after(event)
    }

    fn as_any(&self) -> Option<&dyn std::any::Any> {
        Some(self)
    }
}

/// The devbuf queue behind `consumer`, when it is one of devbuf's queues as the libraries it was
/// handed to see it ([`handed_out`]).
pub(crate) fn devbuf_queue_of(consumer: &dyn ForeignQueue) -> Option<&Arc<dyn Queue>> {
    let HandedOut(queue) = consumer.as_any()?.downcast_ref()?;
    Some(queue)
}
