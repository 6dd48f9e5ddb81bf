//! What a device can do: its [`DeviceInfo`] and whether its stream-ordered memory pool can be used.

use std::ffi::{CStr, c_char};

use cudarc::driver::sys::{self, CUdevice, CUdevice_attribute};
use devbuf_core::{DeviceInfo, MemKind};

use crate::loader::{BACKEND, Driver, DriverError, call};

/// How the CUDA driver test double (tests/cuda-driver) names every device it shows.
const TEST_DRIVER_NAME: &str = "devbuf CUDA test driver";

/// What devbuf needs to know about one device.
#[derive(Debug, Clone)]
pub(crate) struct DeviceCaps {
    pub info: DeviceInfo,
    /// Whether device memory comes from the device's stream-ordered pool.
    pub memory_pools: bool,
    /// Whether pinned host memory can be mapped into the device's address space.
    pub can_map_host_memory: bool,
    /// Whether the host may touch managed memory while work runs on the device.
    pub concurrent_managed_access: bool,
    /// The device's UUID as nvidia-smi and `CUDA_VISIBLE_DEVICES` write it (`GPU-…`): the same in
    /// every process, where the ordinal depends on each process's `CUDA_VISIBLE_DEVICES`.
    pub uuid: String,
}

/// Device `device`'s UUID (`cuDeviceGetUuid`), written as nvidia-smi writes it: `GPU-` and 32 hex
/// digits in groups of 8, 4, 4, 4 and 12.
fn uuid(device: CUdevice) -> Result<String, DriverError> {
    let mut uuid = sys::CUuuid { bytes: [0; 16] };
    // SAFETY: `uuid` is a valid out-pointer.
    call("cuDeviceGetUuid", || unsafe {
        sys::cuDeviceGetUuid(&mut uuid, device)
    })?;
    let bytes = uuid.bytes.map(|byte| byte as u8);
    let hex = |group: &[u8]| -> String { group.iter().map(|byte| format!("{byte:02x}")).collect() };
    Ok(format!(
        "GPU-{}-{}-{}-{}-{}",
        hex(&bytes[..4]),
        hex(&bytes[4..6]),
        hex(&bytes[6..8]),
        hex(&bytes[8..10]),
        hex(&bytes[10..])
    ))
}

/// The ordinal of the device whose UUID is `wanted` (`GPU-…`, any case) among those this process
/// sees; `None` when none has it.
pub(crate) fn ordinal_with_uuid(driver: &Driver, wanted: &str) -> Result<Option<u32>, DriverError> {
    for ordinal in 0..driver.device_count {
        let mut device: CUdevice = 0;
        // SAFETY: `device` is a valid out-pointer; the ordinal is below the device count.
        call("cuDeviceGet", || unsafe {
            sys::cuDeviceGet(&mut device, ordinal as i32)
        })?;
        if uuid(device)?.eq_ignore_ascii_case(wanted) {
            return Ok(Some(ordinal));
        }
    }
    Ok(None)
}

/// Queries device `ordinal`; needs no context.
pub(crate) fn query(driver: &Driver, ordinal: u32) -> Result<DeviceCaps, DriverError> {
    let mut device: CUdevice = 0;
    // SAFETY: `device` is a valid out-pointer; a bad ordinal is an error code.
    call("cuDeviceGet", || unsafe {
        sys::cuDeviceGet(&mut device, ordinal as i32)
    })?;
    let mut name = [0 as c_char; 256];
    // SAFETY: the driver writes at most `len` bytes, NUL included, into `name`.
    call("cuDeviceGetName", || unsafe {
        sys::cuDeviceGetName(name.as_mut_ptr(), name.len() as i32, device)
    })?;
    // SAFETY: the driver NUL-terminated the name within the buffer.
    let name = unsafe { CStr::from_ptr(name.as_ptr()) }
        .to_string_lossy()
        .into_owned();
    let mut total = 0;
    // SAFETY: `total` is a valid out-pointer.
    call("cuDeviceTotalMem", || unsafe {
        sys::cuDeviceTotalMem_v2(&mut total, device)
    })?;
    let attribute = |attribute| -> Result<i32, DriverError> {
        let mut value = 0;
        // SAFETY: `value` is a valid out-pointer; an attribute unknown to an old driver is an
        // error code.
        call("cuDeviceGetAttribute", || unsafe {
            sys::cuDeviceGetAttribute(&mut value, attribute, device)
        })?;
        Ok(value)
    };
    let uuid = uuid(device)?;
    let unified_addressing =
        attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING)? != 0;
    let managed = attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY)? != 0;
    let can_map_host_memory =
        attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY)? != 0;
    let concurrent_managed_access =
        attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS)? != 0;
    // Drivers older than 11.2 do not know the attribute: no pools there.
    let memory_pools = driver.stream_ordered_allocator
        && attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED)
            .is_ok_and(|supported| supported != 0);

    let (kinds, unusable_reason) = if unified_addressing {
        let mut kinds = vec![MemKind::Host, MemKind::Device];
        if managed {
            kinds.push(MemKind::Shared);
        }
        (kinds, None)
    } else {
        (
            vec![],
            Some(
                "the device lacks unified addressing, which devbuf needs to copy between any two \
                 pointers"
                    .into(),
            ),
        )
    };
    // The driver names no vendor. Its test double (tests/cuda-driver) names its devices so, and
    // must never pass for NVIDIA hardware in any listing.
    let test_double = name.starts_with(TEST_DRIVER_NAME).then(|| {
        format!(
            "{TEST_DRIVER_NAME} (devbuf's tests/cuda-driver), a test double of libcuda: not a GPU"
        )
    });
    let vendor = if test_double.is_some() {
        "devbuf test double"
    } else {
        "NVIDIA"
    };
    Ok(DeviceCaps {
        info: DeviceInfo {
            backend: BACKEND,
            index: ordinal,
            name,
            vendor: vendor.into(),
            driver: format!("CUDA {}", driver.cuda_version()),
            selector: format!("{BACKEND}:{ordinal}"),
            global_mem_bytes: total as u64,
            kinds,
            unusable_reason,
            test_double,
        },
        memory_pools,
        can_map_host_memory,
        concurrent_managed_access,
        uuid,
    })
}
