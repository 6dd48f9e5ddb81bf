//! What a backend implements to share memory between processes: [`IpcSharing`] (reached through
//! [`crate::Interop::ipc`]), the [`SharedAllocation`]s it makes and the [`OpenedAllocation`]s it
//! opens.

use std::fmt;
use std::ptr::NonNull;
use std::sync::Arc;

use super::ipc_handle::IpcHandle;
use crate::{DeviceInfo, Error, MemKind, Owner, Result};

/// An allocation other processes on this machine can open. It is released when dropped (after
/// the last [`crate::Buffer`] viewing it).
pub trait SharedAllocation: Send + Sync + fmt::Debug {
    /// Address of the first byte.
    fn ptr(&self) -> NonNull<u8>;
    /// Size in bytes.
    fn size(&self) -> usize;
    /// The backend's description of this allocation, for [`IpcHandle::payload`].
    fn payload(&self) -> Result<Vec<u8>>;
    /// Makes sure that from now on no other process can open the allocation writable, where the
    /// platform can enforce that (a memfd: `F_SEAL_FUTURE_WRITE`); this process keeps writing.
    /// A backend that cannot enforce it documents that read-only is devbuf's promise only.
    fn seal_read_only(&self) -> Result<()>;
}

/// Memory another process exported, opened in this one: valid while `owner` is alive.
pub struct OpenedAllocation {
    /// The first byte of the opened memory in this process.
    pub ptr: NonNull<u8>,
    /// Unmaps or closes the memory when the last view is gone.
    pub owner: Owner,
}

/// How a queue shares memory with other processes.
///
/// # Safety
/// [`IpcSharing::open`] returns memory valid for `handle.size` bytes of `handle.kind` (for reads;
/// for writes too unless `handle.read_only`), reachable by this queue, for as long as the returned
/// owner is alive (or until the exporter frees it, which this module documents as the user's to
/// avoid). A handle is untrusted input: `open` checks it against what the platform says about
/// the memory before anything is mapped.
pub unsafe trait IpcSharing {
    /// Allocates `size` bytes (at least 1) of `kind` memory other processes can open.
    fn allocate_shareable(&self, kind: MemKind, size: usize) -> Result<Arc<dyn SharedAllocation>>;

    /// Opens memory another process exported from this device (the caller checked
    /// `handle.device`). Errors say what went wrong: the exporter exited, freed the memory...
    fn open(&self, handle: &IpcHandle) -> Result<OpenedAllocation>;

    /// The selector that names this queue's device in every process on the machine, where its
    /// own selector does not: CUDA's ordinals depend on each process's `CUDA_VISIBLE_DEVICES`, so
    /// its handles name the device by UUID (`cuda:GPU-…`). `None` where the selector already
    /// names the same device everywhere (the host).
    fn stable_selector(&self) -> Result<Option<String>> {
        Ok(None)
    }
}

/// The error of a queue that cannot share memory: `reason` says why.
pub fn unsupported(device: &DeviceInfo, reason: impl Into<String>) -> Error {
    Error::Unsupported {
        device: device.selector.clone(),
        what: "sharing memory between processes (IPC)".into(),
        reason: reason.into(),
    }
}
