//! The questions the exchange protocols ask a backend, in terms that name no runtime: which
//! queue an object another library handed over means, and how a protocol's stream value orders
//! work. The Python layer reduces its objects to [`ForeignObject`]s and asks the registry
//! (`devbuf::queue_for_suai_context` and friends); each backend answers for its own runtime
//! through [`crate::Backend`] and [`crate::Queue`] methods whose defaults say "not mine".

use std::ffi::CStr;
use std::fmt;
use std::sync::Arc;

use crate::{ForeignQueue, Queue};

/// The exchange protocols that belong to one backend's runtime.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Protocol {
    /// `__sycl_usm_array_interface__` and the dpctl attributes around it.
    Suai,
    /// `__cuda_array_interface__` and the CUDA stream protocol (`__cuda_stream__`).
    Cai,
}

/// An object another library hands over with memory or a request (SUAI's `syclobj`, DLPack's
/// `stream` argument, a `device=` argument), reduced by the embedding layer to what a backend can
/// read. Borrowed for one call: the object behind a [`ForeignObject::Handle`] outlives it.
#[derive(Clone)]
pub enum ForeignObject<'a> {
    /// No object (Python's `None`).
    Nothing,
    /// An integer, such as a stream handle.
    Int(i64),
    /// A string, such as a dpctl filter selector.
    Text(&'a str),
    /// One of devbuf's own queues.
    Queue(&'a Arc<dyn Queue>),
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
            ForeignObject::Queue(queue) => write!(f, "<devbuf.Queue on {}>", queue.device()),
            ForeignObject::Handle { name, ptr } => write!(f, "<capsule {name:?} at {ptr:#x}>"),
            ForeignObject::NotACapsule => write!(f, "<object whose _get_capsule() is no capsule>"),
            ForeignObject::Other(repr) => write!(f, "{repr}"),
        }
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
