//! What other libraries hand devbuf with memory or a request, in terms that name no runtime
//! ([`ForeignObject`], [`ProducerStream`]), and how a backend answers the ordering questions about
//! them ([`ConsumerOrder`], [`ProducerWork`]), which core then applies to the memory's pending work
//! ([`crate::exchange`]).

use std::ffi::CStr;
use std::fmt;
use std::sync::Arc;

use crate::{DeviceInfo, Event, ForeignQueue};

/// An object another library hands over with memory or a request (SUAI's `syclobj`, DLPack's
/// `stream` argument, a CAI's `stream` entry, a `device=` argument), reduced by the embedding
/// layer to what a backend can read. Borrowed for one call: the object behind a
/// [`ForeignObject::Handle`] outlives it.
#[derive(Clone, Copy)]
pub enum ForeignObject<'a> {
    /// No object (Python's `None`).
    Nothing,
    /// An integer, such as a stream handle.
    Int(i64),
    /// A string, such as a dpctl filter selector.
    Text(&'a str),
    /// One of devbuf's own queues.
    Queue {
        /// The queue's device.
        device: &'a DeviceInfo,
        /// The queue as the libraries it was handed to see it ([`crate::ordering::as_foreign_queue`]):
        /// `None` where no other library can enqueue on it.
        foreign: Option<&'a Arc<dyn ForeignQueue>>,
    },
    /// A runtime handle carried in a named capsule ("SyclQueueRef", "SyclContextRef"), borrowed.
    Handle {
        /// The capsule's name.
        name: &'a CStr,
        /// The capsule's payload.
        ptr: usize,
    },
    /// A handle object whose capsule getter (`_get_capsule()`) returned something else.
    NotACapsule,
    /// Anything else, described (its `repr`) for error messages.
    Other(&'a str),
}

impl fmt::Debug for ForeignObject<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ForeignObject::Nothing => write!(f, "None"),
            ForeignObject::Int(value) => write!(f, "{value}"),
            ForeignObject::Text(text) => write!(f, "{text:?}"),
            ForeignObject::Queue { device, .. } => write!(f, "<devbuf.Queue on {device}>"),
            ForeignObject::Handle { name, ptr } => write!(f, "<capsule {name:?} at {ptr:#x}>"),
            ForeignObject::NotACapsule => write!(f, "<object whose _get_capsule() is no capsule>"),
            ForeignObject::Other(repr) => write!(f, "{repr}"),
        }
    }
}

/// Where the producer of memory just imported says its work on it may still run, in the form
/// the protocol that carried the memory gives it. Core reads none of these forms: the backend
/// of the memory's queue decodes its own.
#[derive(Debug, Clone, Copy)]
pub enum ProducerStream<'a> {
    /// A `__cuda_array_interface__`'s `stream` entry ([`ForeignObject::Nothing`] when the dict
    /// has none or says `None`).
    CaiEntry(ForeignObject<'a>),
    /// The work stream DLPack's C exchange API reported (`current_work_stream`) for the
    /// device of a tensor exported without synchronization: the runtime's own handle for it,
    /// 0 for the runtime's default stream.
    ExchangeWorkStream(usize),
}

/// How a DLPack export orders the consumer's work (on the queue or stream it passed as
/// `stream`) after the memory's pending work: a backend's answer for exports to its devices.
#[derive(Debug)]
pub enum ConsumerOrder {
    /// Nothing to order: the consumer synchronizes itself (DLPack's `stream=-1`).
    Nothing,
    /// The consumer waits for an event recorded now on the queue that sees all the memory's
    /// pending work (the memory's own queue when none is pending): everything enqueued there so
    /// far, by devbuf or by the libraries that queue was handed to. The rule of runtimes whose
    /// queues are streams, where an event covers everything before it.
    AfterQueue(Arc<dyn ForeignQueue>),
    /// The consumer waits for the memory's pending work alone, and for nothing when none is
    /// pending.
    AfterPendingWork(Arc<dyn ForeignQueue>),
}

/// What an import records once its queue was ordered after the producer's stream
/// ([`crate::Interop::order_after_producer`]).
#[derive(Debug, Default)]
pub struct ProducerWork {
    /// An event of the importing queue that completes after the producer's work: recorded as
    /// pending work on the memory, so that host views, other queues and re-exports wait for it.
    pub ordered: Option<Event>,
    /// The producer's stream, made to wait for every command devbuf later enqueues on the memory
    /// without waiting for it (CAI v3's rule for a consumer that works on its own stream).
    pub hold_back: Option<Arc<dyn ForeignQueue>>,
}
