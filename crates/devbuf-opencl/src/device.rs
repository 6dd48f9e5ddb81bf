//! Discovery: the loader, its platforms and devices, and how devbuf can use each device.

use std::sync::OnceLock;

use devbuf_core::{DeviceInfo, MemKind};
use opencl3::device::{
    CL_DEVICE_SVM_COARSE_GRAIN_BUFFER, CL_DEVICE_SVM_FINE_GRAIN_BUFFER, CL_DEVICE_TYPE_ALL, Device,
};
use opencl3::error_codes::CL_PLATFORM_NOT_FOUND_KHR;
use opencl3::platform::{Platform, get_platforms};

use crate::usm_entry_points::{
    CL_DEVICE_DEVICE_MEM_CAPABILITIES_INTEL, CL_DEVICE_HOST_MEM_CAPABILITIES_INTEL,
    CL_DEVICE_SINGLE_DEVICE_SHARED_MEM_CAPABILITIES_INTEL, UsmApi, UsmFree,
};

/// The backend's name and the first part of its selectors ("opencl:0:0").
pub const OPENCL: &str = "opencl";

const USM_EXTENSION: &str = "cl_intel_unified_shared_memory";

/// How devbuf allocates on a device.
#[derive(Debug, Clone, Copy)]
pub enum Memory {
    /// Intel USM through the platform's extension functions, freed as the platform needs.
    Usm(UsmApi, UsmFree),
    /// Core SVM buffers: coarse-grained as `device`, fine-grained as `shared`.
    Svm,
    /// Neither: the device is listed, but devbuf cannot allocate on it.
    None,
}

/// One device as discovered.
#[derive(Debug)]
pub struct DeviceEntry {
    pub device: Device,
    pub info: DeviceInfo,
    pub memory: Memory,
}

/// Every device of every platform, in loader order, or why there are none. Discovered once per
/// process: the ICD loader reads its configuration once too.
pub fn devices() -> &'static Result<Vec<DeviceEntry>, String> {
    static DEVICES: OnceLock<Result<Vec<DeviceEntry>, String>> = OnceLock::new();
    DEVICES.get_or_init(discover)
}

fn discover() -> Result<Vec<DeviceEntry>, String> {
    if let Err(err) = cl3::load_library() {
        return Err(format!(
            "cannot load libOpenCL.so.1 (the ICD loader): {err}"
        ));
    }
    let platforms = match get_platforms() {
        Ok(platforms) if !platforms.is_empty() => platforms,
        Ok(_) => return Err(no_platform_reason()),
        Err(err) if err.0 == CL_PLATFORM_NOT_FOUND_KHR => return Err(no_platform_reason()),
        Err(err) => return Err(format!("clGetPlatformIDs failed: {err}")),
    };
    let mut entries = Vec::new();
    for (platform_index, platform) in platforms.iter().enumerate() {
        // A platform without devices answers CL_DEVICE_NOT_FOUND: it simply adds none.
        let ids = platform.get_devices(CL_DEVICE_TYPE_ALL).unwrap_or_default();
        for (device_index, id) in ids.into_iter().enumerate() {
            let index = u32::try_from(entries.len()).unwrap_or(u32::MAX);
            entries.push(describe(
                platform,
                Device::new(id),
                index,
                format!("{OPENCL}:{platform_index}:{device_index}"),
            ));
        }
    }
    if entries.is_empty() {
        return Err(format!(
            "the OpenCL platforms ({}) list no devices",
            platforms
                .iter()
                .map(|platform| platform.name().unwrap_or_default())
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    Ok(entries)
}

fn no_platform_reason() -> String {
    "the ICD loader found no OpenCL platform (CL_PLATFORM_NOT_FOUND_KHR): is an ICD registered \
     (OCL_ICD_VENDORS, OCL_ICD_FILENAMES, /etc/OpenCL/vendors)?"
        .into()
}

fn describe(platform: &Platform, device: Device, index: u32, selector: String) -> DeviceEntry {
    let (memory, kinds, unusable_reason) = memory_of(platform, &device);
    DeviceEntry {
        info: DeviceInfo {
            backend: OPENCL,
            index,
            name: device.name().unwrap_or_default(),
            vendor: device.vendor().unwrap_or_default(),
            driver: device.driver_version().unwrap_or_default(),
            selector,
            global_mem_bytes: device.global_mem_size().unwrap_or(0),
            kinds,
            unusable_reason,
            test_double: None,
        },
        device,
        memory,
    }
}

/// Intel USM where the device lists it (each kind it has capabilities for), else SVM buffers,
/// else nothing, with the reason.
fn memory_of(platform: &Platform, device: &Device) -> (Memory, Vec<MemKind>, Option<String>) {
    let extensions = device.extensions().unwrap_or_default();
    let mut reasons = Vec::new();
    if extensions
        .split_whitespace()
        .any(|ext| ext == USM_EXTENSION)
    {
        match UsmApi::load(platform.id()) {
            Ok(api) => {
                let kinds: Vec<_> = [
                    (MemKind::Host, CL_DEVICE_HOST_MEM_CAPABILITIES_INTEL),
                    (MemKind::Device, CL_DEVICE_DEVICE_MEM_CAPABILITIES_INTEL),
                    (
                        MemKind::Shared,
                        CL_DEVICE_SINGLE_DEVICE_SHARED_MEM_CAPABILITIES_INTEL,
                    ),
                ]
                .into_iter()
                .filter(|&(_, query)| usm_capabilities(device, query) != 0)
                .map(|(kind, _)| kind)
                .collect();
                if !kinds.is_empty() {
                    let free = UsmFree::for_platform(&platform.version().unwrap_or_default());
                    return (Memory::Usm(api, free), kinds, None);
                }
                reasons.push(format!("{USM_EXTENSION} reports no USM capabilities"));
            }
            Err(why) => reasons.push(format!("{USM_EXTENSION} is listed, but {why}")),
        }
    } else {
        reasons.push(format!("no {USM_EXTENSION}"));
    }
    let svm = device.svm_mem_capability();
    let kinds: Vec<_> = [
        (MemKind::Device, CL_DEVICE_SVM_COARSE_GRAIN_BUFFER),
        (MemKind::Shared, CL_DEVICE_SVM_FINE_GRAIN_BUFFER),
    ]
    .into_iter()
    .filter(|&(_, capability)| svm & capability != 0)
    .map(|(kind, _)| kind)
    .collect();
    if !kinds.is_empty() {
        return (Memory::Svm, kinds, None);
    }
    reasons.push("no SVM buffers (CL_DEVICE_SVM_CAPABILITIES)".into());
    (Memory::None, Vec::new(), Some(reasons.join(", ")))
}

/// A `cl_device_unified_shared_memory_capabilities_intel` bitfield (0 when the query fails).
fn usm_capabilities(device: &Device, query: u32) -> u64 {
    match cl3::device::get_device_data(device.id(), query) {
        Ok(bytes) => bytes
            .get(..8)
            .and_then(|bytes| bytes.try_into().ok())
            .map_or(0, u64::from_ne_bytes),
        Err(_) => 0,
    }
}
