//! Host memory other processes can map: an anonymous shared-memory file (`memfd_create`) mapped
//! `MAP_SHARED`. Another process opens the exporter's descriptor through
//! `/proc/<pid>/fd/<fd>` (same user), checks that it is still the same file (device and inode:
//! descriptor numbers and pids are reused) and maps it.

use std::ffi::CString;
use std::ptr::NonNull;
use std::sync::Arc;

use crate::host::HOST;
use crate::ipc::{IpcHandle, IpcSharing, OpenedAllocation, SharedAllocation};
use crate::{Error, HostQueue, MemKind, Owner, Result};

/// A shared mapping of a memfd: owns the descriptor and the mapping, released on drop.
#[derive(Debug)]
pub struct SharedHostMemory {
    map: Mapping,
    fd: libc::c_int,
    /// The file's identity, checked by the opening process.
    dev: u64,
    ino: u64,
}

/// A `MAP_SHARED` mapping, unmapped on drop.
#[derive(Debug)]
struct Mapping {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: a mapping is plain memory; the address range is not tied to a thread.
unsafe impl Send for Mapping {}
// SAFETY: as above; shared references never write through it.
unsafe impl Sync for Mapping {}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: the range was mapped by `map_shared` and is unmapped once.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

fn os_error(operation: &'static str) -> Error {
    Error::runtime(HOST, operation, std::io::Error::last_os_error().to_string())
}

/// Maps `len` bytes of `fd` read-write and shared.
fn map_shared(fd: libc::c_int, len: usize) -> Result<Mapping> {
    // SAFETY: a fresh mapping chosen by the kernel; `fd` is a live descriptor of at least `len`
    // bytes (the callers checked or sized it).
    let ptr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd,
            0,
        )
    };
    if ptr == libc::MAP_FAILED {
        return Err(os_error("mmap"));
    }
    let ptr = NonNull::new(ptr.cast()).ok_or_else(|| os_error("mmap"))?;
    Ok(Mapping { ptr, len })
}

/// `(st_dev, st_ino, st_size)` of a descriptor.
fn identity(fd: libc::c_int) -> Result<(u64, u64, u64)> {
    // SAFETY: an all-zero stat is a valid out-value; fstat fills it on success.
    let mut stat: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `fd` is a live descriptor and `stat` is writable.
    if unsafe { libc::fstat(fd, &mut stat) } != 0 {
        return Err(os_error("fstat"));
    }
    Ok((stat.st_dev, stat.st_ino, stat.st_size as u64))
}

/// Closes a descriptor when dropped.
struct Fd(libc::c_int);

impl Drop for Fd {
    fn drop(&mut self) {
        // SAFETY: the descriptor is owned here and closed once.
        unsafe { libc::close(self.0) };
    }
}

impl SharedHostMemory {
    /// A new zero-filled shared allocation of `size` bytes (at least 1).
    pub fn new(size: usize) -> Result<SharedHostMemory> {
        let name = CString::new("devbuf-ipc").expect("no NUL");
        // SAFETY: a valid C string; close-on-exec so children started by exec do not inherit it.
        let fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
        if fd < 0 {
            return Err(os_error("memfd_create"));
        }
        let fd = Fd(fd);
        let oom = |reason: String| Error::OutOfMemory {
            kind: MemKind::Host,
            size,
            device: HOST.into(),
            reason,
        };
        let len = libc::off_t::try_from(size).map_err(|_| oom("too large for a file".into()))?;
        // SAFETY: `fd` is our live memfd.
        if unsafe { libc::ftruncate(fd.0, len) } != 0 {
            return Err(oom(std::io::Error::last_os_error().to_string()));
        }
        let map = map_shared(fd.0, size)?;
        let (dev, ino, _) = identity(fd.0)?;
        let fd = std::mem::ManuallyDrop::new(fd).0;
        Ok(SharedHostMemory { map, fd, dev, ino })
    }

    /// Maps the allocation `handle` describes, made by `SharedHostMemory::new` in process
    /// `handle`'s payload names (possibly this one).
    pub fn open(handle: &IpcHandle) -> Result<OpenedAllocation> {
        let bad = |message: String| Error::invalid("ipc_handle", message);
        let payload: &[u8; PAYLOAD_LEN] = handle.payload.as_slice().try_into().map_err(|_| {
            bad(format!(
                "a host handle's payload has {PAYLOAD_LEN} bytes, this one {}",
                handle.payload.len()
            ))
        })?;
        let (pid, fd, dev, ino) = decode(payload);
        let path = CString::new(format!("/proc/{pid}/fd/{fd}")).expect("no NUL");
        let gone = |err: std::io::Error| {
            bad(match err.raw_os_error() {
                Some(libc::ENOENT) => format!(
                    "the exporting process {pid} has exited or freed the buffer (its descriptor \
                     {fd} is gone)"
                ),
                _ => format!("cannot open process {pid}'s descriptor {fd}: {err}"),
            })
        };
        let reused = || {
            bad(format!(
                "process {pid} no longer holds the shared allocation (freed: descriptor {fd} now \
                 names another file, or the pid was reused)"
            ))
        };
        // Check the file's identity before opening it, so that a stale or crafted handle never
        // opens an unrelated file; and again after, on the descriptor itself.
        // SAFETY: an all-zero stat is a valid out-value.
        let mut target: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: a valid C string and a writable stat.
        if unsafe { libc::stat(path.as_ptr(), &mut target) } != 0 {
            return Err(gone(std::io::Error::last_os_error()));
        }
        if (target.st_dev, target.st_ino) != (dev, ino) {
            return Err(reused());
        }
        // SAFETY: a valid C string; the descriptor returned is owned by `Fd`.
        let opened = unsafe { libc::open(path.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
        if opened < 0 {
            return Err(gone(std::io::Error::last_os_error()));
        }
        let opened = Fd(opened);
        let (found_dev, found_ino, found_size) = identity(opened.0)?;
        if (found_dev, found_ino) != (dev, ino) {
            return Err(reused());
        }
        if found_size < handle.size as u64 {
            return Err(bad(format!(
                "the shared file has {found_size} bytes, the handle claims {}",
                handle.size
            )));
        }
        // The mapping keeps the file alive by itself: the descriptor closes on return.
        let map = map_shared(opened.0, handle.size)?;
        Ok(OpenedAllocation {
            ptr: map.ptr,
            owner: Owner::keep_alive(map),
        })
    }
}

impl Drop for SharedHostMemory {
    fn drop(&mut self) {
        // SAFETY: the descriptor is owned here and closed once (the mapping unmaps itself).
        unsafe { libc::close(self.fd) };
    }
}

/// pid (u32), fd (i32), st_dev (u64), st_ino (u64), little-endian.
const PAYLOAD_LEN: usize = 24;

fn decode(payload: &[u8; PAYLOAD_LEN]) -> (u32, i32, u64, u64) {
    let word = |range: std::ops::Range<usize>| -> [u8; 8] {
        let mut out = [0; 8];
        out[..range.len()].copy_from_slice(&payload[range]);
        out
    };
    (
        u64::from_le_bytes(word(0..4)) as u32,
        u64::from_le_bytes(word(4..8)) as u32 as i32,
        u64::from_le_bytes(word(8..16)),
        u64::from_le_bytes(word(16..24)),
    )
}

impl SharedAllocation for SharedHostMemory {
    fn ptr(&self) -> NonNull<u8> {
        self.map.ptr
    }

    fn size(&self) -> usize {
        self.map.len
    }

    fn payload(&self) -> Result<Vec<u8>> {
        let mut payload = Vec::with_capacity(PAYLOAD_LEN);
        payload.extend_from_slice(&std::process::id().to_le_bytes());
        payload.extend_from_slice(&self.fd.to_le_bytes());
        payload.extend_from_slice(&self.dev.to_le_bytes());
        payload.extend_from_slice(&self.ino.to_le_bytes());
        Ok(payload)
    }
}

// SAFETY: `SharedHostMemory::open` maps `handle.size` bytes (checked against the file's size) and
// the owner holds the mapping; host memory is reachable by the host queue.
unsafe impl IpcSharing for HostQueue {
    fn allocate_shareable(&self, _kind: MemKind, size: usize) -> Result<Arc<dyn SharedAllocation>> {
        Ok(Arc::new(SharedHostMemory::new(size)?))
    }

    fn open(&self, handle: &IpcHandle) -> Result<OpenedAllocation> {
        SharedHostMemory::open(handle)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Buffer, Queue, ipc};

    #[test]
    fn a_shared_buffer_opens_as_the_same_bytes_and_not_twice() {
        let queue = HostQueue::shared();
        let buffer = ipc::alloc_shareable(&queue, MemKind::Host, 1000).unwrap();
        buffer.copy_from_host(&[7; 1000]).unwrap();
        let part = buffer.slice(100..300).unwrap();
        let handle = IpcHandle::from_bytes(&ipc::export(&part).unwrap().to_bytes()).unwrap();
        assert_eq!((handle.offset, handle.len), (100, 200));
        let opened = ipc::open(&queue, &handle).unwrap();
        assert_ne!(opened.ptr(), part.ptr());
        opened.fill(9).unwrap();
        assert_eq!(
            buffer.to_vec().unwrap()[99..301],
            [&[7][..], &[9; 200], &[7]].concat()
        );
        // Open once per process, and again once the first view is gone.
        assert!(ipc::open(&queue, &handle).is_err());
        drop(opened);
        drop(ipc::open(&queue, &handle).unwrap());
        // Freed by the exporter: the handle no longer opens.
        drop((buffer, part));
        let err = ipc::open(&queue, &handle).unwrap_err().to_string();
        assert!(err.contains("freed"), "{err}");
    }

    #[test]
    fn only_shareable_buffers_export() {
        let queue: Arc<dyn Queue> = HostQueue::shared();
        let plain = Buffer::alloc(&queue, MemKind::Host, 8).unwrap();
        assert!(matches!(ipc::export(&plain), Err(Error::Unexportable(_))));
    }
}
