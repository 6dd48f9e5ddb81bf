//! The exchange protocols' ordering rules applied to memory, once for every backend: each backend
//! answers its runtime's questions ([`crate::Interop`], [`crate::Backend`]) in terms that name no
//! runtime, and this module applies the answers to a [`Buffer`]'s pending work. The Python layer
//! reduces its objects to [`ForeignObject`]s and asks through here and the registry
//! (`devbuf::queue_for_suai_context` and friends) without naming a backend.

use std::fmt;
use std::sync::Arc;

use dlpark::ffi::DLDevice;

use crate::interop::{ConsumerOrder, ForeignObject, ProducerStream};
use crate::{Buffer, Event, ForeignQueue, Queue, Result, blocking};

/// The exchange protocols that belong to one backend's runtime.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Protocol {
    /// `__sycl_usm_array_interface__` and the dpctl attributes around it.
    Suai,
    /// `__cuda_array_interface__` and the CUDA stream protocol (`__cuda_stream__`).
    Cai,
}

/// The protocol as users meet it, for messages.
impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Protocol::Suai => "__sycl_usm_array_interface__",
            Protocol::Cai => "__cuda_array_interface__",
        })
    }
}

/// What a protocol's context object resolves to.
#[derive(Debug)]
pub struct ResolvedQueue {
    /// The queue for the memory.
    pub queue: Arc<dyn Queue>,
    /// The producer's queue whose pending work an import is ordered after, when the object names
    /// one (a context or a filter string names none).
    pub producer: Option<Arc<dyn ForeignQueue>>,
    /// Whether the answer depends on the object alone, so the caller may cache it by the
    /// object's identity (a context with several devices depends on the pointer's device too).
    pub same_for_every_pointer: bool,
}

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
        self.0.wait_event(event)
    }
}

/// Readies `buffer` for a zero-copy DLPack export to `device`, ordered for the consumer's
/// `stream` argument by the rule of the memory's backend ([`crate::Interop::dlpack_consumer`]),
/// without blocking the host where the runtime allows it; `None` where that backend has no rule
/// for `device`, leaving the export to the generic rule (waiting for pending work).
///
/// # Safety
/// A stream handle in `stream` names one of the consumer's live streams or queues (DLPack's
/// contract).
pub unsafe fn order_dlpack_export(
    buffer: &Buffer,
    device: DLDevice,
    stream: &ForeignObject<'_>,
) -> Option<Result<()>> {
    let home = buffer.queue();
    // SAFETY: the caller's promise about `stream`.
    let order = match unsafe { home.interop().dlpack_consumer(device, stream) }? {
        Ok(order) => order,
        Err(err) => return Some(Err(err)),
    };
    Some(blocking(|| match order {
        ConsumerOrder::Nothing => Ok(()),
        ConsumerOrder::AfterPendingWork(consumer) => buffer.order_on_foreign(consumer.as_ref()),
        ConsumerOrder::AfterQueue(consumer) => {
            // The queue that sees all pending work (joined there when it is on several), else ours.
            let pending = buffer.sync_queue(home)?;
            let producer = pending.as_ref().unwrap_or(home);
            consumer.wait_event(&producer.record_event()?)
        }
    }))
}

/// Orders later work on `buffer`, memory just imported, after the producer's `stream` as the
/// protocol that carried it names it, unless `sync` is off; a stream value the protocol forbids
/// is refused either way. The memory's backend decodes the stream and orders its queue
/// ([`crate::Interop::order_after_producer`]); the ordering becomes pending work on `buffer`.
///
/// # Safety
/// A stream handle in `stream` names one of the producer's live streams (the protocol's
/// contract), alive while the data is used.
pub unsafe fn order_after_producer(
    buffer: &Buffer,
    stream: ProducerStream<'_>,
    sync: bool,
) -> Result<()> {
    let queue = buffer.queue();
    // SAFETY: the caller's promise about `stream`.
    let work = unsafe { queue.interop().order_after_producer(stream, sync) }?;
    if let Some(event) = work.ordered {
        buffer.record_work(queue, event);
    }
    if let Some(producer) = work.hold_back {
        buffer.hold_back(producer);
    }
    Ok(())
}
