//! [`OpenClBackend`]: discovery, availability and opening queues.

use std::sync::Arc;

use devbuf_core::dlpark::ffi::{DLDevice, DLDeviceType};
use devbuf_core::{
    Availability, Backend, BackendDescriptor, DeviceInfo, DlpackDeviceType, Error, MemKind, Queue,
    Result,
};

use crate::device::OPENCL;
use crate::device::{DeviceEntry, devices};
use crate::queue::OpenClQueue;

/// The OpenCL backend's facts: Intel USM's three kinds (or SVM's two), exported as DLPack's OpenCL
/// device, for which devbuf does not allocate (no consumer of DLPack's C exchange table has an
/// OpenCL device); no array-interface protocol; no streams of its own (each device has the one
/// command queue devbuf opens). Last among the runtimes in the default order:
/// every OpenCL ICD (PoCL, a CPU runtime) is found without being asked for.
pub const DESCRIPTOR: BackendDescriptor = BackendDescriptor {
    name: OPENCL,
    kinds: &MemKind::ALLOCATABLE,
    dlpack_device_types: &[DlpackDeviceType::not_allocating(DLDeviceType::OPENCL)],
    protocols: &[],
    selector_words: &[],
    makes_streams: false,
    may_be_default: true,
    default_rank: 2,
};

/// The OpenCL backend: every device of every platform the ICD loader reports.
#[derive(Debug, Clone, Copy, Default)]
pub struct OpenClBackend;

impl OpenClBackend {
    fn entries(&self) -> Result<&'static [DeviceEntry]> {
        devices()
            .as_ref()
            .map(Vec::as_slice)
            .map_err(|reason| Error::Unavailable {
                backend: OPENCL,
                reason: reason.clone(),
            })
    }

    /// The queue devbuf uses when no device is named: on the first device, in loader order, that
    /// can allocate all three kinds, else the first that can allocate any.
    pub fn default_queue(&self) -> Result<Arc<OpenClQueue>> {
        let entries = self.entries()?;
        let best = entries
            .iter()
            .find(|entry| entry.info.kinds.len() == MemKind::ALLOCATABLE.len())
            .or_else(|| entries.iter().find(|entry| !entry.info.kinds.is_empty()));
        match best {
            Some(entry) => OpenClQueue::for_device(entry),
            None => Err(Error::DeviceNotFound {
                selector: OPENCL.into(),
                reason: no_usable_device_reason(entries),
            }),
        }
    }

    /// The queue on device `device` of platform `platform` (selector "opencl:P:D").
    pub fn queue(&self, platform: usize, device: usize) -> Result<Arc<OpenClQueue>> {
        let selector = format!("{OPENCL}:{platform}:{device}");
        let entry = self
            .entries()?
            .iter()
            .find(|entry| entry.info.selector == selector)
            .ok_or_else(|| Error::DeviceNotFound {
                selector,
                reason: "the OpenCL loader lists no such platform and device".into(),
            })?;
        OpenClQueue::for_device(entry)
    }

    /// The queue on the device at `index` in [`Backend::devices`] (DLPack's kDLOpenCL
    /// `device_id`).
    pub fn queue_at(&self, index: i32) -> Result<Arc<OpenClQueue>> {
        let entry = usize::try_from(index)
            .ok()
            .and_then(|i| self.entries().ok()?.get(i))
            .ok_or_else(|| Error::DeviceNotFound {
                selector: format!("DLPack device ({}, {index})", DLDeviceType::OPENCL.0),
                reason: "the OpenCL loader lists no device at that index".into(),
            })?;
        OpenClQueue::for_device(entry)
    }
}

/// Why no device is usable: each device with its reason.
fn no_usable_device_reason(entries: &[DeviceEntry]) -> String {
    let each: Vec<_> = entries
        .iter()
        .map(|entry| {
            format!(
                "{} ({}): {}",
                entry.info.selector,
                entry.info.name,
                entry.info.unusable_reason.as_deref().unwrap_or_default()
            )
        })
        .collect();
    format!("no OpenCL device has Intel USM or SVM: {}", each.join("; "))
}

/// "P:D" as platform and device indices.
fn parse_selector(spec: &str) -> Result<(usize, usize)> {
    spec.split_once(':')
        .and_then(|(platform, device)| Some((platform.parse().ok()?, device.parse().ok()?)))
        .ok_or_else(|| Error::DeviceNotFound {
            selector: format!("{OPENCL}:{spec}"),
            reason: "expected opencl:P:D (platform index, device index), e.g. opencl:0:0".into(),
        })
}

impl Backend for OpenClBackend {
    fn descriptor(&self) -> &'static BackendDescriptor {
        &DESCRIPTOR
    }

    fn availability(&self) -> Availability {
        match self.entries() {
            Err(err) => Availability::Unavailable(match err {
                Error::Unavailable { reason, .. } => reason,
                other => other.to_string(),
            }),
            Ok(entries) if entries.iter().any(|entry| !entry.info.kinds.is_empty()) => {
                Availability::Available
            }
            Ok(entries) => Availability::Unavailable(no_usable_device_reason(entries)),
        }
    }

    fn devices(&self) -> Result<Vec<DeviceInfo>> {
        Ok(self
            .entries()?
            .iter()
            .map(|entry| entry.info.clone())
            .collect())
    }

    fn open(&self, spec: &str) -> Result<Arc<dyn Queue>> {
        let queue = match spec {
            "" => self.default_queue()?,
            spec => {
                let (platform, device) = parse_selector(spec)?;
                self.queue(platform, device)?
            }
        };
        Ok(queue)
    }

    fn queue_for_dlpack_device(&self, device: DLDevice) -> Option<Result<Arc<dyn Queue>>> {
        (device.device_type == DLDeviceType::OPENCL).then(|| {
            self.queue_at(device.device_id)
                .map(|queue| queue as Arc<dyn Queue>)
        })
    }
}
