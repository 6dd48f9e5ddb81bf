//! Discovery, availability and opening queues, and the descriptor: the facts the rest of devbuf
//! reads about this backend.

use std::sync::{Arc, OnceLock};

use devbuf_core::dlpark::ffi::{DLDevice, DLDeviceType};
use devbuf_core::{
    Availability, Backend, BackendDescriptor, Claim, DeviceInfo, DlpackDeviceType, Error, MemKind,
    Queue, Result,
};

use crate::device::SKELETON;
use crate::queue::SkeletonQueue;

/// The backend's facts. Its memory is host memory, exported as DLPack's CPU device (where devbuf
/// allocates through the host backend: it does not allocate for kDLCPU itself); no array-interface
/// protocol; never the default device (the host is, where no GPU is); ranked before the host, as
/// every backend but the host is.
pub const DESCRIPTOR: BackendDescriptor = BackendDescriptor {
    name: SKELETON,
    kinds: &MemKind::ALLOCATABLE,
    dlpack_device_types: &[DlpackDeviceType::not_allocating(DLDeviceType::CPU)],
    protocols: &[],
    selector_words: &[],
    makes_streams: false,
    may_be_default: false,
    default_rank: 200,
};

/// The skeleton backend: one device, always available.
#[derive(Debug, Default, Clone, Copy)]
pub struct SkeletonBackend;

impl SkeletonBackend {
    /// The one queue of the one device.
    fn queue() -> &'static Arc<SkeletonQueue> {
        static QUEUE: OnceLock<Arc<SkeletonQueue>> = OnceLock::new();
        QUEUE.get_or_init(|| Arc::new(SkeletonQueue::new()))
    }
}

impl Backend for SkeletonBackend {
    fn descriptor(&self) -> &'static BackendDescriptor {
        &DESCRIPTOR
    }

    fn availability(&self) -> Availability {
        Availability::Available
    }

    fn devices(&self) -> Result<Vec<DeviceInfo>> {
        Ok(vec![Self::queue().device().clone()])
    }

    fn open(&self, spec: &str) -> Result<Arc<dyn Queue>> {
        match spec {
            "" | "0" => Ok(Self::queue().clone()),
            other => Err(Error::DeviceNotFound {
                selector: format!("{SKELETON}:{other}"),
                reason: "the skeleton backend has one device, 0".into(),
            }),
        }
    }

    /// kDLCPU memory is the host backend's to import: this backend takes back only its own
    /// allocations, by the pointer ([`Backend::claim_dlpack_pointer`]).
    fn queue_for_dlpack_device(&self, _device: DLDevice) -> Option<Result<Arc<dyn Queue>>> {
        None
    }

    fn claim_dlpack_pointer(&self, device: DLDevice, ptr: usize) -> Claim<Arc<dyn Queue>> {
        let queue = Self::queue();
        if device.device_type == DLDeviceType::CPU
            && queue.kind_of(ptr as *const u8) != MemKind::Unknown
        {
            return Claim::Recognised(Ok(queue.clone()));
        }
        Claim::Unrecognised(Error::invalid(
            "data",
            format!("{ptr:#x} is no allocation of the skeleton backend"),
        ))
    }
}
