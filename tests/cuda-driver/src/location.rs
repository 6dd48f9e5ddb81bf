//! `CUmemLocation`: where memory is, or is preferred to be (a device, the host, a host NUMA node),
//! as pools, prefetches and advice name it; and the device numbers the pre-12.2 entry points use
//! for the same places.

use cudarc::driver::sys::CUdevice;

/// `CU_MEM_LOCATION_TYPE_NONE` (CUDA 13; the same number as `_INVALID`): no location, "to indicate
/// no preferred location for the managed memory pool".
pub(crate) const LOCATION_NONE: u32 = 0;
/// `CU_MEM_LOCATION_TYPE_DEVICE` .. `CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT`.
pub(crate) const LOCATION_DEVICE: u32 = 1;
pub(crate) const LOCATION_HOST: u32 = 2;
pub(crate) const LOCATION_HOST_NUMA: u32 = 3;
pub(crate) const LOCATION_HOST_NUMA_CURRENT: u32 = 4;

/// `CU_DEVICE_CPU`: the host, where a pre-12.2 entry point takes or returns a device.
pub(crate) const DEVICE_CPU: CUdevice = -1;
/// `CU_DEVICE_INVALID`: no device.
pub(crate) const DEVICE_INVALID: CUdevice = -2;

/// `CUmemLocation`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Location {
    pub kind: u32,
    pub id: i32,
}

impl Location {
    pub(crate) const NONE: Location = Location {
        kind: LOCATION_NONE,
        id: 0,
    };

    pub(crate) fn device(ordinal: usize) -> Location {
        Location {
            kind: LOCATION_DEVICE,
            id: ordinal as i32,
        }
    }

    /// The host: "CUmemLocation::id is ignored" for CU_MEM_LOCATION_TYPE_HOST, so every host
    /// location is this one.
    pub(crate) const HOST: Location = Location {
        kind: LOCATION_HOST,
        id: 0,
    };

    /// The location a pre-12.2 device argument names: a device ordinal or `CU_DEVICE_CPU`.
    pub(crate) fn of_device(device: CUdevice) -> Location {
        match device {
            DEVICE_CPU => Location::HOST,
            device => Location {
                kind: LOCATION_DEVICE,
                id: device,
            },
        }
    }

    /// The device number a pre-12.2 answer gives for this location: the ordinal, `CU_DEVICE_CPU`
    /// for the host and its NUMA nodes.
    pub(crate) fn as_device(self) -> CUdevice {
        match self.kind {
            LOCATION_DEVICE => self.id,
            _ => DEVICE_CPU,
        }
    }
}
