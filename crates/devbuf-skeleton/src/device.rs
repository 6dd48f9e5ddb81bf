//! What the device is: the host's memory, as this backend's one device.

use devbuf_core::{DeviceInfo, MemKind};

/// The backend's name, the first part of its selectors.
pub const SKELETON: &str = "skeleton";

/// The one device.
pub(crate) fn device_info() -> DeviceInfo {
    DeviceInfo {
        backend: SKELETON,
        index: 0,
        name: "process memory".into(),
        vendor: String::new(),
        driver: concat!("devbuf-skeleton ", env!("CARGO_PKG_VERSION")).into(),
        selector: format!("{SKELETON}:0"),
        global_mem_bytes: 0,
        kinds: MemKind::ALLOCATABLE.to_vec(),
        unusable_reason: None,
        test_double: None,
    }
}
