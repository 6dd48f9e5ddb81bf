//! CUDA IPC of device memory: `cuIpcGetMemHandle`, `cuIpcOpenMemHandle(_v2)` and
//! `cuIpcCloseMemHandle`.
//!
//! Only `cuMemAlloc`'s memory has a handle (the real driver answers pinned, managed and
//! stream-ordered memory with CUDA_ERROR_INVALID_VALUE). An interior pointer gets the handle of
//! the allocation that contains it, as the real driver's does, although its documentation asks for
//! the base. The handle names the exporting process, the descriptor of the file its bytes are in
//! (see [`crate::storage`]) and that file's identity; the importer opens the file through
//! `/proc/<pid>/fd/<fd>`, checks that it is the same one, and maps its pages at fresh device
//! addresses: both processes' copies and fills then touch the same bytes. When the exporter frees
//! the allocation (or exits) the file closes, and the handle no longer opens:
//! CUDA_ERROR_INVALID_VALUE, as for bytes the double did not make (the driver documents no code
//! for a stale handle).
//!
//! Opening a handle in the process that exported it is CUDA_ERROR_INVALID_CONTEXT, as on the real
//! driver. Opening one that is already open in the current context returns the same pointer and
//! counts the open; `cuIpcCloseMemHandle` unmaps it when the count reaches 0.
//!
//! Between devices (cuIpcOpenMemHandle): "For contexts on different devices cuIpcOpenMemHandle can
//! attempt to enable peer access between the devices as if the user called cuCtxEnablePeerAccess
//! ... cuDeviceCanAccessPeer can determine if a mapping is possible", and it "can open handles to
//! devices that may not be visible in the process": the handle names the machine's device, and a
//! context of another device opens it only where the two are peers (else CUDA_ERROR_MAP_FAILED,
//! the double's choice among the documented codes). "CUipcMemHandles from each CUdevice in a
//! given process may only be opened by one CUcontext per CUdevice per other process": while
//! handles of one exporter's device are open in one context, another context of the same device
//! gets CUDA_ERROR_INVALID_CONTEXT (the double's choice among the documented codes).

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::MetadataExt;
use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock};

use cudarc::driver::sys::{CUdeviceptr, CUipcMemHandle, CUresult};
use parking_lot::Mutex;

use crate::config::physical;
use crate::context::{self, Context};
use crate::device::entry;
use crate::errors::{DriverResult, write_out};
use crate::memory::{self, Kind, Origin, Record, State};
use crate::peer;
use crate::storage::FileId;

/// Marks the double's handles, so that other bytes are refused.
const MAGIC: [u8; 8] = *b"devbufIP";
/// `CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS`: the documentation says the flags must be this.
const LAZY_ENABLE_PEER_ACCESS: u32 = 1;

/// What a `CUipcMemHandle` of the double holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Handle {
    pid: u32,
    file: FileId,
    size: u64,
    /// The allocation's buffer id in the exporting process.
    id: u64,
    /// The machine's device the memory is on (not the exporter's ordinal of it).
    device: u32,
}

impl Handle {
    fn encode(&self) -> CUipcMemHandle {
        let mut bytes = [0u8; 64];
        bytes[..8].copy_from_slice(&MAGIC);
        bytes[8..12].copy_from_slice(&self.pid.to_le_bytes());
        bytes[12..16].copy_from_slice(&self.file.fd.to_le_bytes());
        bytes[16..24].copy_from_slice(&self.file.inode.to_le_bytes());
        bytes[24..32].copy_from_slice(&self.file.device.to_le_bytes());
        bytes[32..40].copy_from_slice(&self.size.to_le_bytes());
        bytes[40..48].copy_from_slice(&self.id.to_le_bytes());
        bytes[48..52].copy_from_slice(&self.device.to_le_bytes());
        CUipcMemHandle {
            reserved: bytes.map(|byte| byte as _),
        }
    }

    /// The handle `raw` holds; `None` for bytes the double did not make.
    fn decode(raw: &CUipcMemHandle) -> Option<Handle> {
        let bytes = raw.reserved.map(|byte| byte as u8);
        let field = |at: usize| -> [u8; 8] { bytes[at..at + 8].try_into().expect("8 bytes") };
        let half = |at: usize| -> [u8; 4] { bytes[at..at + 4].try_into().expect("4 bytes") };
        let handle = Handle {
            pid: u32::from_le_bytes(half(8)),
            file: FileId {
                fd: i32::from_le_bytes(half(12)),
                inode: u64::from_le_bytes(field(16)),
                device: u64::from_le_bytes(field(24)),
            },
            size: u64::from_le_bytes(field(32)),
            id: u64::from_le_bytes(field(40)),
            device: u32::from_le_bytes(half(48)),
        };
        let valid = bytes[..8] == MAGIC && bytes[52..].iter().all(|&byte| byte == 0);
        (valid && handle.size > 0 && handle.file.fd >= 0).then_some(handle)
    }
}

/// A handle open in one of this process's contexts.
struct Mapping {
    record: Arc<Record>,
    context: &'static Context,
    opens: usize,
}

impl Mapping {
    /// False once closed for good or unmapped by its context's destruction.
    fn is_mapped(&self) -> bool {
        !self.record.free_requested.load(Ordering::Acquire)
            && *self.record.state.read() == State::Live
    }
}

/// The open handles, by handle and the context they are open in (its handle as a number).
fn mappings() -> &'static Mutex<HashMap<(Handle, usize), Mapping>> {
    static MAPPINGS: OnceLock<Mutex<HashMap<(Handle, usize), Mapping>>> = OnceLock::new();
    MAPPINGS.get_or_init(Mutex::default)
}

/// Opens the exporter's file and checks that it is the one the handle names: the exporter may
/// have exited, freed the allocation, or reused the descriptor.
fn open_file(handle: &Handle) -> DriverResult<File> {
    let path = format!("/proc/{}/fd/{}", handle.pid, handle.file.fd);
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .map_err(|_| CUresult::CUDA_ERROR_INVALID_VALUE)?;
    let metadata = file
        .metadata()
        .map_err(|_| CUresult::CUDA_ERROR_INVALID_VALUE)?;
    let same = metadata.ino() == handle.file.inode
        && metadata.dev() == handle.file.device
        && metadata.len() == handle.size;
    same.then_some(file)
        .ok_or(CUresult::CUDA_ERROR_INVALID_VALUE)
}

/// # Safety
/// `handle` is null or valid for writing a CUipcMemHandle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuIpcGetMemHandle(
    handle: *mut CUipcMemHandle,
    pointer: CUdeviceptr,
) -> CUresult {
    entry("cuIpcGetMemHandle", || {
        context::current()?;
        let record = memory::find(pointer)
            .filter(|record| record.kind == Kind::Device && record.origin == Origin::Allocated)
            .ok_or(CUresult::CUDA_ERROR_INVALID_VALUE)?;
        if handle.is_null() {
            return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
        }
        let file = {
            // Held for writing: no stream operation touches the bytes while they move.
            let state = record.state.write();
            if *state != State::Live {
                return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
            }
            record.storage.share()?
        };
        let exported = Handle {
            pid: std::process::id(),
            file,
            size: record.size as u64,
            id: record.id,
            device: physical(record.ordinal),
        };
        // SAFETY: the caller's out-pointer, checked non-null.
        unsafe { write_out(handle, exported.encode()) }
    })
}

/// # Safety
/// `pointer` is null or valid for writing a CUdeviceptr.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuIpcOpenMemHandle_v2(
    pointer: *mut CUdeviceptr,
    handle: CUipcMemHandle,
    flags: u32,
) -> CUresult {
    entry("cuIpcOpenMemHandle", || {
        let context = context::current()?;
        if pointer.is_null() || flags != LAZY_ENABLE_PEER_ACCESS {
            return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
        }
        let handle = Handle::decode(&handle).ok_or(CUresult::CUDA_ERROR_INVALID_VALUE)?;
        if handle.pid == std::process::id() {
            return Err(CUresult::CUDA_ERROR_INVALID_CONTEXT);
        }
        let here = physical(context.ordinal);
        if here != handle.device && !peer::machine_devices_are_peers(here, handle.device) {
            return Err(CUresult::CUDA_ERROR_MAP_FAILED);
        }
        let mut mappings = mappings().lock();
        mappings.retain(|_, mapping| mapping.is_mapped());
        let other_context_of_this_device = mappings.iter().any(|((open, _), mapping)| {
            open.pid == handle.pid
                && open.device == handle.device
                && mapping.context.ordinal == context.ordinal
                && !std::ptr::eq(mapping.context, context)
        });
        if other_context_of_this_device {
            return Err(CUresult::CUDA_ERROR_INVALID_CONTEXT);
        }
        let key = (handle, context.handle() as usize);
        let start = match mappings.get_mut(&key) {
            Some(mapping) => {
                mapping.opens += 1;
                mapping.record.start
            }
            None => {
                let size =
                    usize::try_from(handle.size).map_err(|_| CUresult::CUDA_ERROR_INVALID_VALUE)?;
                let record = memory::import(&open_file(&handle)?, size, context)?;
                let start = record.start;
                mappings.insert(
                    key,
                    Mapping {
                        record,
                        context,
                        opens: 1,
                    },
                );
                start
            }
        };
        // SAFETY: the caller's out-pointer, checked non-null.
        unsafe { write_out(pointer, start) }
    })
}

/// The name CUDA 4.1 to 10.2 programs link; the same arguments and behavior as `_v2` here.
///
/// # Safety
/// As for [`cuIpcOpenMemHandle_v2`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuIpcOpenMemHandle(
    pointer: *mut CUdeviceptr,
    handle: CUipcMemHandle,
    flags: u32,
) -> CUresult {
    // SAFETY: the same contract.
    unsafe { cuIpcOpenMemHandle_v2(pointer, handle, flags) }
}

/// Counts one close of an opened handle; the last unmaps it (a fault when stream work on it is
/// still queued, as for `cuMemFree`).
#[unsafe(no_mangle)]
pub extern "C" fn cuIpcCloseMemHandle(pointer: CUdeviceptr) -> CUresult {
    entry("cuIpcCloseMemHandle", || {
        let context = context::current()?;
        let mut mappings = mappings().lock();
        mappings.retain(|_, mapping| mapping.is_mapped());
        let (&key, mapping) = mappings
            .iter_mut()
            .find(|(_, mapping)| mapping.record.start == pointer)
            .ok_or(CUresult::CUDA_ERROR_INVALID_VALUE)?;
        mapping.opens -= 1;
        if mapping.opens > 0 {
            return Ok(());
        }
        let mapping = mappings.remove(&key).expect("found above");
        drop(mappings);
        memory::free_now(&mapping.record, "cuIpcCloseMemHandle", context)
    })
}
