//! The backends compiled in, and the questions asked of all of them: opening a selector, the
//! queue for a DLPack device, a protocol's context object or a bare pointer. Each backend states
//! its facts once, in its [`BackendDescriptor`]; everything here that orders, filters or tables
//! backends reads them from there.

use std::sync::{Arc, OnceLock};

use devbuf_core::dlpark::ffi::DLDeviceType;
use devbuf_core::*;

/// Every backend compiled in, in the default order ([`BackendDescriptor::default_rank`], then
/// name): the order the default device is looked for ([`crate::default_device`]), the host
/// backend, always available, last.
pub fn backends() -> &'static [Box<dyn Backend>] {
    static BACKENDS: OnceLock<Vec<Box<dyn Backend>>> = OnceLock::new();
    BACKENDS.get_or_init(|| {
        // The one place that names each backend crate: a Cargo feature decides whether it is
        // linked at all, so its constructor can only be named under that feature. What a backend
        // is and where it ranks is its descriptor's to say.
        let mut backends: Vec<Box<dyn Backend>> = vec![Box::new(HostBackend)];
        #[cfg(feature = "sycl")]
        backends.push(Box::new(devbuf_sycl::SyclBackend::new()));
        #[cfg(feature = "cuda")]
        backends.push(Box::new(devbuf_cuda::CudaBackend));
        #[cfg(feature = "opencl")]
        backends.push(Box::new(devbuf_opencl::OpenClBackend));
        in_default_order(&mut backends);
        backends
    })
}

/// Sorts `backends` into the default order: by rank, ties by name, never by the order they were
/// compiled in.
fn in_default_order(backends: &mut [Box<dyn Backend>]) {
    backends.sort_by_key(|backend| {
        let descriptor = backend.descriptor();
        (descriptor.default_rank, descriptor.name)
    });
}

/// The names of the backends compiled in, in the default order.
pub fn default_order() -> Vec<&'static str> {
    backends().iter().map(|backend| backend.name()).collect()
}

/// Splits a device selector into the backend name and the backend-specific rest: at the first
/// colon ("sycl:opencl:cpu:0", "cuda:1", "host"), except that a selector whose first word a
/// backend's descriptor claims ([`BackendDescriptor::selector_words`]: dpctl's "gpu",
/// "level_zero:gpu:0") is that backend's as it stands.
pub fn split_selector(selector: &str) -> (&str, &str) {
    let first = selector.split(':').next().unwrap_or_default();
    let claimed = backends()
        .iter()
        .find(|backend| backend.descriptor().selector_words.contains(&first));
    match claimed {
        Some(backend) => (backend.name(), selector),
        None => devbuf_core::split_selector(selector),
    }
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

/// A queue on the device a DLPack producer named: from the first backend, in the default order,
/// whose descriptor lists the device type and that opens a queue for it; else the first one's
/// error. (A DLPack consumer names its stream before it sees the memory, so no pointer can decide
/// between backends that share a device type: the import's extent check then asks the chosen
/// backend's runtime about the pointer.)
pub fn queue_for_dlpack_device(device: dlpark::ffi::DLDevice) -> Result<Arc<dyn Queue>> {
    queue_for_dlpack_device_among(backends().iter().map(|backend| backend.as_ref()), device)
}

/// [`queue_for_dlpack_device`] among `backends`, in their order.
fn queue_for_dlpack_device_among<'a>(
    backends: impl Iterator<Item = &'a dyn Backend>,
    device: dlpark::ffi::DLDevice,
) -> Result<Arc<dyn Queue>> {
    let mut first_error = None;
    let listing = backends.filter(|backend| {
        backend
            .descriptor()
            .has_dlpack_device_type(device.device_type)
    });
    for backend in listing {
        match backend.queue_for_dlpack_device(device) {
            Some(Ok(queue)) => return Ok(queue),
            Some(Err(err)) => {
                first_error.get_or_insert(err);
            }
            None => {}
        }
    }
    Err(first_error.unwrap_or_else(|| Error::DeviceNotFound {
        selector: format!(
            "DLPack device ({}, {})",
            device.device_type.0, device.device_id
        ),
        reason: "no backend compiled into devbuf handles this DLPack device type".into(),
    }))
}

/// The queue DLPack memory at `ptr` on `device` belongs to when several backends list the device
/// type: the answer of the one whose runtime recognises the pointer
/// ([`Backend::claim_dlpack_pointer`]), as CAI's pointers are routed. `None` where one backend
/// alone lists the type, or none recognises the memory: the queue chosen for the device
/// ([`queue_for_dlpack_device`]) then keeps it.
pub fn queue_for_dlpack_memory(
    device: dlpark::ffi::DLDevice,
    ptr: usize,
) -> Option<Result<Arc<dyn Queue>>> {
    queue_for_dlpack_memory_among(
        backends().iter().map(|backend| backend.as_ref()),
        device,
        ptr,
    )
}

/// [`queue_for_dlpack_memory`] among `backends`.
fn queue_for_dlpack_memory_among<'a>(
    backends: impl Iterator<Item = &'a dyn Backend> + Clone,
    device: dlpark::ffi::DLDevice,
    ptr: usize,
) -> Option<Result<Arc<dyn Queue>>> {
    let mut listing = backends.filter(move |backend| {
        backend
            .descriptor()
            .has_dlpack_device_type(device.device_type)
    });
    // Most device types are one backend's: nothing to ask (imports are hot paths).
    listing.clone().nth(1)?;
    listing.find_map(|backend| match backend.claim_dlpack_pointer(device, ptr) {
        Claim::Recognised(answer) => Some(answer),
        Claim::Unrecognised(_) => None,
    })
}

/// The first backend, in the default order, whose memory `protocol` describes: the one that
/// answers where no memory decides (an empty array's, a bare stream handle's).
pub fn backend_for(protocol: Protocol) -> Option<&'static dyn Backend> {
    speakers(protocol).next()
}

/// Every backend whose memory `protocol` describes, in the default order.
pub fn speakers(protocol: Protocol) -> impl Iterator<Item = &'static dyn Backend> {
    backends()
        .iter()
        .map(|backend| backend.as_ref())
        .filter(move |backend| backend.speaks(protocol))
}

/// The kind of memory devbuf allocates for a consumer that asks for memory of `device_type`
/// (DLPack's C exchange table allocator), as the backends whose descriptors allocate for the
/// device type say (one that lists it as `not_allocating` has no say); `None` where none
/// allocates for it.
pub fn dlpack_kind_for(device_type: DLDeviceType) -> Option<MemKind> {
    dlpack_kind_among(
        backends().iter().map(|backend| backend.as_ref()),
        device_type,
    )
}

/// [`dlpack_kind_for`] among `backends`.
fn dlpack_kind_among<'a>(
    mut backends: impl Iterator<Item = &'a dyn Backend>,
    device_type: DLDeviceType,
) -> Option<MemKind> {
    backends.find_map(|backend| backend.descriptor().allocates_for(device_type))
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

/// The queue for memory at `ptr` that `protocol` hands over as a bare pointer (CAI's `data`):
/// the answer of the backend whose runtime recognises the pointer, among those that speak
/// `protocol`.
pub fn queue_for_pointer(protocol: Protocol, ptr: usize) -> Result<Arc<dyn Queue>> {
    claim_pointer(speakers(protocol), protocol, ptr)
}

/// The answer of the first of `speakers` that recognises memory at `ptr`, else an error with
/// each one's reason (one speaker's own error where there is one).
fn claim_pointer<'a>(
    speakers: impl Iterator<Item = &'a dyn Backend>,
    protocol: Protocol,
    ptr: usize,
) -> Result<Arc<dyn Queue>> {
    let mut unrecognised = Vec::new();
    for backend in speakers {
        match backend.claim_pointer(protocol, ptr) {
            Claim::Recognised(answer) => return answer,
            Claim::Unrecognised(why) => unrecognised.push((backend.name(), why)),
        }
    }
    if unrecognised.len() == 1 {
        return Err(unrecognised.remove(0).1);
    }
    let reason = match unrecognised.is_empty() {
        true => "no backend compiled into devbuf speaks it".to_string(),
        false => {
            let each: Vec<_> = unrecognised
                .iter()
                .map(|(name, why)| format!("{name}: {why}"))
                .collect();
            format!(
                "no backend that speaks it recognises it ({})",
                each.join("; ")
            )
        }
    };
    Err(Error::invalid(
        "data",
        format!("{ptr:#x} ({protocol}): {reason}"),
    ))
}

#[cfg(test)]
mod tests;
