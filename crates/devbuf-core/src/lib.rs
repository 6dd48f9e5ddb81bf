//! devbuf's memory model, shared by every backend.
//!
//! - [`MemKind`] and [`DeviceInfo`]: what memory is and whose it is.
//! - [`Queue`] and [`Backend`]: the small interface each backend implements.
//! - [`Buffer`]: bytes with an owner, freed exactly once after the last view.
//! - [`DType`], [`Layout`], [`Array`]: typed strided views, validated in one place.
//! - [`interface`] and [`dlpack`]: the CAI, SUAI and DLPack descriptor forms; [`extent`]: the
//!   whole extent an import claims, checked against the allocation that holds it.
//! - [`host`]: the host backend, always available.
//! - [`mr`]: memory resources (pool, limiting, statistics, tracking) and the current one per device.
//! - [`ipc`]: memory shared between processes (the host backend's through a memfd).
//! - [`conformance`] (feature `conformance`): the checks every backend passes.

#![warn(missing_docs)]

// The crate README's example runs as a doctest.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeExamples;

mod array;
mod blocking;
mod buffer;
pub mod dlpack;
mod dtype;
mod error;
pub mod exchange;
pub mod extent;
pub mod host;
pub mod interface;
pub mod ipc;
mod kind;
mod last_command;
mod memfd;
pub mod mr;
mod queue;
mod stream;
mod timing;

#[cfg(any(test, feature = "conformance"))]
pub mod conformance;

pub use array::{Array, Layout, MAX_NDIM, check_ndim};
pub use blocking::{blocking, set_blocking_hook};
pub use buffer::{Buffer, DEFAULT_ALIGNMENT, Owner};
pub use dlpark;
pub use dtype::{ByteOrder, DType, ScalarKind};
pub use error::{Error, Result};
pub use exchange::{ForeignObject, Protocol, ResolvedQueue};
pub use host::{HostBackend, HostQueue};
pub use ipc::{IpcHandle, IpcSharing};
pub use kind::{DeviceInfo, MemKind};
pub use last_command::LastCommand;
pub use queue::{
    Availability, Backend, CompletedEvent, Event, ExportedHandle, ForeignQueue, Queue, QueueEvent,
    split_selector,
};
pub use stream::{StreamOptions, StreamOwner};
pub use timing::InstantEvent;
