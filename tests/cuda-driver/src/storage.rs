//! Where an allocation's bytes live, and what the host may touch.
//!
//! Device memory's bytes are a private mapping only stream operations touch (the host's pointer
//! is in the `PROT_NONE` reservation). Pinned and managed memory are host mappings at the
//! user's pointer, made inaccessible when freed but never unmapped, so that the address is not
//! reused. Managed memory of a device without concurrent managed access
//! (`DEVBUF_CUDA_TEST_CONCURRENT_MANAGED_ACCESS=0`) is two mappings of the same pages: the host's,
//! which is inaccessible while stream work on the allocation is pending (a host access then
//! faults, as on such a device), and the one stream operations use.
//!
//! Fresh device, pinned and managed memory holds a poison pattern, never zeros: a real allocation
//! holds whatever was there before, so a program that reads memory it never wrote must not find
//! the zeros a fresh host mapping has. The pattern's pages are mapped copy-on-write from one
//! poisoned file, so a large allocation costs no memory until it is written.
//!
//! Device bytes another process may map (`cuIpcGetMemHandle`) move into a memfd when first
//! exported, at the same address. The file stays open as long as the bytes (until the free), so
//! that the importing process can open it as `/proc/<pid>/fd/<fd>` and map the same pages.

use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::sync::{Arc, OnceLock};

use cudarc::driver::sys::CUresult;
use parking_lot::Mutex;

use crate::errors::DriverResult;

pub(crate) struct Storage {
    /// The bytes stream operations touch.
    data: usize,
    len: usize,
    host: HostView,
    /// Device bytes exported to other processes: the file they are in.
    shared: Mutex<Option<SharedFile>>,
}

/// Which file an exported allocation's bytes are in: an open descriptor of the exporting process
/// and the identity the importer checks the file it opens against.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct FileId {
    pub fd: i32,
    pub inode: u64,
    pub device: u64,
}

struct SharedFile {
    /// Open as long as the bytes: importers reach the file through it, until it closes.
    _file: File,
    id: FileId,
}

enum HostView {
    /// Device memory: the host has no view.
    None,
    /// Pinned or managed memory: the host's pointer is `data` itself.
    Same,
    /// Host memory the program allocated and registered (`cuMemHostRegister`): the program's own
    /// pages, which the driver neither poisons, revokes nor unmaps.
    Registered,
    /// Managed memory without concurrent access: a second mapping, at the host's pointer.
    Separate {
        address: usize,
        state: Mutex<SeparateView>,
    },
}

#[derive(Default)]
struct SeparateView {
    /// Stream operations pending on the allocation.
    users: usize,
    revoked: bool,
}

/// The byte fresh memory holds: every float reads NaN, every integer -1.
pub(crate) const POISON: u8 = 0xff;
/// How many poisoned bytes the pattern's file holds; larger allocations map it repeatedly.
const POISON_CHUNK: usize = 8 << 20;

/// The file of poison fresh allocations map, created on first use.
fn poison_file() -> DriverResult<i32> {
    static FILE: OnceLock<Option<OwnedFd>> = OnceLock::new();
    let file = FILE.get_or_init(|| {
        let fd = memfd(POISON_CHUNK).ok()?;
        let view = map(POISON_CHUNK, libc::MAP_SHARED, fd.as_raw_fd()).ok()?;
        // SAFETY: a fresh shared mapping of POISON_CHUNK bytes that nothing else refers to.
        unsafe { std::ptr::write_bytes(view as *mut u8, POISON, POISON_CHUNK) };
        unmap(view, POISON_CHUNK);
        Some(fd)
    });
    file.as_ref()
        .map(AsRawFd::as_raw_fd)
        .ok_or(CUresult::CUDA_ERROR_OUT_OF_MEMORY)
}

/// `len` private, writable bytes that read as [`POISON`] until written.
fn map_poisoned(len: usize) -> DriverResult<usize> {
    let poison = poison_file()?;
    let base = map(len, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1)?;
    for offset in (0..len).step_by(POISON_CHUNK) {
        let chunk = POISON_CHUNK.min(len - offset);
        // SAFETY: replaces part of the fresh mapping above, which nothing refers to yet.
        let mapped = unsafe {
            libc::mmap(
                (base + offset) as *mut _,
                chunk,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_FIXED | libc::MAP_NORESERVE,
                poison,
                0,
            )
        };
        if mapped == libc::MAP_FAILED {
            unmap(base, len);
            return Err(CUresult::CUDA_ERROR_OUT_OF_MEMORY);
        }
    }
    Ok(base)
}

fn map(len: usize, flags: i32, fd: i32) -> DriverResult<usize> {
    // SAFETY: a fresh mapping chosen by the kernel; nothing else refers to its range.
    let address = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            flags | libc::MAP_NORESERVE,
            fd,
            0,
        )
    };
    if address == libc::MAP_FAILED {
        return Err(CUresult::CUDA_ERROR_OUT_OF_MEMORY);
    }
    Ok(address as usize)
}

/// A memory file of `len` bytes.
fn memfd(len: usize) -> DriverResult<OwnedFd> {
    // SAFETY: a NUL-terminated name; the descriptor is owned by the result.
    let fd = unsafe { libc::memfd_create(c"devbuf-cuda-test-driver".as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(CUresult::CUDA_ERROR_OUT_OF_MEMORY);
    }
    // SAFETY: a fresh descriptor that nothing else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: our own descriptor.
    if unsafe { libc::ftruncate(fd.as_raw_fd(), len as libc::off_t) } != 0 {
        return Err(CUresult::CUDA_ERROR_OUT_OF_MEMORY);
    }
    Ok(fd)
}

fn unmap(address: usize, len: usize) {
    // SAFETY: the range is one of a storage's own mappings, and nothing refers to it any more.
    unsafe { libc::munmap(address as *mut _, len) };
}

fn protect(address: usize, len: usize, protection: i32) {
    // SAFETY: the range is one of a storage's own mappings.
    unsafe { libc::mprotect(address as *mut _, len, protection) };
}

impl Storage {
    /// Bytes for device memory.
    pub fn device(len: usize) -> DriverResult<Arc<Storage>> {
        let len = len.max(1);
        let data = map_poisoned(len)?;
        Ok(Arc::new(Storage {
            data,
            len,
            host: HostView::None,
            shared: Mutex::new(None),
        }))
    }

    /// Device bytes another process exported: `file`'s pages, mapped here too.
    pub fn imported(file: &File, len: usize) -> DriverResult<Arc<Storage>> {
        let data = map(len, libc::MAP_SHARED, file.as_raw_fd())?;
        Ok(Arc::new(Storage {
            data,
            len,
            host: HostView::None,
            shared: Mutex::new(None),
        }))
    }

    /// Host-accessible bytes (pinned or managed memory).
    pub fn host(len: usize) -> DriverResult<Arc<Storage>> {
        let len = len.max(1);
        let data = map_poisoned(len)?;
        Ok(Arc::new(Storage {
            data,
            len,
            host: HostView::Same,
            shared: Mutex::new(None),
        }))
    }

    /// Managed bytes the host may touch only while no stream work on them is pending.
    pub fn managed_without_concurrent_access(len: usize) -> DriverResult<Arc<Storage>> {
        let len = len.max(1);
        // The descriptor closes on return; the mappings keep the pages.
        let fd = memfd(len)?;
        let data = map(len, libc::MAP_SHARED, fd.as_raw_fd())?;
        let address =
            map(len, libc::MAP_SHARED, fd.as_raw_fd()).inspect_err(|_| unmap(data, len))?;
        // SAFETY: a fresh shared mapping of `len` bytes that nothing else refers to yet.
        unsafe { std::ptr::write_bytes(data as *mut u8, POISON, len) };
        Ok(Arc::new(Storage {
            data,
            len,
            host: HostView::Separate {
                address,
                state: Mutex::default(),
            },
            shared: Mutex::new(None),
        }))
    }

    /// The program's own host memory at `address`, registered with the driver.
    pub fn registered(address: usize, len: usize) -> Arc<Storage> {
        Arc::new(Storage {
            data: address,
            len,
            host: HostView::Registered,
            shared: Mutex::new(None),
        })
    }

    /// Moves device bytes into a file other processes can map, once; the file's identity. The
    /// caller holds the allocation's state for writing, so no stream operation touches the bytes
    /// meanwhile.
    pub fn share(&self) -> DriverResult<FileId> {
        let mut shared = self.shared.lock();
        if let Some(file) = &*shared {
            return Ok(file.id);
        }
        let file = File::from(memfd(self.len)?);
        let view = map(self.len, libc::MAP_SHARED, file.as_raw_fd())?;
        // SAFETY: two distinct mappings of `len` bytes, both this storage's own; no stream
        // operation writes the bytes now (the caller's lock).
        unsafe { std::ptr::copy_nonoverlapping(self.data as *const u8, view as *mut u8, self.len) };
        unmap(view, self.len);
        // Replaces the private pages with the file's at the same address, in one step.
        // SAFETY: `data` is this storage's own mapping of `len` bytes.
        let replaced = unsafe {
            libc::mmap(
                self.data as *mut _,
                self.len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_FIXED | libc::MAP_NORESERVE,
                file.as_raw_fd(),
                0,
            )
        };
        if replaced == libc::MAP_FAILED {
            return Err(CUresult::CUDA_ERROR_OUT_OF_MEMORY);
        }
        let metadata = file
            .metadata()
            .map_err(|_| CUresult::CUDA_ERROR_OUT_OF_MEMORY)?;
        let id = FileId {
            fd: file.as_raw_fd(),
            inode: metadata.ino(),
            device: metadata.dev(),
        };
        *shared = Some(SharedFile { _file: file, id });
        Ok(id)
    }

    /// Where stream operations find the bytes.
    pub fn data(&self) -> usize {
        self.data
    }

    /// The host's pointer to the bytes, for host-accessible memory.
    pub fn host_address(&self) -> Option<usize> {
        match &self.host {
            HostView::None => None,
            HostView::Same | HostView::Registered => Some(self.data),
            HostView::Separate { address, .. } => Some(*address),
        }
    }

    /// A stream operation on the bytes was enqueued: the host may not touch a separate view.
    pub fn begin_device_use(&self) {
        if let HostView::Separate { address, state } = &self.host {
            let mut state = state.lock();
            state.users += 1;
            if state.users == 1 && !state.revoked {
                protect(*address, self.len, libc::PROT_NONE);
            }
        }
    }

    /// A stream operation on the bytes completed.
    pub fn end_device_use(&self) {
        if let HostView::Separate { address, state } = &self.host {
            let mut state = state.lock();
            state.users -= 1;
            if state.users == 0 && !state.revoked {
                protect(*address, self.len, libc::PROT_READ | libc::PROT_WRITE);
            }
        }
    }

    /// The allocation was freed: the host's view becomes inaccessible for good, and its pages go.
    pub fn revoke(&self) {
        let host = match &self.host {
            HostView::None | HostView::Registered => return,
            HostView::Same => self.data,
            HostView::Separate { address, state } => {
                state.lock().revoked = true;
                *address
            }
        };
        // SAFETY: the host view is this storage's own mapping; its record is freed, and the
        // caller holds the record's state for writing, so no stream operation is inside it.
        unsafe { libc::madvise(host as *mut _, self.len, libc::MADV_DONTNEED) };
        protect(host, self.len, libc::PROT_NONE);
    }
}

impl Drop for Storage {
    fn drop(&mut self) {
        // The host's view (when there is one) stays mapped, inaccessible, so that its address is
        // not reused; the bytes only stream operations used are unmapped.
        if matches!(self.host, HostView::Same | HostView::Registered) {
            return;
        }
        // The last record holding the storage is gone.
        unmap(self.data, self.len);
    }
}
