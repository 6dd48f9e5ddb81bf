//! The backends compiled in, and the questions asked of all of them: opening a selector, the
//! queue for a DLPack device, a protocol's context object or a bare pointer.

use std::sync::{Arc, OnceLock};

use devbuf_core::*;

/// Every backend compiled in, in the order the default device is looked for (the host backend,
/// always available, last).
pub fn backends() -> &'static [Box<dyn Backend>] {
    static BACKENDS: OnceLock<Vec<Box<dyn Backend>>> = OnceLock::new();
    #[allow(clippy::vec_init_then_push, reason = "each entry depends on a feature")]
    BACKENDS.get_or_init(|| {
        let mut backends: Vec<Box<dyn Backend>> = Vec::new();
        #[cfg(feature = "sycl")]
        backends.push(Box::new(devbuf_sycl::SyclBackend::new()));
        #[cfg(feature = "cuda")]
        backends.push(Box::new(devbuf_cuda::CudaBackend));
        #[cfg(feature = "opencl")]
        backends.push(Box::new(devbuf_opencl::OpenClBackend));
        backends.push(Box::new(HostBackend));
        backends
    })
}

/// The backend called `name`.
pub fn backend(name: &str) -> Result<&'static dyn Backend> {
    backends()
        .iter()
        .find(|backend| backend.name() == name)
        .map(|backend| backend.as_ref())
        .ok_or_else(|| Error::DeviceNotFound {
            selector: name.into(),
            reason: format!(
                "no backend named {name:?} (compiled in: {})",
                backends()
                    .iter()
                    .map(|b| b.name())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        })
}

/// A queue on the device a DLPack producer named.
pub fn queue_for_dlpack_device(device: dlpark::ffi::DLDevice) -> Result<Arc<dyn Queue>> {
    backends()
        .iter()
        .find_map(|backend| backend.queue_for_dlpack_device(device))
        .unwrap_or_else(|| {
            Err(Error::DeviceNotFound {
                selector: format!(
                    "DLPack device ({}, {})",
                    device.device_type.0, device.device_id
                ),
                reason: "no backend compiled into devbuf handles this DLPack device type".into(),
            })
        })
}

/// The backend whose memory `protocol` describes (the first compiled in that speaks it).
pub fn backend_for(protocol: Protocol) -> Option<&'static dyn Backend> {
    backends()
        .iter()
        .find(|backend| backend.speaks(protocol))
        .map(|backend| backend.as_ref())
}

/// Whether memory on `device` is described by `protocol`.
pub fn speaks(device: &DeviceInfo, protocol: Protocol) -> bool {
    backend(device.backend).is_ok_and(|backend| backend.speaks(protocol))
}

/// The queue a SUAI `syclobj` names for memory at `data`: asked of every backend.
///
/// # Safety
/// A [`ForeignObject::Handle`] is a live handle of the kind its name says, for the call.
pub unsafe fn queue_for_suai_context(
    syclobj: &ForeignObject<'_>,
    data: usize,
) -> Result<ResolvedQueue> {
    backends()
        .iter()
        // SAFETY: the caller's promise about handles.
        .find_map(|backend| unsafe { backend.queue_for_suai_context(syclobj, data) })
        .unwrap_or_else(|| {
            Err(Error::invalid(
                "syclobj",
                format!("{syclobj:?} names no queue of a backend compiled into devbuf"),
            ))
        })
}

/// The queue of another library's queue handle given as a device; `None` when no backend owns
/// the object.
///
/// # Safety
/// As for [`queue_for_suai_context`].
pub unsafe fn queue_for_device_object(
    object: &ForeignObject<'_>,
) -> Option<Result<Arc<dyn Queue>>> {
    backends()
        .iter()
        // SAFETY: the caller's promise about handles.
        .find_map(|backend| unsafe { backend.queue_for_device_object(object) })
}

/// The queue for memory at `ptr` that `protocol` hands over as a bare pointer (CAI's `data`).
pub fn queue_for_pointer(protocol: Protocol, ptr: usize) -> Result<Arc<dyn Queue>> {
    backends()
        .iter()
        .find_map(|backend| backend.queue_for_pointer(protocol, ptr))
        .unwrap_or_else(|| {
            Err(Error::invalid(
                "data",
                format!("{ptr:#x}: no backend compiled into devbuf speaks {protocol}"),
            ))
        })
}
