//! Host memory other processes can map: an anonymous shared-memory file (`memfd_create`) mapped
//! `MAP_SHARED`, sealed so that its size never changes (`F_SEAL_SHRINK | F_SEAL_GROW`: a file
//! shrunk under a mapping kills the reader with SIGBUS).
//!
//! Another process opens the exporter's descriptor through `/proc/<pid>/fd/<fd>` (same user). A
//! handle is untrusted: before anything is opened, the link must name devbuf's memfd and the file
//! must be the one the handle names (device and inode: descriptor numbers and pids are reused),
//! on the memfd file system; once open, the same file again, with the seals and the exact size.
//! A forged handle naming another file is refused without that file ever being opened or mapped.
//!
//! Read-only handles: the exporter seals the file with `F_SEAL_FUTURE_WRITE` (the kernel then
//! refuses every new writable mapping and `write()`, whoever asks, while the exporter's own
//! mapping stays writable), and the importer opens it `O_RDONLY` and maps it `PROT_READ`. A handle
//! whose read-only flag was cleared still cannot map the file writable.

use std::ffi::{CStr, CString};
use std::ptr::NonNull;
use std::sync::{Arc, OnceLock};

use super::HOST;
use super::queue::HostQueue;
use crate::interop::{IpcHandle, IpcSharing, OpenedAllocation, SharedAllocation};
use crate::{Error, MemKind, Owner, Result};

/// The name every devbuf memfd carries; `/proc/<pid>/fd/<fd>` reads as `/memfd:<name> (deleted)`.
const NAME: &CStr = c"devbuf-ipc";
const LINK: &str = "/memfd:devbuf-ipc (deleted)";
/// The seals every devbuf memfd carries from its creation on: its size is fixed.
const SIZE_SEALS: libc::c_int = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW;
/// The seals that forbid writable mappings (one of them on a read-only export).
const WRITE_SEALS: libc::c_int = libc::F_SEAL_WRITE | libc::F_SEAL_FUTURE_WRITE;

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

/// Maps `len` bytes of `fd` shared, for reading and writing unless `read_only`.
fn map_shared(fd: libc::c_int, len: usize, read_only: bool) -> Result<Mapping> {
    let protection = if read_only {
        libc::PROT_READ
    } else {
        libc::PROT_READ | libc::PROT_WRITE
    };
    // SAFETY: a fresh mapping chosen by the kernel; `fd` is a live descriptor of exactly `len`
    // bytes, sealed against shrinking (the callers checked or sized it).
    let ptr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            protection,
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

/// What `fstat` or `stat` says about a file.
struct Identity {
    dev: u64,
    ino: u64,
    size: u64,
    regular: bool,
}

impl Identity {
    fn of(stat: &libc::stat) -> Identity {
        Identity {
            dev: stat.st_dev,
            ino: stat.st_ino,
            size: stat.st_size as u64,
            regular: stat.st_mode & libc::S_IFMT == libc::S_IFREG,
        }
    }
}

/// The identity of a descriptor.
fn identity(fd: libc::c_int) -> Result<Identity> {
    // SAFETY: an all-zero stat is a valid out-value; fstat fills it on success.
    let mut stat: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `fd` is a live descriptor and `stat` is writable.
    if unsafe { libc::fstat(fd, &mut stat) } != 0 {
        return Err(os_error("fstat"));
    }
    Ok(Identity::of(&stat))
}

/// The seals of a descriptor (`F_GET_SEALS`); an error for files that cannot be sealed.
fn seals(fd: libc::c_int) -> std::io::Result<libc::c_int> {
    // SAFETY: `fd` is a live descriptor; the call reads its seals.
    match unsafe { libc::fcntl(fd, libc::F_GET_SEALS) } {
        -1 => Err(std::io::Error::last_os_error()),
        seals => Ok(seals),
    }
}

fn add_seals(fd: libc::c_int, seals: libc::c_int) -> Result<()> {
    // SAFETY: `fd` is our live memfd, created with MFD_ALLOW_SEALING.
    if unsafe { libc::fcntl(fd, libc::F_ADD_SEALS, seals) } != 0 {
        return Err(os_error("fcntl(F_ADD_SEALS)"));
    }
    Ok(())
}

/// The device number of the kernel's memfd file system: every memfd's `st_dev` (asked once, of a
/// memfd of our own).
fn memfd_device() -> Result<u64> {
    static DEVICE: OnceLock<u64> = OnceLock::new();
    if let Some(&device) = DEVICE.get() {
        return Ok(device);
    }
    // SAFETY: a valid C string; the descriptor is owned by `Fd` and closed on return.
    let probe = unsafe { libc::memfd_create(c"devbuf-probe".as_ptr(), libc::MFD_CLOEXEC) };
    if probe < 0 {
        return Err(os_error("memfd_create"));
    }
    let device = identity(Fd(probe).0)?.dev;
    Ok(*DEVICE.get_or_init(|| device))
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
    /// A new zero-filled shared allocation of `size` bytes (at least 1), sealed at that size.
    pub fn new(size: usize) -> Result<SharedHostMemory> {
        // SAFETY: a valid C string; close-on-exec so children started by exec do not inherit it;
        // sealable, so that its size can be fixed.
        let fd = unsafe {
            libc::memfd_create(NAME.as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING)
        };
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
        add_seals(fd.0, SIZE_SEALS)?;
        let map = map_shared(fd.0, size, false)?;
        let Identity { dev, ino, .. } = identity(fd.0)?;
        let fd = std::mem::ManuallyDrop::new(fd).0;
        Ok(SharedHostMemory { map, fd, dev, ino })
    }

    /// Maps the allocation `handle` describes, made by `SharedHostMemory::new` in process
    /// `handle`'s payload names (possibly this one), after checking that it is that allocation.
    pub fn open(handle: &IpcHandle) -> Result<OpenedAllocation> {
        let bad = |message: String| Error::invalid("ipc_handle", message);
        let payload: &[u8; PAYLOAD_LEN] = handle.payload.as_slice().try_into().map_err(|_| {
            bad(format!(
                "a host handle's payload has {PAYLOAD_LEN} bytes, this one {}",
                handle.payload.len()
            ))
        })?;
        let (pid, fd, dev, ino) = decode(payload);
        let path = format!("/proc/{pid}/fd/{fd}");
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
                "process {pid}'s descriptor {fd} is not the shared allocation the handle names \
                 (freed: the descriptor now names another file, or the pid was reused)"
            ))
        };
        // Before opening anything: the link names devbuf's memfd, and the file behind it is the
        // one the handle names, a regular file on the memfd file system. A crafted or stale
        // handle never opens an unrelated file (opening a device or a FIFO can have effects).
        let link = std::fs::read_link(&path).map_err(gone)?;
        if link.as_os_str() != LINK {
            return Err(bad(format!(
                "process {pid}'s descriptor {fd} is {link:?}, not devbuf's shared memory"
            )));
        }
        let path = CString::new(path).expect("no NUL");
        // SAFETY: an all-zero stat is a valid out-value.
        let mut target: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: a valid C string and a writable stat.
        if unsafe { libc::stat(path.as_ptr(), &mut target) } != 0 {
            return Err(gone(std::io::Error::last_os_error()));
        }
        let target = Identity::of(&target);
        let memfd_device = memfd_device()?;
        if (target.dev, target.ino) != (dev, ino) || !target.regular || target.dev != memfd_device {
            return Err(reused());
        }
        let access = if handle.read_only {
            libc::O_RDONLY
        } else {
            libc::O_RDWR
        };
        let flags = access | libc::O_CLOEXEC | libc::O_NOCTTY | libc::O_NONBLOCK;
        // SAFETY: a valid C string; the descriptor returned is owned by `Fd`.
        let opened = unsafe { libc::open(path.as_ptr(), flags) };
        if opened < 0 {
            return Err(gone(std::io::Error::last_os_error()));
        }
        let opened = Fd(opened);
        // Once open: still the same file (the descriptor may have been replaced meanwhile), with
        // its size sealed and equal to the claim, so that no byte of the mapping can vanish.
        let found = identity(opened.0)?;
        if (found.dev, found.ino) != (dev, ino) {
            return Err(reused());
        }
        let seals = seals(opened.0)
            .map_err(|err| bad(format!("the shared file cannot be sealed ({err})")))?;
        if seals & SIZE_SEALS != SIZE_SEALS {
            return Err(bad(format!(
                "the shared file is not sealed against resizing (seals {seals:#x}): it is not \
                 devbuf's"
            )));
        }
        if found.size != handle.size as u64 {
            return Err(bad(format!(
                "the shared file has {} bytes, the handle claims {}",
                found.size, handle.size
            )));
        }
        if !handle.read_only && seals & WRITE_SEALS != 0 {
            return Err(bad(
                "the exporter shared this allocation read-only (the file is sealed against \
                 writes): it opens only from a read-only handle"
                    .into(),
            ));
        }
        // The mapping keeps the file alive by itself: the descriptor closes on return.
        let map = map_shared(opened.0, handle.size, handle.read_only)?;
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

    /// `F_SEAL_FUTURE_WRITE` (Linux 5.1): no new writable mapping and no `write()` from anyone;
    /// our own mapping stays writable.
    fn seal_read_only(&self) -> Result<()> {
        add_seals(self.fd, libc::F_SEAL_FUTURE_WRITE)
    }
}

// SAFETY: `SharedHostMemory::open` maps `handle.size` bytes (the sealed file's exact size),
// read-only when the handle says so, and the owner holds the mapping; host memory is reachable
// by the host queue.
unsafe impl IpcSharing for HostQueue {
    fn allocate_shareable(&self, _kind: MemKind, size: usize) -> Result<Arc<dyn SharedAllocation>> {
        Ok(Arc::new(SharedHostMemory::new(size)?))
    }

    fn open(&self, handle: &IpcHandle) -> Result<OpenedAllocation> {
        SharedHostMemory::open(handle)
    }
}

#[cfg(test)]
mod tests;
