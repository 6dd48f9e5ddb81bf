//! devbuf's memory model, shared by every backend.
//!
//! - [`MemKind`] and [`DeviceInfo`]: what memory is and whose it is.
//! - [`Queue`] (the device operations), [`Interop`] (the exchange questions, which a queue hands
//!   out) and [`Backend`] (discovery): what each backend implements; [`BackendDescriptor`]: the
//!   facts about a backend that the rest of devbuf reads, stated once by each.
//! - [`Buffer`]: bytes with an owner, freed exactly once after the last view.
//! - [`DType`], [`Layout`], [`Array`]: typed strided views, validated in one place.
//! - [`interface`] and [`dlpack`]: the CAI, SUAI and DLPack descriptor forms; [`extent`]: the
//!   whole extent an import claims, checked against the allocation that holds it; [`exchange`]:
//!   the protocols' ordering rules applied to a buffer's pending work.
//! - [`ecosystem`]: where the consumers of a backend's memory keep their default queue for a
//!   device, on which devbuf hands out its default queue's memory.
//! - [`host`]: the host backend, always available.
//! - [`mr`]: memory resources (pool, limiting, statistics, tracking) and the current one per device;
//!   [`debug_log`]: RMM's debug log of what they do.
//! - [`ipc`]: memory shared between processes (the host backend's through a memfd).
//! - [`conformance`] (feature `conformance`): the checks every backend passes.

#![warn(missing_docs)]

// The crate README's example runs as a doctest.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeExamples;

mod array;
mod backend;
mod blocking;
mod buffer;
pub mod debug_log;
mod descriptor;
pub mod dlpack;
mod dtype;
pub mod ecosystem;
mod error;
mod event;
pub mod exchange;
pub mod extent;
mod hands_nothing_out;
pub mod hints;
pub mod host;
mod host_like;
pub mod interface;
pub mod interop;
pub mod ipc;
mod kind;
mod last_command;
pub mod mr;
pub mod ordering;
mod owner;
mod queue;
mod spare;
pub mod stream;
mod timing;

#[cfg(any(test, feature = "conformance"))]
pub mod conformance;

pub use array::{Array, Index, Layout, Literal, MAX_NDIM, check_ndim};
pub use backend::{Availability, Backend, Claim, split_selector};
pub use blocking::{blocking, set_blocking_hook};
pub use buffer::{Buffer, Runs};
pub use descriptor::{BackendDescriptor, DlpackDeviceType};
pub use dlpark;
pub use dtype::{ByteOrder, DType, Scalar, ScalarKind};
pub use error::{Error, Raised, Result};
pub use event::{CompletedEvent, Event, ForeignQueue, QueueEvent};
pub use exchange::{Protocol, ResolvedQueue};
pub use hints::{Advice, Location};
pub use host::{HostBackend, HostQueue};
pub use interop::{
    ExportedHandle, ForeignObject, Holder, Interop, IpcHandle, IpcSharing, StreamHandle,
};
pub use kind::{DeviceInfo, MemKind};
pub use last_command::LastCommand;
pub use ordering::Access;
pub use owner::{KeptAlive, Owner};
pub use queue::{DEFAULT_ALIGNMENT, Queue, Rows, copy_row_by_row};
pub use stream::{HandleSource, KeepsStream, StreamOptions, StreamOwner};
pub use timing::InstantEvent;
