#![doc = include_str!("../README.md")]

// The project README's Rust examples run as doctests too (it is not part of the packaged crate).
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
struct ProjectReadmeExamples;

mod default_device;
pub mod matrix;

pub use default_device::{DEFAULT_ORDER, DEVICE_VARIABLE, DefaultDevice, default_device};

use std::sync::{Arc, OnceLock};

pub use devbuf_core::*;
#[cfg(feature = "cuda")]
pub use devbuf_cuda as cuda;
#[cfg(feature = "opencl")]
pub use devbuf_opencl as opencl;
#[cfg(feature = "sycl")]
pub use devbuf_sycl as sycl;

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

/// Opens a queue from a selector: `"host"`, `"sycl"`, `"sycl:<dpctl filter string>"`, `"cuda"`,
/// `"cuda:N"`, `"opencl"`, `"opencl:P:D"` (platform and device index), or `""` for the default
/// device (see [`default_queue`]).
///
/// ```
/// use devbuf::{Buffer, MemKind};
///
/// let queue = devbuf::open("host")?;
/// let buffer = Buffer::alloc(&queue, MemKind::Device, 64)?;
/// buffer.fill(7)?;
/// assert_eq!(buffer.to_vec()?, vec![7; 64]);
///
/// // A selector whose backend is missing is an error that says why, never a crash.
/// assert!(devbuf::open("cuda:99").is_err());
/// # Ok::<(), devbuf::Error>(())
/// ```
pub fn open(selector: &str) -> Result<Arc<dyn Queue>> {
    if selector.is_empty() {
        return default_queue();
    }
    let (name, spec) = split_selector(selector);
    let backend = backend(name)?;
    if let Availability::Unavailable(reason) = backend.availability() {
        return Err(Error::Unavailable {
            backend: backend.name(),
            reason,
        });
    }
    backend.open(spec)
}

/// A new queue with its own stream on the device `selector` names (`""`: the default device), in
/// the context of that device's [`open`] queue: see [`Backend::open_stream`].
///
/// ```
/// let stream = devbuf::open_stream("host", devbuf::StreamOptions::default())?;
/// assert_eq!(stream.device().selector, "host");
/// # Ok::<(), devbuf::Error>(())
/// ```
pub fn open_stream(selector: &str, options: StreamOptions) -> Result<Arc<dyn Queue>> {
    let selector = match selector {
        "" => default_queue()?.device().selector.clone(),
        selector => selector.to_owned(),
    };
    let (name, spec) = split_selector(&selector);
    let backend = backend(name)?;
    if let Availability::Unavailable(reason) = backend.availability() {
        return Err(Error::Unavailable {
            backend: backend.name(),
            reason,
        });
    }
    backend.open_stream(spec, options)
}

/// A queue on another library's stream, `handle` as `protocol`'s streams are numbered (a
/// `CUstream` for [`Protocol::Cai`]), on the device `selector` names or, for `None`, the device
/// the stream belongs to: see [`Backend::adopt_stream`].
///
/// # Safety
/// `handle` names a live stream for as long as `owner` is alive.
pub unsafe fn adopt_stream(
    protocol: Protocol,
    selector: Option<&str>,
    handle: usize,
    owner: StreamOwner,
) -> Result<Arc<dyn Queue>> {
    let unsupported = || Error::Unsupported {
        device: selector.unwrap_or("").to_owned(),
        what: "adopting a stream".into(),
        reason: format!("no backend compiled in takes {protocol:?} streams"),
    };
    let backend = backend_for(protocol).ok_or_else(unsupported)?;
    let spec = selector.map(|selector| split_selector(selector).1);
    // SAFETY: the caller's promise.
    unsafe { backend.adopt_stream(spec, handle, owner) }.ok_or_else(unsupported)?
}

/// The default device's queue: the device `DEVBUF_DEVICE` names if set, else the first backend of
/// [`DEFAULT_ORDER`] whose default device allocates every kind of memory (see [`default_device`],
/// which also says why).
///
/// ```
/// use devbuf::MemKind;
///
/// let queue = devbuf::default_queue()?;
/// // Whatever backend it is, the default device allocates every kind.
/// assert!(MemKind::ALLOCATABLE.iter().all(|&kind| queue.supports(kind)));
/// # Ok::<(), devbuf::Error>(())
/// ```
pub fn default_queue() -> Result<Arc<dyn Queue>> {
    default_device().map(|chosen| chosen.queue)
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

/// Opens an IPC handle another process exported ([`ipc::export`]): a view of the same memory on
/// the device the handle names, zero-copy. The exporter owns the memory (see [`ipc`]).
pub fn open_ipc(handle: &IpcHandle) -> Result<Buffer> {
    ipc::open(&open(&handle.device)?, handle)
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
                format!("{ptr:#x}: no backend compiled into devbuf speaks {protocol:?}"),
            ))
        })
}
