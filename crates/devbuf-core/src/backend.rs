//! [`Backend`]: a family of devices behind one runtime (discovery, availability, opening queues)
//! and the registry's questions about other libraries' objects and memory, each answered by the
//! backend whose runtime they belong to.

use std::sync::Arc;

use dlpark::ffi::DLDevice;

use crate::descriptor::BackendDescriptor;
use crate::exchange::{Protocol, ResolvedQueue};
use crate::interop::ForeignObject;
use crate::{DeviceInfo, Error, HandleSource, Queue, Result, StreamOptions, StreamOwner};

/// Whether a backend's runtime can be used in this process, and if not, why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Availability {
    /// The runtime loaded and has at least one usable device.
    Available,
    /// The runtime is missing or unusable; the reason says what was tried.
    Unavailable(String),
}

/// What a backend says of memory another library hands over as a bare pointer.
#[derive(Debug)]
pub enum Claim<T> {
    /// The backend's runtime recognises the memory: the answer for it, or why the memory cannot
    /// be used (it belongs to a context devbuf's queues do not work in, say).
    Recognised(Result<T>),
    /// The backend's runtime does not know the memory (or cannot be asked): why, for the error an
    /// import raises when no backend recognises it.
    Unrecognised(Error),
}

/// A family of devices behind one runtime: discovery, availability and opening queues.
pub trait Backend: Send + Sync {
    /// The facts about this backend that code outside it reads, stated once (a `const` of the
    /// backend's crate).
    fn descriptor(&self) -> &'static BackendDescriptor;

    /// The backend's name, also the first part of its selectors ("host", "sycl", "cuda", "opencl").
    fn name(&self) -> &'static str {
        self.descriptor().name
    }

    /// Whether the runtime is usable, with the reason when it is not. Never panics.
    fn availability(&self) -> Availability;

    /// All devices the runtime reports, usable or not (see [`DeviceInfo::unusable_reason`]).
    fn devices(&self) -> Result<Vec<DeviceInfo>>;

    /// Opens a queue. `spec` is the selector after "`name`:", or empty for the backend's default.
    fn open(&self, spec: &str) -> Result<Arc<dyn Queue>>;

    /// A new queue with a stream of its own on the device `spec` names (as in [`Backend::open`]),
    /// sharing the device's context with the queue `open` returns (so that each reaches the
    /// other's memory): what a user's `Stream` is. Where the backend cannot make one, an
    /// [`crate::Error::Unsupported`] says why.
    fn open_stream(&self, spec: &str, _options: StreamOptions) -> Result<Arc<dyn Queue>> {
        Err(crate::Error::Unsupported {
            device: format!("{}:{spec}", self.name()),
            what: "a new stream".into(),
            reason: format!("the {} backend cannot make streams", self.name()),
        })
    }

    /// A queue that enqueues its work on another library's stream, `handle` as the exchange
    /// protocols number it (a `CUstream`, `__cuda_stream__`'s second item) where `source` says
    /// it came from, on the device `spec` names (`None`: the device the stream belongs to);
    /// `owner` keeps the stream alive while the queue or any memory it allocated lives. `None`
    /// where the backend has no such handles.
    ///
    /// # Safety
    /// `handle` names a live stream for as long as `owner` is alive.
    unsafe fn adopt_stream(
        &self,
        _spec: Option<&str>,
        _handle: usize,
        _source: HandleSource,
        _owner: StreamOwner,
    ) -> Option<Result<Arc<dyn Queue>>> {
        None
    }

    /// A queue on the device a DLPack producer named, if `device` belongs to this backend.
    fn queue_for_dlpack_device(&self, device: DLDevice) -> Option<Result<Arc<dyn Queue>>>;

    /// Whether memory of this backend's queues is described by `protocol` (its descriptor says).
    fn speaks(&self, protocol: Protocol) -> bool {
        self.descriptor().speaks(protocol)
    }

    /// The queue a SUAI `syclobj` names for memory at `data`, if the object is this backend's.
    ///
    /// # Safety
    /// A [`ForeignObject::Handle`] is a live handle of the kind its name says, for the call.
    unsafe fn queue_for_suai_context(
        &self,
        _syclobj: &ForeignObject<'_>,
        _data: usize,
    ) -> Option<Result<ResolvedQueue>> {
        None
    }

    /// The queue for memory at `ptr` that a DLPack producer hands over on `device`, a device type
    /// this backend shares with another, when this backend's runtime recognises the pointer as its
    /// own: the memory then decides which backend imports it, not the default order
    /// (`devbuf::queue_for_dlpack_memory`), as for CAI's pointers ([`Backend::claim_pointer`]).
    /// Unrecognised by default.
    fn claim_dlpack_pointer(&self, device: DLDevice, ptr: usize) -> Claim<Arc<dyn Queue>> {
        Claim::Unrecognised(Error::invalid(
            "data",
            format!(
                "{ptr:#x} on DLPack device ({}, {}): the {} backend does not recognise it",
                device.device_type.0,
                device.device_id,
                self.name()
            ),
        ))
    }

    /// The queue of another library's queue handle given as a device, if it is this backend's.
    ///
    /// # Safety
    /// As for [`Backend::queue_for_suai_context`].
    unsafe fn queue_for_device_object(
        &self,
        _object: &ForeignObject<'_>,
    ) -> Option<Result<Arc<dyn Queue>>> {
        None
    }

    /// The queue for memory at `ptr` that `protocol` hands over as a bare pointer (CAI's `data`)
    /// when this backend's runtime recognises the pointer. Asked of every backend that speaks
    /// `protocol`, so that the memory, not the order backends are compiled in, decides which
    /// backend answers.
    fn claim_pointer(&self, protocol: Protocol, ptr: usize) -> Claim<Arc<dyn Queue>> {
        Claim::Unrecognised(Error::invalid(
            "data",
            format!(
                "{ptr:#x}: the {} backend takes no {protocol} pointers",
                self.name()
            ),
        ))
    }
}

/// Splits a device selector such as "sycl:opencl:cpu:0", "cuda:1" or "host" into the backend name
/// and the backend-specific rest, at the first colon. (`devbuf::split_selector` also knows the
/// words of other libraries' device strings that a backend's descriptor claims, such as dpctl's
/// "gpu".)
pub fn split_selector(selector: &str) -> (&str, &str) {
    match selector.split_once(':') {
        Some((backend, rest)) => (backend, rest),
        None => (selector, ""),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selectors_split_at_the_first_colon() {
        assert_eq!(split_selector("host"), ("host", ""));
        assert_eq!(
            split_selector("sycl:opencl:cpu:0"),
            ("sycl", "opencl:cpu:0")
        );
        assert_eq!(split_selector("cuda:1"), ("cuda", "1"));
    }
}
