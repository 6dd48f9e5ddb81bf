//! [`HostBackend`]: one device, always available, and the one queue everything host uses.

use std::sync::Arc;

use dlpark::ffi::{DLDevice, DLDeviceType};

use super::HOST;
use super::queue::HostQueue;
use crate::{Availability, Backend, DeviceInfo, Error, Queue, Result};

/// The host backend.
#[derive(Debug, Default, Clone, Copy)]
pub struct HostBackend;

impl Backend for HostBackend {
    fn name(&self) -> &'static str {
        HOST
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
}
