//! Memory shared between processes on one machine.
//!
//! A queue that can share memory says so through [`crate::Interop::ipc`], which hands out its
//! [`IpcSharing`]: it allocates memory other processes can open ([`SharedAllocation`]) and opens
//! what another process exported. A backend that cannot share (SYCL, OpenCL) answers with an
//! [`Error::Unsupported`] that says why.
//!
//! Ownership: the exporting process owns the memory. An opened view keeps nothing alive on the
//! exporting side: once the exporter frees the allocation, its handles no longer open, and what an
//! importer still maps is no longer shared with anyone (CUDA: no longer valid at all). Importers
//! must be done before the exporter frees.
//!
//! The sharing allocation is a separate piece ([`SharedAllocation`], reached through
//! [`alloc_shareable`]) so that a memory resource can wrap it later.
//!
//! What a backend implements lives below the exchange half, in [`crate::interop`]; this module
//! builds on [`Buffer`] and is re-exported here under the names backends and users know.

// Caller numbers become addresses here: every size, count, offset and alignment is checked
// (docs/architecture.md, "Untrusted numbers").
#![deny(clippy::arithmetic_side_effects)]

use std::collections::HashSet;
use std::sync::{Arc, OnceLock};

use parking_lot::Mutex;

use crate::interop::bad_handle;
pub use crate::interop::{IpcHandle, IpcSharing, OpenedAllocation, SharedAllocation, unsupported};

use crate::{Buffer, Error, MemKind, Owner, Queue, Result};

/// What keeps a shareable buffer's memory alive: its buffers find their allocation through it.
#[derive(Debug, Clone)]
struct Shared(Arc<dyn SharedAllocation>);

/// Allocates `nbytes` of `kind` memory on `queue` that other processes can open through
/// [`export`]'s handle.
pub fn alloc_shareable(queue: &Arc<dyn Queue>, kind: MemKind, nbytes: usize) -> Result<Buffer> {
    let sharing = queue.interop().ipc()?;
    if !queue.supports(kind) {
        return Err(unsupported(
            queue.device(),
            format!("the device has no {kind} memory"),
        ));
    }
    let shared = sharing.allocate_shareable(kind, nbytes.max(1))?;
    let ptr = shared.ptr().as_ptr();
    // SAFETY: the allocation is valid for at least `nbytes` bytes of `kind` memory that the queue
    // made, and the owner keeps it alive.
    Ok(unsafe {
        Buffer::from_foreign(
            Arc::clone(queue),
            ptr,
            nbytes,
            kind,
            Owner::keep_alive(Shared(shared)),
        )
    })
}

/// Whether `buffer` views memory made by [`alloc_shareable`].
pub fn is_shareable(buffer: &Buffer) -> bool {
    buffer.keep_alive::<Shared>().is_some()
}

/// [`Buffer::grown`] for any buffer devbuf allocated: an IPC-shareable buffer grows into a new
/// shareable allocation (so that the grown buffer still has a handle), any other from where its
/// memory came.
pub fn grown(
    buffer: &Buffer,
    len: usize,
    queue: Option<&Arc<dyn Queue>>,
) -> Result<(Buffer, crate::Event)> {
    if is_shareable(buffer) {
        let grown = alloc_shareable(buffer.queue(), buffer.kind(), len)?;
        return buffer.copied_into(grown, queue);
    }
    buffer.grown(len, queue)
}

/// The handle that opens `buffer`'s bytes in another process (read-only when the buffer is).
/// Waits for pending work on the buffer first, so that the other process sees every write made so
/// far.
pub fn export(buffer: &Buffer) -> Result<IpcHandle> {
    export_with(buffer, buffer.is_read_only())
}

/// The handle that opens `buffer`'s bytes read-only in another process. The allocation is then
/// sealed where the platform can enforce it: no other process can open it writable again, through
/// this handle or any other (see [`SharedAllocation::seal_read_only`]); this process keeps writing.
pub fn export_read_only(buffer: &Buffer) -> Result<IpcHandle> {
    export_with(buffer, true)
}

fn export_with(buffer: &Buffer, read_only: bool) -> Result<IpcHandle> {
    let Some(Shared(shared)) = buffer.keep_alive::<Shared>() else {
        return Err(Error::unexportable(format!(
            "this buffer was not allocated for sharing between processes: allocate it with \
             ipc=True ({} of {} memory on {:?})",
            buffer.len(),
            buffer.kind(),
            buffer.device().selector
        )));
    };
    let device = match buffer.queue().interop().ipc()?.stable_selector()? {
        Some(stable) => stable,
        None => buffer.device().selector.clone(),
    };
    if read_only {
        shared.seal_read_only()?;
    }
    buffer.synchronize()?;
    buffer.mark_exported();
    Ok(IpcHandle {
        device,
        kind: buffer.kind(),
        size: shared.size(),
        // The buffer lies inside the shared allocation, at or after its start.
        offset: (buffer.ptr() as usize).saturating_sub(shared.ptr().as_ptr() as usize),
        len: buffer.len(),
        read_only,
        payload: shared.payload()?,
    })
}

/// An open allocation: its device selector and backend payload.
type OpenKey = (String, Vec<u8>);

/// The handles open in this process, so that opening one twice is refused: one process holds one
/// view of a shared allocation at a time (CUDA maps a handle once per context).
fn open_handles() -> &'static Mutex<HashSet<OpenKey>> {
    static OPEN: OnceLock<Mutex<HashSet<OpenKey>>> = OnceLock::new();
    OPEN.get_or_init(Default::default)
}

/// Opens `handle` (made by [`export`] in another process, or this one) on `queue`, the queue of
/// the device it names (by its selector, or the [`IpcSharing::stable_selector`] that names it in
/// every process, which `crate::open` resolves): a view of the same memory, zero-copy.
pub fn open(queue: &Arc<dyn Queue>, handle: &IpcHandle) -> Result<Buffer> {
    let sharing = queue.interop().ipc()?;
    let stable = sharing.stable_selector()?;
    if stable.as_deref().unwrap_or(&queue.device().selector) != handle.device {
        return Err(bad_handle(format!(
            "the handle is for device {:?}, not {:?}",
            handle.device,
            stable.as_deref().unwrap_or(&queue.device().selector)
        )));
    }
    let key = (handle.device.clone(), handle.payload.clone());
    if !open_handles().lock().insert(key.clone()) {
        return Err(bad_handle(
            "this shared allocation is already open in this process: use the Buffer that opened \
             it (a handle opens once per process until its buffers are gone)",
        ));
    }
    let opened = match sharing.open(handle) {
        Ok(opened) => opened,
        Err(err) => {
            open_handles().lock().remove(&key);
            return Err(err);
        }
    };
    let backend_owner = opened.owner;
    let owner = Owner::deleter(move || {
        drop(backend_owner);
        open_handles().lock().remove(&key);
    });
    let (queue, ptr) = (Arc::clone(queue), opened.ptr.as_ptr());
    // SAFETY: IpcSharing's contract: valid for `handle.size` bytes of `handle.kind` memory
    // reachable by `queue` while the owner lives, for reads only when the handle says so; the
    // view lies inside (from_bytes checked it).
    let whole = unsafe {
        if handle.read_only {
            Buffer::from_foreign_read_only(queue, ptr, handle.size, handle.kind, owner)
        } else {
            Buffer::from_foreign(queue, ptr, handle.size, handle.kind, owner)
        }
    };
    // `from_bytes` checked the view lies inside; a handle built otherwise is checked here.
    let end = handle.offset.checked_add(handle.len).ok_or_else(|| {
        bad_handle(format!(
            "the view at {} of {} bytes wraps past the end of the address space",
            handle.offset, handle.len
        ))
    })?;
    whole.slice(handle.offset..end)
}
