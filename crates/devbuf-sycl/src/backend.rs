//! [`SyclBackend`]: discovery, availability and opening queues, users' streams among them: a new
//! in-order queue on a device, in the device's default context, so that it reaches the memory of
//! devbuf's queue for the device and of dpctl's queues (dpctl's `SyclQueue(device,
//! property="in_order")` is the same thing). SYCL queues have no priorities and nothing like CUDA's
//! legacy default stream, so `StreamOptions`' `non_blocking` and `priority` change nothing here;
//! nor does `timing`: every queue devbuf makes keeps timestamps.

use std::ffi::OsStr;
use std::sync::Arc;

use devbuf_core::dlpark::ffi::{DLDevice, DLDeviceType};
use devbuf_core::{
    Availability, Backend, BackendDescriptor, DeviceInfo, DlpackDeviceType, Error, ForeignObject,
    MemKind, Protocol, Queue, ResolvedQueue, Result, StreamOptions, split_selector,
};

use crate::device::all_devices;
use crate::foreign;
use crate::loader::Runtime;
use crate::loader::SYCL;
use crate::queue::SyclQueue;
use crate::raw::{Context, Device};

/// The SYCL backend's facts: USM's three kinds, exported as DLPack's oneAPI device (devbuf
/// allocates device USM for it), described by SUAI. Second in the default order: where a SYCL
/// runtime is installed it is there for the purpose (its CPU device included), but an NVIDIA GPU,
/// where there is one, is the device users mean.
pub const DESCRIPTOR: BackendDescriptor = BackendDescriptor {
    name: SYCL,
    kinds: &MemKind::ALLOCATABLE,
    dlpack_device_types: &[DlpackDeviceType::allocating(
        DLDeviceType::ONEAPI,
        MemKind::Device,
    )],
    protocols: &[Protocol::Suai],
    // SYCL device types, and the Level Zero backend: dpctl's "opencl" and "cuda" are devbuf's
    // own backends' names, so those filter strings take the "sycl:" prefix.
    selector_words: &["gpu", "cpu", "accelerator", "level_zero"],
    makes_streams: true,
    may_be_default: true,
    default_rank: 1,
};

/// The SYCL backend: dpctl's SYCL C API, if it can be loaded.
#[derive(Debug, Clone)]
pub struct SyclBackend {
    runtime: Result<&'static Runtime, String>,
}

impl Default for SyclBackend {
    fn default() -> Self {
        Self::new()
    }
}

impl SyclBackend {
    /// The backend over the library [`Runtime::find`] finds (unavailable, with the reason, if
    /// none).
    pub fn new() -> Self {
        SyclBackend {
            runtime: Runtime::find(),
        }
    }

    /// The backend over the library at `path` only.
    pub fn with_library(path: impl AsRef<OsStr>) -> Self {
        SyclBackend {
            runtime: Runtime::load(path),
        }
    }

    /// The loaded runtime, or why there is none.
    pub fn runtime(&self) -> Result<&'static Runtime> {
        self.runtime.clone().map_err(|reason| Error::Unavailable {
            backend: SYCL,
            reason,
        })
    }

    /// The queue devbuf uses when no device is named: on the first device, in dpctl's order, that
    /// can allocate all three USM kinds, else the first that can allocate any. SYCL's default
    /// selector is not used: it may pick a device without USM (such as PoCL).
    pub fn default_queue(&self) -> Result<Arc<SyclQueue>> {
        let mut devices = all_devices(self.runtime()?);
        let kinds: Vec<_> = devices.iter().map(Device::usm_kinds).collect();
        let best = kinds
            .iter()
            .position(|kinds| kinds.len() == MemKind::ALLOCATABLE.len())
            .or_else(|| kinds.iter().position(|kinds| !kinds.is_empty()));
        match best {
            Some(i) => SyclQueue::default_for(devices.swap_remove(i)),
            None => Err(Error::DeviceNotFound {
                selector: SYCL.into(),
                reason: no_usm_device_reason(&devices),
            }),
        }
    }

    /// The queue for the device at dpctl's index `index` (DLPack's kDLOneAPI `device_id`).
    pub fn queue_for_dpctl_index(&self, index: i32) -> Result<Arc<SyclQueue>> {
        let device = usize::try_from(index)
            .ok()
            .and_then(|i| all_devices(self.runtime().ok()?).into_iter().nth(i));
        match device {
            Some(device) => SyclQueue::default_for(device),
            None => Err(Error::DeviceNotFound {
                selector: format!("{SYCL}:{index}"),
                reason: "dpctl lists no device at that index".into(),
            }),
        }
    }
}

/// Why no device is usable: each device with its reason, or that there are none.
fn no_usm_device_reason(devices: &[Device]) -> String {
    if devices.is_empty() {
        let mut reason = "the SYCL runtime lists no devices (is a device runtime, such as Intel's \
                          CPU OpenCL runtime, registered?)"
            .to_string();
        if let Some(selector) = std::env::var_os("ONEAPI_DEVICE_SELECTOR") {
            reason += &format!(
                "; ONEAPI_DEVICE_SELECTOR={} may hide them",
                selector.display()
            );
        }
        return reason;
    }
    let each: Vec<_> = devices
        .iter()
        .map(|device| {
            let info = device.info();
            format!(
                "{} ({}): {}",
                info.selector,
                info.name,
                info.unusable_reason.unwrap_or_default()
            )
        })
        .collect();
    format!("no SYCL device supports USM: {}", each.join("; "))
}

impl Backend for SyclBackend {
    fn descriptor(&self) -> &'static BackendDescriptor {
        &DESCRIPTOR
    }

    fn availability(&self) -> Availability {
        match self.runtime() {
            Err(Error::Unavailable { reason, .. }) => Availability::Unavailable(reason),
            Err(other) => Availability::Unavailable(other.to_string()),
            Ok(rt) => {
                let devices = all_devices(rt);
                if devices.iter().any(|device| !device.usm_kinds().is_empty()) {
                    Availability::Available
                } else {
                    Availability::Unavailable(no_usm_device_reason(&devices))
                }
            }
        }
    }

    fn devices(&self) -> Result<Vec<DeviceInfo>> {
        Ok(all_devices(self.runtime()?)
            .iter()
            .map(Device::info)
            .collect())
    }

    fn open(&self, spec: &str) -> Result<Arc<dyn Queue>> {
        let queue = match spec {
            "" => self.default_queue()?,
            filter => SyclQueue::open(self.runtime()?, filter)?,
        };
        Ok(queue)
    }

    /// A new in-order queue on the root device the dpctl filter string `spec` picks (for "", the
    /// device of devbuf's default SYCL queue), in the device's default context.
    fn open_stream(&self, spec: &str, _options: StreamOptions) -> Result<Arc<dyn Queue>> {
        let rt = self.runtime()?;
        let device = match spec {
            "" => {
                let default = self.default_queue()?;
                Device::from_filter(rt, split_selector(&default.device().selector).1)?
            }
            filter => Device::from_filter(rt, filter)?,
        };
        let context = Context::default_for(&device)?;
        let queue = SyclQueue::create(context, device)?;
        Ok(SyclQueue::register(Arc::new(queue)))
    }

    fn queue_for_dlpack_device(&self, device: DLDevice) -> Option<Result<Arc<dyn Queue>>> {
        (device.device_type == DLDeviceType::ONEAPI).then(|| {
            self.queue_for_dpctl_index(device.device_id)
                .map(|queue| queue as Arc<dyn Queue>)
        })
    }

    unsafe fn queue_for_suai_context(
        &self,
        syclobj: &ForeignObject<'_>,
        data: usize,
    ) -> Option<Result<ResolvedQueue>> {
        // SAFETY: the caller's promise about handles.
        Some(unsafe { foreign::queue_for_syclobj(self.runtime(), syclobj, data) })
    }

    unsafe fn queue_for_device_object(
        &self,
        object: &ForeignObject<'_>,
    ) -> Option<Result<Arc<dyn Queue>>> {
        // SAFETY: the caller's promise about handles.
        unsafe { foreign::queue_for_device_object(self.runtime(), object) }
    }
}
