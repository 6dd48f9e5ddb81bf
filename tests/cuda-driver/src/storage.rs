//! Where an allocation's bytes live, and what the host may touch.
//!
//! Device memory's bytes are a private mapping only stream operations touch (the host's pointer
//! is in the `PROT_NONE` reservation). Pinned and managed memory are host mappings at the
//! user's pointer, made inaccessible when freed but never unmapped, so that the address is not
//! reused. Managed memory of a device without concurrent managed access
//! (`DEVBUF_CUDA_TEST_CONCURRENT_MANAGED_ACCESS=0`) is two mappings of the same pages: the host's,
//! which is inaccessible while stream work on the allocation is pending (a host access then
//! faults, as on such a device), and the one stream operations use.

use std::sync::Arc;

use cudarc::driver::sys::CUresult;
use parking_lot::Mutex;

use crate::errors::DriverResult;

pub(crate) struct Storage {
    /// The bytes stream operations touch.
    data: usize,
    len: usize,
    host: HostView,
}

enum HostView {
    /// Device memory: the host has no view.
    None,
    /// Pinned or managed memory: the host's pointer is `data` itself.
    Same,
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

fn protect(address: usize, len: usize, protection: i32) {
    // SAFETY: the range is one of a storage's own mappings.
    unsafe { libc::mprotect(address as *mut _, len, protection) };
}

impl Storage {
    /// Bytes for device memory.
    pub fn device(len: usize) -> DriverResult<Arc<Storage>> {
        let len = len.max(1);
        let data = map(len, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1)?;
        Ok(Arc::new(Storage {
            data,
            len,
            host: HostView::None,
        }))
    }

    /// Host-accessible bytes (pinned or managed memory).
    pub fn host(len: usize) -> DriverResult<Arc<Storage>> {
        let len = len.max(1);
        let data = map(len, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1)?;
        Ok(Arc::new(Storage {
            data,
            len,
            host: HostView::Same,
        }))
    }

    /// Managed bytes the host may touch only while no stream work on them is pending.
    pub fn managed_without_concurrent_access(len: usize) -> DriverResult<Arc<Storage>> {
        let len = len.max(1);
        // SAFETY: a NUL-terminated name; the descriptor is closed below, the mappings keep the
        // pages.
        let fd = unsafe { libc::memfd_create(c"devbuf-cuda-test-managed".as_ptr(), 0) };
        if fd < 0 {
            return Err(CUresult::CUDA_ERROR_OUT_OF_MEMORY);
        }
        // SAFETY: our own descriptor.
        let sized = unsafe { libc::ftruncate(fd, len as libc::off_t) } == 0;
        let views = if sized {
            map(len, libc::MAP_SHARED, fd)
                .and_then(|data| Ok((data, map(len, libc::MAP_SHARED, fd)?)))
        } else {
            Err(CUresult::CUDA_ERROR_OUT_OF_MEMORY)
        };
        // SAFETY: our own descriptor, no longer needed once mapped.
        unsafe { libc::close(fd) };
        let (data, address) = views?;
        Ok(Arc::new(Storage {
            data,
            len,
            host: HostView::Separate {
                address,
                state: Mutex::default(),
            },
        }))
    }

    /// Where stream operations find the bytes.
    pub fn data(&self) -> usize {
        self.data
    }

    /// The host's pointer to the bytes, for host-accessible memory.
    pub fn host_address(&self) -> Option<usize> {
        match &self.host {
            HostView::None => None,
            HostView::Same => Some(self.data),
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
            HostView::None => return,
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
        if matches!(self.host, HostView::Same) {
            return;
        }
        // SAFETY: the mapping is this storage's own and nothing refers to it any more (the last
        // record holding it is gone).
        unsafe { libc::munmap(self.data as *mut _, self.len) };
    }
}
