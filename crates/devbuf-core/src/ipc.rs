//! Memory shared between processes on one machine.
//!
//! A queue that can share memory says so through [`Queue::ipc`], which hands out its
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

use std::collections::HashSet;
use std::fmt;
use std::ptr::NonNull;
use std::sync::{Arc, OnceLock};

use parking_lot::Mutex;

use crate::{Buffer, DeviceInfo, Error, MemKind, Owner, Queue, Result};

/// What another process on this machine needs to open a view of shared memory. Plain data: it
/// travels as bytes ([`IpcHandle::to_bytes`]), through pickle or any pipe.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct IpcHandle {
    /// Selector of the device that owns the memory ("host", "cuda:0").
    pub device: String,
    /// The kind of memory.
    pub kind: MemKind,
    /// Size of the whole shared allocation in bytes.
    pub size: usize,
    /// Where the exported view starts within the allocation.
    pub offset: usize,
    /// Length of the exported view in bytes.
    pub len: usize,
    /// Whether the view opens for reading only. The exporter enforces it where the platform can
    /// (a sealed memfd cannot be mapped writable again); flipping this flag in a handle does not
    /// undo that.
    pub read_only: bool,
    /// The backend's own description of the allocation (a memfd's owner and identity, a
    /// `CUipcMemHandle`).
    pub payload: Vec<u8>,
}

/// The first bytes of an encoded handle, with the format version.
const MAGIC: &[u8] = b"devbuf-ipc\x02";
/// Longest selector or payload an encoded handle may carry (a sanity bound on foreign input).
const MAX_FIELD: usize = 4096;

impl IpcHandle {
    /// The handle as bytes: what `from_bytes` reads back in another process.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(MAGIC.len() + 48 + self.device.len() + self.payload.len());
        out.extend_from_slice(MAGIC);
        for field in [self.device.as_bytes(), self.kind.as_str().as_bytes()] {
            out.extend_from_slice(&(field.len() as u32).to_le_bytes());
            out.extend_from_slice(field);
        }
        for number in [self.size, self.offset, self.len] {
            out.extend_from_slice(&(number as u64).to_le_bytes());
        }
        out.push(u8::from(self.read_only));
        out.extend_from_slice(&(self.payload.len() as u32).to_le_bytes());
        out.extend_from_slice(&self.payload);
        out
    }

    /// Reads a handle made by [`IpcHandle::to_bytes`]; anything else (truncated, garbled, from
    /// another format version) is an [`Error::InvalidDescriptor`] naming `ipc_handle`.
    pub fn from_bytes(bytes: &[u8]) -> Result<IpcHandle> {
        let mut reader = Reader(bytes);
        if reader.take(MAGIC.len())? != MAGIC {
            return Err(bad_handle(
                "does not start with devbuf's IPC handle marker (version 2)",
            ));
        }
        let device = reader.text("device")?;
        let kind: MemKind = reader.text("kind")?.parse()?;
        let size = reader.number("size")?;
        let offset = reader.number("offset")?;
        let len = reader.number("len")?;
        let read_only = match reader.take(1)? {
            [0] => false,
            [1] => true,
            other => {
                return Err(bad_handle(format!(
                    "read-only flag {other:?} is not [0] or [1]"
                )));
            }
        };
        let payload = reader.field("payload")?.to_vec();
        if !reader.0.is_empty() {
            return Err(bad_handle(format!("{} trailing bytes", reader.0.len())));
        }
        if offset.checked_add(len).is_none_or(|end| end > size) {
            return Err(bad_handle(format!(
                "the view {offset}..{} lies outside the {size}-byte allocation",
                offset as u128 + len as u128
            )));
        }
        Ok(IpcHandle {
            device,
            kind,
            size,
            offset,
            len,
            read_only,
            payload,
        })
    }
}

fn bad_handle(message: impl Into<String>) -> Error {
    Error::invalid("ipc_handle", message)
}

/// Reads the encoded fields of a handle, each bounded before use.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        if self.0.len() < n {
            return Err(bad_handle("truncated"));
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }

    fn field(&mut self, name: &str) -> Result<&'a [u8]> {
        let len = u32::from_le_bytes(self.take(4)?.try_into().expect("4 bytes")) as usize;
        if len > MAX_FIELD {
            return Err(bad_handle(format!("{name} claims {len} bytes")));
        }
        self.take(len)
    }

    fn text(&mut self, name: &str) -> Result<String> {
        String::from_utf8(self.field(name)?.to_vec())
            .map_err(|_| bad_handle(format!("{name} is not UTF-8")))
    }

    fn number(&mut self, name: &str) -> Result<usize> {
        let value = u64::from_le_bytes(self.take(8)?.try_into().expect("8 bytes"));
        usize::try_from(value).map_err(|_| bad_handle(format!("{name} {value} is too large")))
    }
}

/// An allocation other processes on this machine can open. It is released when dropped (after
/// the last [`Buffer`] viewing it).
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
}

/// The error of a queue that cannot share memory: `reason` says why.
pub fn unsupported(device: &DeviceInfo, reason: impl Into<String>) -> Error {
    Error::Unsupported {
        device: device.selector.clone(),
        what: "sharing memory between processes (IPC)".into(),
        reason: reason.into(),
    }
}

/// What keeps a shareable buffer's memory alive: its buffers find their allocation through it.
#[derive(Debug, Clone)]
struct Shared(Arc<dyn SharedAllocation>);

/// Allocates `nbytes` of `kind` memory on `queue` that other processes can open through
/// [`export`]'s handle.
pub fn alloc_shareable(queue: &Arc<dyn Queue>, kind: MemKind, nbytes: usize) -> Result<Buffer> {
    let sharing = queue.ipc()?;
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
    if read_only {
        shared.seal_read_only()?;
    }
    buffer.synchronize()?;
    buffer.mark_exported();
    Ok(IpcHandle {
        device: buffer.device().selector.clone(),
        kind: buffer.kind(),
        size: shared.size(),
        offset: buffer.ptr() as usize - shared.ptr().as_ptr() as usize,
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
/// the device it names: a view of the same memory, zero-copy.
pub fn open(queue: &Arc<dyn Queue>, handle: &IpcHandle) -> Result<Buffer> {
    if queue.device().selector != handle.device {
        return Err(bad_handle(format!(
            "the handle is for device {:?}, not {:?}",
            handle.device,
            queue.device().selector
        )));
    }
    let sharing = queue.ipc()?;
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
    whole.slice(handle.offset..handle.offset + handle.len)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn handle() -> IpcHandle {
        IpcHandle {
            device: "host".into(),
            kind: MemKind::Host,
            size: 4096,
            offset: 16,
            len: 100,
            read_only: true,
            payload: vec![1, 2, 3],
        }
    }

    #[test]
    fn handles_round_trip_through_bytes() {
        assert_eq!(
            IpcHandle::from_bytes(&handle().to_bytes()).unwrap(),
            handle()
        );
    }

    #[test]
    fn every_truncation_and_garbling_is_an_error_naming_the_handle() {
        let bytes = handle().to_bytes();
        for cut in 0..bytes.len() {
            let err = IpcHandle::from_bytes(&bytes[..cut]).unwrap_err();
            assert!(
                err.to_string().starts_with("ipc_handle") || err.to_string().starts_with("kind"),
                "{err}"
            );
        }
        let mut extra = bytes.clone();
        extra.push(0);
        assert!(IpcHandle::from_bytes(&extra).is_err());
        let outside = IpcHandle {
            offset: 4000,
            ..handle()
        };
        assert!(IpcHandle::from_bytes(&outside.to_bytes()).is_err());
        let mut huge = bytes.clone();
        huge[MAGIC.len()..MAGIC.len() + 4].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(IpcHandle::from_bytes(&huge).is_err());
        // The read-only flag is one byte, 0 or 1, after the three numbers.
        let flag = MAGIC.len() + 4 + "host".len() + 4 + "host".len() + 24;
        let mut odd = bytes.clone();
        odd[flag] = 2;
        let err = IpcHandle::from_bytes(&odd).unwrap_err().to_string();
        assert!(err.contains("read-only flag [2]"), "{err}");
        odd[flag] = 0;
        assert!(!IpcHandle::from_bytes(&odd).unwrap().read_only);
    }
}
