//! Choosing a device: the one a selector names ([`open`], [`open_ipc`]), or the one devbuf uses
//! when none is named ([`default_device`]), and why.
//!
//! The policy, in order:
//! 1. `DEVBUF_DEVICE`, when set and not empty: the device that selector names (an error if it
//!    cannot be opened — a wrong setting is never silently replaced by another device).
//! 2. Otherwise the first backend of the default order ([`default_order`]: by each backend's
//!    [`devbuf_core::BackendDescriptor::default_rank`]) whose default device allocates all three
//!    kinds of memory (host, device and shared): CUDA's device 0, then SYCL's and OpenCL's first
//!    such device. A device that lacks a kind (an OpenCL device with SVM only, a CUDA device
//!    without managed memory) is skipped, so the default never fails a basic allocation; so is a
//!    device whose runtime is a test double (the CUDA test driver), which only a named selector
//!    opens, so that nothing run on the default device ever reads as a hardware result.
//!    A backend whose descriptor says it may not be the default device
//!    ([`devbuf_core::BackendDescriptor::may_be_default`]) is skipped wherever it ranks.
//! 3. The host backend, which always allocates every kind.
//!
//! Each backend's descriptor says why it ranks where it does.

use std::sync::Arc;

use devbuf_core::{Availability, Backend, Buffer, Error, IpcHandle, MemKind, Queue, Result, ipc};

use crate::registry::{backend, default_order, split_selector};

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

/// The environment variable that names the default device (a selector such as "host" or
/// "sycl:opencl:cpu:0").
pub const DEVICE_VARIABLE: &str = "DEVBUF_DEVICE";

/// The default device's queue, and why devbuf chose it.
#[derive(Clone)]
pub struct DefaultDevice {
    /// The queue on the default device.
    pub queue: Arc<dyn Queue>,
    /// Why this device: the rule that chose it and each backend skipped before it, with the reason.
    pub reason: String,
}

impl std::fmt::Debug for DefaultDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DefaultDevice")
            .field("device", &self.queue.device().selector)
            .field("reason", &self.reason)
            .finish()
    }
}

/// Chooses the default device by the policy of this module.
pub fn default_device() -> Result<DefaultDevice> {
    if let Ok(selector) = std::env::var(DEVICE_VARIABLE)
        && !selector.is_empty()
    {
        let queue = open(&selector).map_err(|err| Error::DeviceNotFound {
            selector: selector.clone(),
            reason: format!("{DEVICE_VARIABLE}={selector:?} names no usable device: {err}"),
        })?;
        return Ok(DefaultDevice {
            queue,
            reason: format!("{DEVICE_VARIABLE}={selector:?}"),
        });
    }
    let mut skipped = Vec::new();
    let order = default_order();
    for &name in &order {
        match backend(name)
            .map_err(|err| err.to_string())
            .and_then(backend_default)
        {
            Ok(queue) => {
                let rule = format!(
                    "the first backend of {} whose default device allocates host, device and shared memory",
                    order.join(", ")
                );
                let reason = if skipped.is_empty() {
                    rule
                } else {
                    format!("{rule}; skipped {}", skipped.join("; "))
                };
                return Ok(DefaultDevice { queue, reason });
            }
            Err(why) => skipped.push(format!("{name} ({why})")),
        }
    }
    Err(Error::DeviceNotFound {
        selector: String::new(),
        reason: skipped.join("; "),
    })
}

/// The default device of `backend` when its descriptor lets it be the default device and it
/// allocates every kind, else why not.
pub(crate) fn backend_default(
    backend: &dyn Backend,
) -> std::result::Result<Arc<dyn Queue>, String> {
    if !backend.descriptor().may_be_default {
        return Err("its descriptor says it is never the default device".into());
    }
    if let Availability::Unavailable(reason) = backend.availability() {
        return Err(format!("unavailable: {reason}"));
    }
    let queue = backend.open("").map_err(|err| err.to_string())?;
    let device = queue.device();
    if let Some(double) = &device.test_double {
        return Err(format!(
            "{} is not hardware ({double}): name it with {DEVICE_VARIABLE} to use it",
            device.selector
        ));
    }
    let missing: Vec<_> = MemKind::ALLOCATABLE
        .into_iter()
        .filter(|&kind| !device.supports(kind))
        .map(MemKind::as_str)
        .collect();
    if missing.is_empty() {
        Ok(queue)
    } else {
        Err(format!(
            "{} allocates no {} memory",
            device.selector,
            missing.join(" or ")
        ))
    }
}

/// The default device's queue: the device `DEVBUF_DEVICE` names if set, else the first backend of
/// the default order ([`default_order`]) whose default device allocates every kind of memory (see [`default_device`],
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

/// Opens an IPC handle another process exported ([`ipc::export`]): a view of the same memory on
/// the device the handle names, zero-copy. The exporter owns the memory (see [`ipc`]).
pub fn open_ipc(handle: &IpcHandle) -> Result<Buffer> {
    ipc::open(&open(&handle.device)?, handle)
}
