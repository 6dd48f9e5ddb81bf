//! `cuInit`, the driver version and the devices: their names, attributes and memory.

use std::cell::Cell;
use std::ffi::c_char;
use std::sync::atomic::{AtomicBool, Ordering};

use cudarc::driver::sys::{CUdevice, CUdevice_attribute as A, CUresult, CUuuid};

use crate::config::{config, device_count, physical, uuid};
use crate::errors::{DriverResult, boundary, write_out};

static INITIALIZED: AtomicBool = AtomicBool::new(false);

/// CUDA_ERROR_NOT_INITIALIZED until `cuInit` succeeded.
pub(crate) fn initialized() -> DriverResult {
    if INITIALIZED.load(Ordering::Acquire) {
        Ok(())
    } else {
        Err(CUresult::CUDA_ERROR_NOT_INITIALIZED)
    }
}

thread_local! {
    /// Whether this thread is running a host function or stream callback now.
    static IN_HOST_FUNCTION: Cell<bool> = const { Cell::new(false) };
}

/// Runs a host function (`cuLaunchHostFunc`) or stream callback (`cuStreamAddCallback`): the
/// driver refuses calls from it. cuStreamAddCallback: "Callbacks must not make any CUDA API calls.
/// Attempting to use a CUDA API will result in CUDA_ERROR_NOT_PERMITTED." (cuLaunchHostFunc: "may
/// result in CUDA_ERROR_NOT_PERMITTED, but this is not required"; the double always does.)
///
/// They run one at a time, whichever streams they are on: cuLaunchHostFunc, "Host functions
/// without a mandated order (such as in independent streams) execute in undefined order and may be
/// serialized" (a GPU's driver runs them on one thread), so a host function that waits for another
/// stream's host function never returns on a GPU, and not here either.
pub(crate) fn run_host_function(function: impl FnOnce()) {
    static ONE_AT_A_TIME: parking_lot::Mutex<()> = parking_lot::Mutex::new(());
    let _serialized = ONE_AT_A_TIME.lock();
    IN_HOST_FUNCTION.set(true);
    function();
    IN_HOST_FUNCTION.set(false);
}

/// Runs an entry point that needs `cuInit` first (and is not called from a host function).
pub(crate) fn entry(name: &'static str, body: impl FnOnce() -> DriverResult) -> CUresult {
    boundary(name, || {
        initialized()?;
        if IN_HOST_FUNCTION.get() {
            return Err(CUresult::CUDA_ERROR_NOT_PERMITTED);
        }
        body()
    })
}

/// The device `device` names, as an ordinal; CUDA_ERROR_INVALID_DEVICE when there is none.
pub(crate) fn ordinal(device: CUdevice) -> DriverResult<usize> {
    usize::try_from(device)
        .ok()
        .filter(|&ordinal| ordinal < device_count() as usize)
        .ok_or(CUresult::CUDA_ERROR_INVALID_DEVICE)
}

#[unsafe(no_mangle)]
pub extern "C" fn cuInit(flags: u32) -> CUresult {
    boundary("cuInit", || {
        if flags != 0 {
            return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
        }
        let config = config();
        if let Some(error) = &config.error {
            eprintln!("devbuf CUDA test driver: cuInit fails: {error}");
            return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
        }
        if let Some(code) = config.init_error {
            return Err(code);
        }
        if device_count() == 0 {
            return Err(CUresult::CUDA_ERROR_NO_DEVICE);
        }
        INITIALIZED.store(true, Ordering::Release);
        Ok(())
    })
}

/// # Safety
/// `version` is null or valid for writing an int.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDriverGetVersion(version: *mut i32) -> CUresult {
    // SAFETY: the caller's out-pointer.
    boundary("cuDriverGetVersion", || unsafe {
        write_out(version, config().driver_version)
    })
}

/// # Safety
/// `count` is null or valid for writing an int.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDeviceGetCount(count: *mut i32) -> CUresult {
    // SAFETY: the caller's out-pointer.
    entry("cuDeviceGetCount", || unsafe {
        write_out(count, device_count() as i32)
    })
}

/// # Safety
/// `device` is null or valid for writing a CUdevice.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDeviceGet(device: *mut CUdevice, ordinal: i32) -> CUresult {
    entry("cuDeviceGet", || {
        let found = self::ordinal(ordinal)?;
        // SAFETY: the caller's out-pointer.
        unsafe { write_out(device, found as CUdevice) }
    })
}

/// The name every device has, so that no output can be mistaken for a GPU's.
pub(crate) fn device_name(ordinal: usize) -> String {
    format!("devbuf CUDA test driver (device {ordinal})")
}

/// # Safety
/// `name` is valid for writing `len` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDeviceGetName(
    name: *mut c_char,
    len: i32,
    device: CUdevice,
) -> CUresult {
    entry("cuDeviceGetName", || {
        let text = device_name(ordinal(device)?);
        if name.is_null() || len <= 0 {
            return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
        }
        // Truncated to fit, always NUL-terminated, as the real driver does.
        let copied = text.len().min(len as usize - 1);
        // SAFETY: `name` holds `len` > `copied` bytes (the caller's contract).
        unsafe {
            std::ptr::copy_nonoverlapping(text.as_ptr().cast(), name, copied);
            name.add(copied).write(0);
        }
        Ok(())
    })
}

/// # Safety
/// `bytes` is null or valid for writing a size_t.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDeviceTotalMem_v2(bytes: *mut usize, device: CUdevice) -> CUresult {
    entry("cuDeviceTotalMem", || {
        ordinal(device)?;
        // SAFETY: the caller's out-pointer.
        unsafe { write_out(bytes, config().total_memory as usize) }
    })
}

/// The largest pitch a 2-D copy takes (`CU_DEVICE_ATTRIBUTE_MAX_PITCH`), what an H100 and an
/// H200 report.
pub(crate) const MAX_PITCH: usize = i32::MAX as usize;

/// Device `ordinal`'s answer for `attribute`; `None` for numbers the driver does not know.
pub(crate) fn attribute(attribute: u32, ordinal: usize) -> Option<i32> {
    if attribute == 0 || attribute >= ATTRIBUTE_LIMIT {
        return None;
    }
    let config = config();
    let is = |known: A| attribute == known as u32;
    let value = if is(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR) {
        9
    } else if is(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR) {
        0
    } else if is(A::CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS) {
        config.concurrent_managed_access as i32
    } else if is(A::CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED) {
        config.memory_pools as i32
    } else if is(A::CU_DEVICE_ATTRIBUTE_PCI_BUS_ID) {
        pci_bus(physical(ordinal))
    } else if is(A::CU_DEVICE_ATTRIBUTE_WARP_SIZE) {
        32
    } else if is(A::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT) {
        4
    } else if is(A::CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK)
        || is(A::CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X)
        || is(A::CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y)
    {
        1024
    } else if is(A::CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z) {
        64
    } else if is(A::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X) {
        i32::MAX
    } else if is(A::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y) || is(A::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z)
    {
        65535
    } else if is(A::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK) {
        48 << 10
    } else if is(A::CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR) {
        2048
    } else if is(A::CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT) {
        2
    } else if is(A::CU_DEVICE_ATTRIBUTE_MAX_PITCH) {
        MAX_PITCH as i32
    } else if is(A::CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT) {
        512
    } else if is(A::CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES) {
        0
    } else if is(A::CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING)
        || is(A::CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY)
        || is(A::CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY)
        || is(A::CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS)
        || is(A::CU_DEVICE_ATTRIBUTE_GPU_OVERLAP)
        || is(A::CU_DEVICE_ATTRIBUTE_STREAM_PRIORITIES_SUPPORTED)
        || is(A::CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM)
    {
        1
    } else {
        // Everything the double does not model: no texture, surface, peer, IPC event or kernel
        // features, no pageable-memory access by the device.
        0
    };
    Some(value)
}

/// The first attribute the driver does not know: `CU_DEVICE_ATTRIBUTE_MAX` of CUDA 13.0 (newer
/// bindings ask for attributes cudarc's 12.8 list lacks, and the real driver answers every one
/// below it); for the `old-driver` build, CUDA 11.1's, which ends before
/// `CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED` (115).
const ATTRIBUTE_LIMIT: u32 = if cfg!(feature = "old-driver") {
    115
} else {
    148
};

/// # Safety
/// `value` is null or valid for writing an int.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDeviceGetAttribute(
    value: *mut i32,
    attribute_number: u32,
    device: CUdevice,
) -> CUresult {
    entry("cuDeviceGetAttribute", || {
        let answer = attribute(attribute_number, ordinal(device)?)
            .ok_or(CUresult::CUDA_ERROR_INVALID_VALUE)?;
        // SAFETY: the caller's out-pointer.
        unsafe { write_out(value, answer) }
    })
}

/// # Safety
/// `major` and `minor` are null or valid for writing an int.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDeviceComputeCapability(
    major: *mut i32,
    minor: *mut i32,
    device: CUdevice,
) -> CUresult {
    entry("cuDeviceComputeCapability", || {
        let ordinal = ordinal(device)?;
        let capability = |which: A| attribute(which as u32, ordinal).unwrap_or(0);
        // SAFETY: the caller's out-pointers.
        unsafe {
            write_out(
                major,
                capability(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR),
            )?;
            write_out(
                minor,
                capability(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR),
            )
        }
    })
}

/// # Safety
/// `out` is null or valid for writing a CUuuid.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDeviceGetUuid(out: *mut CUuuid, device: CUdevice) -> CUresult {
    entry("cuDeviceGetUuid", || {
        // The machine's device's, not the ordinal's: the same device has the same UUID in every
        // process, whatever its ordinal under CUDA_VISIBLE_DEVICES.
        let bytes = uuid(physical(ordinal(device)?));
        let value = CUuuid {
            bytes: bytes.map(|byte| byte as c_char),
        };
        // SAFETY: the caller's out-pointer.
        unsafe { write_out(out, value) }
    })
}

/// # Safety
/// As for [`cuDeviceGetUuid`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDeviceGetUuid_v2(uuid: *mut CUuuid, device: CUdevice) -> CUresult {
    // SAFETY: the same contract.
    unsafe { cuDeviceGetUuid(uuid, device) }
}

/// The PCI bus of the machine's device `physical`: distinct, plausible bus numbers (the domain,
/// device and function are 0). A property of the device, as its UUID is, whatever its ordinal in a
/// process under `CUDA_VISIBLE_DEVICES`: numba-cuda finds the device of an IPC handle another
/// process exported by its PCI domain, bus and device.
fn pci_bus(physical: u32) -> i32 {
    0x10 + physical as i32
}

/// The (domain, bus, device, function) a PCI bus id string names, in one of the forms
/// `cuDeviceGetByPCIBusId` documents: "[domain]:[bus]:[device].[function] [domain]:[bus]:[device]
/// [bus]:[device].[function] where domain, bus, device, and function are all hexadecimal values".
/// `None` for anything else.
fn parse_pci_bus_id(text: &str) -> Option<(u32, u32, u32, u32)> {
    let hex = |part: &str| {
        (!part.is_empty() && part.chars().all(|c| c.is_ascii_hexdigit()))
            .then(|| u32::from_str_radix(part, 16).ok())
            .flatten()
    };
    let parts: Vec<&str> = text.split(':').collect();
    let (domain, bus, slot) = match parts.as_slice() {
        [domain, bus, slot] => (hex(domain)?, hex(bus)?, *slot),
        [bus, slot] if slot.contains('.') => (0, hex(bus)?, *slot),
        _ => return None,
    };
    let (device, function) = match slot.split_once('.') {
        Some((device, function)) => (hex(device)?, hex(function)?),
        None => (hex(slot)?, 0),
    };
    Some((domain, bus, device, function))
}

/// cuDeviceGetByPCIBusId: "Returns in *dev a device handle given a PCI bus ID string", of the
/// devices this process sees. A string in none of the documented forms (or NULL) is
/// CUDA_ERROR_INVALID_VALUE; one no visible device has, CUDA_ERROR_INVALID_DEVICE (both among the
/// documented codes; which one the driver gives for an absent device is the double's reading).
///
/// # Safety
/// `device` is null or valid for writing a CUdevice; `bus_id` is null or a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDeviceGetByPCIBusId(
    device: *mut CUdevice,
    bus_id: *const c_char,
) -> CUresult {
    entry("cuDeviceGetByPCIBusId", || {
        if bus_id.is_null() {
            return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
        }
        // SAFETY: a NUL-terminated string (the caller's contract).
        let text = unsafe { std::ffi::CStr::from_ptr(bus_id) };
        let named = text
            .to_str()
            .ok()
            .and_then(parse_pci_bus_id)
            .ok_or(CUresult::CUDA_ERROR_INVALID_VALUE)?;
        let found = (0..device_count() as usize)
            .find(|&ordinal| named == (0, pci_bus(physical(ordinal)) as u32, 0, 0))
            .ok_or(CUresult::CUDA_ERROR_INVALID_DEVICE)?;
        // SAFETY: the caller's out-pointer.
        unsafe { write_out(device, found as CUdevice) }
    })
}

/// # Safety
/// `bus_id` is valid for writing `len` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDeviceGetPCIBusId(
    bus_id: *mut c_char,
    len: i32,
    device: CUdevice,
) -> CUresult {
    entry("cuDeviceGetPCIBusId", || {
        let ordinal = ordinal(device)?;
        let bus = attribute(A::CU_DEVICE_ATTRIBUTE_PCI_BUS_ID as u32, ordinal).unwrap_or(0);
        let text = format!("0000:{bus:02x}:00.0");
        if bus_id.is_null() || len <= 0 {
            return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
        }
        let copied = text.len().min(len as usize - 1);
        // SAFETY: `bus_id` holds `len` > `copied` bytes (the caller's contract).
        unsafe {
            std::ptr::copy_nonoverlapping(text.as_ptr().cast(), bus_id, copied);
            bus_id.add(copied).write(0);
        }
        Ok(())
    })
}
