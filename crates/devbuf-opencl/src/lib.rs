//! devbuf's OpenCL backend: allocation, copies, fills, events and pointer classification on every
//! OpenCL device the ICD loader reports, through opencl3 (whose cl3 layer loads
//! `libOpenCL.so.1` at run time: devbuf builds and runs where OpenCL is absent).
//!
//! - [`OpenClBackend`]: availability, devices (selector `opencl:P:D`, platform and device
//!   index), default queue.
//! - [`OpenClQueue`]: one in-order command queue per device, in a context of its own; implements
//!   [`devbuf_core::Queue`].
//!
//! # Memory
//! - A device that lists `cl_intel_unified_shared_memory` gets Intel USM: each kind for which the
//!   device reports USM capabilities (host, device, shared). opencl3's USM wrappers are broken
//!   (they look the functions up in the loader, which does not export them, and the allocation
//!   wrappers drop the pointer), so the functions are fetched per platform with
//!   `clGetExtensionFunctionAddressForPlatform` (module `usm`).
//! - Else SVM: coarse-grained SVM buffers are `device` memory (the host must map them before
//!   touching them, so devbuf only reaches them through queue copies and fills), fine-grained
//!   SVM buffers are `shared` (host and device access them coherently). There is no `host` kind:
//!   SVM has no host-resident allocation distinct from fine-grained buffers.
//! - Else the device is listed unusable, with the reason.
//!
//! # DLPack
//! kDLOpenCL (4), `device_id` = the device's position in [`Backend::devices`](devbuf_core::Backend::devices) (platforms in
//! loader order, each platform's devices in order): [`devbuf_core::DeviceInfo::index`].
//! No handle is exported: OpenCL has no cross-library protocol for queues.

// Caller numbers become addresses here: every size, count, offset and alignment is checked
// (docs/architecture.md, "Untrusted numbers").
#![deny(clippy::arithmetic_side_effects)]

mod backend;
mod device;
mod event;
mod interop;
mod ipc;
mod memory;
mod queue;
mod usm_entry_points;

use std::sync::Arc;

use devbuf_core::Queue;

pub use backend::{DESCRIPTOR, OpenClBackend};
pub use device::OPENCL;
pub use event::OpenClEvent;
pub use queue::OpenClQueue;

/// The default OpenCL queue ([`OpenClBackend::default_queue`]), or why there is none: what the
/// conformance kit and tools take.
pub fn default_queue() -> Result<Arc<dyn Queue>, String> {
    OpenClBackend
        .default_queue()
        .map(|queue| queue as Arc<dyn Queue>)
        .map_err(|err| err.to_string())
}
