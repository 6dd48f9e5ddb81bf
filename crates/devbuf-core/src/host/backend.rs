//! [`HostBackend`]: one device, always available, and the one queue everything host uses.

use std::sync::Arc;

use dlpark::ffi::{DLDevice, DLDeviceType};

use super::HOST;
use super::queue::HostQueue;
use crate::{
    Availability, Backend, BackendDescriptor, Claim, DeviceInfo, DlpackDeviceType, Error, MemKind,
    Queue, Result,
};

/// The host backend.
#[derive(Debug, Default, Clone, Copy)]
pub struct HostBackend;

/// The host backend's facts: every kind is host memory, exported as DLPack's CPU device; no
/// array-interface protocol (NumPy's buffer protocol and DLPack describe it); last in the
/// default order, since it is always there.
pub const DESCRIPTOR: BackendDescriptor = BackendDescriptor {
    name: HOST,
    kinds: &MemKind::ALLOCATABLE,
    dlpack_device_types: &[DlpackDeviceType::allocating(
        DLDeviceType::CPU,
        MemKind::Host,
    )],
    protocols: &[],
    selector_words: &[],
    makes_streams: true,
    may_be_default: true,
    default_rank: u8::MAX,
};

impl Backend for HostBackend {
    fn descriptor(&self) -> &'static BackendDescriptor {
        &DESCRIPTOR
    }

    fn availability(&self) -> Availability {
        Availability::Available
    }

    fn devices(&self) -> Result<Vec<DeviceInfo>> {
        Ok(vec![HostQueue::shared().device().clone()])
    }

    fn open(&self, spec: &str) -> Result<Arc<dyn Queue>> {
        match spec {
            "" | "0" => Ok(HostQueue::shared()),
            other => Err(Error::DeviceNotFound {
                selector: format!("{HOST}:{other}"),
                reason: "the host backend has one device, \"host\"".into(),
            }),
        }
    }

    /// The host runs every command on the calling thread before it returns, so any stream of
    /// its work is already in order with every other: its one queue serves as each.
    fn open_stream(&self, spec: &str, _options: crate::StreamOptions) -> Result<Arc<dyn Queue>> {
        self.open(spec)
    }

    fn queue_for_dlpack_device(&self, device: DLDevice) -> Option<Result<Arc<dyn Queue>>> {
        (device.device_type == DLDeviceType::CPU).then(|| Ok(HostQueue::shared()))
    }

    /// Its own allocations; other host memory may be anyone's, which nothing can tell.
    fn claim_dlpack_pointer(&self, device: DLDevice, ptr: usize) -> Claim<Arc<dyn Queue>> {
        let queue = HostQueue::shared();
        if device.device_type == DLDeviceType::CPU
            && queue.kind_of(ptr as *const u8) != MemKind::Unknown
        {
            return Claim::Recognised(Ok(queue));
        }
        Claim::Unrecognised(Error::invalid(
            "data",
            format!("{ptr:#x} is no allocation of the host backend"),
        ))
    }
}
