//! CUDA IPC: device memory shared with other processes through `cuIpcGetMemHandle`, opened with
//! `cuIpcOpenMemHandle` and closed with `cuIpcCloseMemHandle`.
//!
//! Shareable memory comes from `cuMemAlloc`: memory from the default stream-ordered pool cannot be
//! exported through these calls. Only device memory can (pinned and managed memory have no IPC
//! handle). The driver refuses to open a handle in the process that exported it.
//!
//! IPC shares the whole driver block an allocation lies in (CUDA Programming Guide,
//! "Interprocess Communication": `cudaMalloc` may sub-allocate from a larger block, so "only share
//! allocations with a 2MiB aligned size"): each shareable allocation is rounded up to
//! [`IPC_BLOCK`], so that it owns its blocks and no other allocation of the exporter is reachable
//! through its handle. The cost: every shareable buffer takes at least 2 MiB of device memory (a
//! 4 KiB one, 512 times its size). The padding is zeroed, so it carries no stale bytes of this
//! process to the importer, and the handle's size is the whole allocation: what an importer can
//! reach anyway.
//!
//! A handle is untrusted input: its size is devbuf's claim beside the driver's bytes, so the
//! range the driver opened is checked against it (`cuMemGetAddressRange`) before any view exists.
//! The driver maps every IPC handle read-write (`cuIpcOpenMemHandle` has no read-only mode): a
//! read-only handle opens as a read-only buffer, which devbuf refuses to write, but nothing
//! stops another program that holds the same handle from writing.

use std::ptr::NonNull;
use std::sync::Arc;

use cudarc::driver::sys::{CUipcMemHandle, CUresult};
use devbuf_core::ipc::{self, IpcHandle, IpcSharing, OpenedAllocation, SharedAllocation};
use devbuf_core::{Error, MemKind, Owner, Queue, Result};

use crate::context::PrimaryContext;
use crate::loader::BACKEND;
use crate::memory::{self, CudaKind, DeviceAllocator};
use crate::queue::CudaQueue;

/// Bytes of a `CUipcMemHandle`.
const HANDLE_LEN: usize = 64;
/// The granularity CUDA IPC shares memory at (see the module docs).
pub(crate) const IPC_BLOCK: usize = 2 << 20;

/// Device memory from `cuMemAlloc` with its IPC handle; freed on drop.
#[derive(Debug)]
struct CudaSharedMemory {
    context: Arc<PrimaryContext>,
    ptr: NonNull<u8>,
    size: usize,
    handle: [u8; HANDLE_LEN],
}

// SAFETY: a device address and a retained context, both usable from any thread.
unsafe impl Send for CudaSharedMemory {}
// SAFETY: as above; shared references only read them.
unsafe impl Sync for CudaSharedMemory {}

impl Drop for CudaSharedMemory {
    fn drop(&mut self) {
        if let Ok(_current) = self.context.enter() {
            // Importers and other libraries' streams are not ordered with us: let the context
            // drain before the memory goes back to the driver.
            let _ = self.context.synchronize();
            let (ptr, null_stream) = (self.ptr.as_ptr() as usize, std::ptr::null_mut());
            // SAFETY: memory from cuMemAlloc (the synchronous allocator's) in this context,
            // freed once, after the context drained.
            let _ = unsafe {
                memory::free(
                    CudaKind::Device,
                    ptr,
                    DeviceAllocator::Synchronous,
                    self.context.raw(),
                    null_stream,
                )
            };
        }
    }
}

impl SharedAllocation for CudaSharedMemory {
    fn ptr(&self) -> NonNull<u8> {
        self.ptr
    }

    fn size(&self) -> usize {
        self.size
    }

    fn payload(&self) -> Result<Vec<u8>> {
        Ok(self.handle.to_vec())
    }

    /// Nothing to seal: the driver maps every IPC handle read-write (`cuIpcOpenMemHandle` takes
    /// no access flags), so a read-only handle is devbuf's promise only (see the module docs).
    fn seal_read_only(&self) -> Result<()> {
        Ok(())
    }
}

/// An opened handle's mapping, closed with `cuIpcCloseMemHandle` when the last view is gone.
struct OpenedMapping {
    context: Arc<PrimaryContext>,
    ptr: usize,
}

impl Drop for OpenedMapping {
    fn drop(&mut self) {
        if let Ok(_current) = self.context.enter() {
            // SAFETY: a mapping open_ipc_handle returned in this context, closed once.
            let _ = unsafe { memory::close_ipc_mapping(self.ptr) };
        }
    }
}

// SAFETY: `open` returns the mapping the driver made for the exported allocation (of
// `handle.size` bytes of device memory, in this queue's primary context), closed only when the
// owner drops.
unsafe impl IpcSharing for CudaQueue {
    fn allocate_shareable(&self, kind: MemKind, size: usize) -> Result<Arc<dyn SharedAllocation>> {
        if kind != MemKind::Device {
            return Err(ipc::unsupported(
                self.device(),
                format!("CUDA IPC shares device memory only, not {kind} memory"),
            ));
        }
        let requested = size;
        let size = size
            .checked_next_multiple_of(IPC_BLOCK)
            .ok_or_else(|| Error::OutOfMemory {
                kind,
                size,
                device: self.device().selector.clone(),
                reason: "the size rounded up to CUDA IPC's 2 MiB blocks overflows".into(),
            })?;
        let context = Arc::clone(self.context());
        let _current = context.enter()?;
        let address = memory::allocate_shareable(size).map_err(|err| Error::OutOfMemory {
            kind,
            size,
            device: self.device().selector.clone(),
            reason: err.to_string(),
        })?;
        let ptr = NonNull::new(address as *mut u8)
            .ok_or_else(|| Error::runtime(BACKEND, "cuMemAlloc", "the driver returned null"))?;
        // From here on, dropping `memory` frees the allocation.
        let mut memory = CudaSharedMemory {
            context: Arc::clone(&context),
            ptr,
            size,
            handle: [0; HANDLE_LEN],
        };
        // SAFETY: the padding lies inside the allocation just made, which nothing else uses yet;
        // the buffer's own work follows on the same stream.
        unsafe {
            self.fill(
                ptr.as_ptr().add(requested),
                0,
                size.saturating_sub(requested),
            )?
        };
        let handle = memory::ipc_handle(address)?;
        for (out, byte) in memory.handle.iter_mut().zip(handle.reserved) {
            *out = byte as u8;
        }
        Ok(Arc::new(memory))
    }

    /// `cuda:GPU-<uuid>`: an ordinal names another device in a process with another
    /// `CUDA_VISIBLE_DEVICES`, a UUID (`cuDeviceGetUuid`) the same one in all.
    fn stable_selector(&self) -> Result<Option<String>> {
        Ok(Some(format!("{BACKEND}:{}", self.uuid)))
    }

    fn open(&self, handle: &IpcHandle) -> Result<OpenedAllocation> {
        let bad = |message: String| Error::invalid("ipc_handle", message);
        if handle.kind != MemKind::Device || handle.payload.len() != HANDLE_LEN {
            return Err(bad(format!(
                "a CUDA handle is {HANDLE_LEN} bytes of device memory, not {} bytes of {}",
                handle.payload.len(),
                handle.kind
            )));
        }
        // SAFETY: an all-zero CUipcMemHandle is valid; its bytes are filled below.
        let mut raw: CUipcMemHandle = unsafe { std::mem::zeroed() };
        for (out, &byte) in raw.reserved.iter_mut().zip(&handle.payload) {
            *out = byte as _;
        }
        let context = Arc::clone(self.context());
        let _current = context.enter()?;
        let ptr = match memory::open_ipc_handle(raw) {
            Ok(ptr) => ptr,
            Err(err) if err.is(CUresult::CUDA_ERROR_INVALID_CONTEXT) => {
                return Err(bad(format!(
                    "{err} (CUDA opens a handle only in another process than the exporter's)"
                )));
            }
            Err(err) => {
                return Err(bad(format!(
                    "{err} (the exporter may have exited or freed the buffer)"
                )));
            }
        };
        // From here on, dropping `mapping` closes the handle.
        let mapping = OpenedMapping { context, ptr };
        // The handle's size is the exporter's claim, carried beside the driver's bytes: the
        // mapping must hold that many bytes, or views of it would reach unmapped device memory.
        let claimed = (ptr as usize)
            .checked_add(handle.size)
            .ok_or_else(|| bad(format!("size {} overflows the address space", handle.size)))?;
        match memory::address_range(ptr as usize)? {
            Some(range) if range.contains(&(ptr as usize)) && claimed <= range.end => {}
            found => {
                return Err(bad(format!(
                    "the handle claims {} bytes, but the memory it opens holds {}",
                    handle.size,
                    found.map_or_else(
                        || "an unknown number (the driver bounds no allocation there)".into(),
                        |range| format!("{}", range.end.saturating_sub(ptr as usize))
                    )
                )));
            }
        }
        let ptr = NonNull::new(ptr as *mut u8)
            .ok_or_else(|| Error::runtime(BACKEND, "cuIpcOpenMemHandle", "returned null"))?;
        Ok(OpenedAllocation {
            ptr,
            owner: Owner::keep_alive(mapping),
        })
    }
}

// SAFETY: a device address and a retained context, usable from any thread.
unsafe impl Send for OpenedMapping {}
// SAFETY: as above; shared references never touch them.
unsafe impl Sync for OpenedMapping {}
