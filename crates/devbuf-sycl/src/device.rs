//! SYCL devices: discovery through dpctl, and what devbuf reads of each ([`DeviceInfo`], the USM
//! kinds it can allocate, its default context and dpctl index).

use std::ffi::CString;

use devbuf_core::{DeviceInfo, Error, MemKind, Result};
use devbuf_sycl_sys as sys;

use crate::loader::Runtime;
use crate::loader::SYCL;
use crate::raw::{Device, take_devices};

/// The USM aspect that says whether a device can allocate each kind.
pub(crate) const USM_ASPECTS: [(MemKind, sys::DPCTLSyclAspectType, &str); 3] = [
    (
        MemKind::Host,
        sys::DPCTLSyclAspectType_usm_host_allocations,
        "usm_host_allocations",
    ),
    (
        MemKind::Device,
        sys::DPCTLSyclAspectType_usm_device_allocations,
        "usm_device_allocations",
    ),
    (
        MemKind::Shared,
        sys::DPCTLSyclAspectType_usm_shared_allocations,
        "usm_shared_allocations",
    ),
];

/// All root devices of every backend and type: dpctl's `get_devices()` list, whose positions are
/// dpctl's device indices.
const ALL_DEVICES: i32 =
    (sys::DPCTLSyclBackendType_DPCTL_ALL_BACKENDS | sys::DPCTLSyclDeviceType_DPCTL_ALL) as i32;

/// Every root device dpctl lists, in dpctl's order (so a device's position is its index).
pub(crate) fn all_devices(rt: &'static Runtime) -> Vec<Device> {
    // SAFETY: the call has no preconditions; we own the vector it returns.
    unsafe { take_devices(rt, rt.api().DPCTLDeviceMgr_GetDevices(ALL_DEVICES)) }
}

impl Device {
    /// The device a dpctl filter selector string ("opencl:cpu:0", "gpu", "1") picks.
    pub(crate) fn from_filter(rt: &'static Runtime, filter: &str) -> Result<Device> {
        let not_found = |reason: &str| Error::DeviceNotFound {
            selector: format!("{SYCL}:{filter}"),
            reason: reason.into(),
        };
        let text = CString::new(filter).map_err(|_| not_found("it contains a NUL byte"))?;
        let api = rt.api();
        // SAFETY: `text` is NUL-terminated; the selector the call returns is ours to delete.
        let selector = unsafe { api.DPCTLFilterSelector_Create(text.as_ptr()) };
        if selector.is_null() {
            return Err(not_found("not a valid SYCL filter selector string"));
        }
        // SAFETY: `selector` is live; the call copies the device it picks (or returns null).
        let device = unsafe { api.DPCTLDevice_CreateFromSelector(selector) };
        // SAFETY: we own the selector and release it once.
        unsafe { api.DPCTLDeviceSelector_Delete(selector) };
        // SAFETY: `device` is null or a device we own.
        unsafe { Device::from_raw(rt, device) }
            .ok_or_else(|| not_found("no SYCL device matches it"))
    }

    /// A second owned handle to the same device.
    pub(crate) fn try_clone(&self) -> Result<Device> {
        // SAFETY: `self` is live; Copy returns a new handle we own, or null.
        unsafe { Device::from_raw(self.rt, self.rt.api().DPCTLDevice_Copy(self.as_ptr())) }
            .ok_or_else(|| Error::runtime(SYCL, "DPCTLDevice_Copy", "returned null"))
    }

    pub(crate) fn has_aspect(&self, aspect: sys::DPCTLSyclAspectType) -> bool {
        // SAFETY: `self` is live; the call catches the runtime's exceptions.
        unsafe { self.rt.api().DPCTLDevice_HasAspect(self.as_ptr(), aspect) }
    }

    /// The kinds of USM this device can allocate.
    pub(crate) fn usm_kinds(&self) -> Vec<MemKind> {
        USM_ASPECTS
            .iter()
            .filter(|(_, aspect, _)| self.has_aspect(*aspect))
            .map(|(kind, _, _)| *kind)
            .collect()
    }

    /// The unpartitioned root device this one was split from, or itself.
    fn root(&self) -> Result<Device> {
        let mut root = self.try_clone()?;
        loop {
            // SAFETY: `root` is live; GetParentDevice returns a new handle we own, or null for a
            // root device (the call catches the exception SYCL throws for those).
            let parent = unsafe { self.rt.api().DPCTLDevice_GetParentDevice(root.as_ptr()) };
            // SAFETY: `parent` is null or a device we own.
            match unsafe { Device::from_raw(self.rt, parent) } {
                Some(parent) => root = parent,
                None => return Ok(root),
            }
        }
    }

    /// dpctl's index of this device (`SyclDevice.get_device_id()`): the position of its
    /// unpartitioned root device among all root devices. dpctl and dpnp put it in DLPack's
    /// `device_id` for kDLOneAPI. `None` if the device is not in that list.
    pub(crate) fn dpctl_index(&self) -> Option<i32> {
        let root = self.root().ok()?;
        // SAFETY: `root` is live; the call only compares devices.
        let index = unsafe {
            self.rt
                .api()
                .DPCTLDeviceMgr_GetPositionInDevices(root.as_ptr(), ALL_DEVICES)
        };
        (index >= 0).then_some(index)
    }

    /// Whether `other` is the same `sycl::device`.
    pub(crate) fn same_as(&self, other: &Device) -> bool {
        // SAFETY: both are live; the call compares them.
        unsafe {
            self.rt
                .api()
                .DPCTLDevice_AreEq(self.as_ptr(), other.as_ptr())
        }
    }

    /// Whether this device is the host's own processor (a CPU device), whose memory of every kind
    /// is the host's.
    pub(crate) fn is_host_processor(&self) -> bool {
        // SAFETY: `self` is live; the call catches the runtime's exceptions.
        let device_type = unsafe { self.rt.api().DPCTLDevice_GetDeviceType(self.as_ptr()) };
        device_type == sys::DPCTLSyclDeviceType_DPCTL_CPU
    }

    /// dpctl's filter string for this root device, "backend:type:n" (`SyclDevice.filter_string`).
    pub(crate) fn filter_string(&self) -> String {
        let api = self.rt.api();
        // SAFETY: `self` is live; the calls catch the runtime's exceptions.
        let (backend, device_type, relative) = unsafe {
            (
                api.DPCTLDevice_GetBackend(self.as_ptr()),
                api.DPCTLDevice_GetDeviceType(self.as_ptr()),
                api.DPCTLDeviceMgr_GetRelativeId(self.as_ptr()),
            )
        };
        let backend = match backend {
            sys::DPCTLSyclBackendType_DPCTL_OPENCL => "opencl",
            sys::DPCTLSyclBackendType_DPCTL_LEVEL_ZERO => "level_zero",
            sys::DPCTLSyclBackendType_DPCTL_CUDA => "cuda",
            sys::DPCTLSyclBackendType_DPCTL_HIP => "hip",
            _ => "unknown",
        };
        let device_type = match device_type {
            sys::DPCTLSyclDeviceType_DPCTL_CPU => "cpu",
            sys::DPCTLSyclDeviceType_DPCTL_GPU => "gpu",
            sys::DPCTLSyclDeviceType_DPCTL_ACCELERATOR => "accelerator",
            sys::DPCTLSyclDeviceType_DPCTL_CUSTOM => "custom",
            _ => "unknown",
        };
        format!("{backend}:{device_type}:{relative}")
    }

    /// What devbuf reports about this device.
    pub(crate) fn info(&self) -> DeviceInfo {
        let api = self.rt.api();
        let kinds = self.usm_kinds();
        let unusable_reason = kinds.is_empty().then(|| {
            let aspects: Vec<_> = USM_ASPECTS.iter().map(|(_, _, name)| *name).collect();
            format!("no USM support ({} aspects are false)", aspects.join(", "))
        });
        // SAFETY: `self` is live; the calls catch the runtime's exceptions (take_string below
        // frees the strings they return).
        let (name, vendor, driver, global_mem_bytes) = unsafe {
            (
                api.DPCTLDevice_GetName(self.as_ptr()),
                api.DPCTLDevice_GetVendor(self.as_ptr()),
                api.DPCTLDevice_GetDriverVersion(self.as_ptr()),
                api.DPCTLDevice_GetGlobalMemSize(self.as_ptr()),
            )
        };
        let filter = self
            .root()
            .map(|root| root.filter_string())
            .unwrap_or_default();
        DeviceInfo {
            backend: SYCL,
            // u32::MAX: a device dpctl does not list (it has no DLPack index either).
            index: self.dpctl_index().map_or(u32::MAX, |index| index as u32),
            name: self.rt.take_string(name),
            vendor: self.rt.take_string(vendor),
            driver: self.rt.take_string(driver),
            selector: format!("{SYCL}:{filter}"),
            global_mem_bytes,
            kinds,
            unusable_reason,
            test_double: None,
        }
    }
}
