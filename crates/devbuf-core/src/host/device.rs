//! The host CPU as a device, described from /proc.

use super::HOST;
use crate::{DeviceInfo, MemKind};

/// The host CPU: its model and vendor (/proc/cpuinfo) and memory (/proc/meminfo).
pub(super) fn host_device_info() -> DeviceInfo {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let field = |key: &str| {
        cpuinfo
            .lines()
            .find(|line| line.starts_with(key))
            .and_then(|line| line.split_once(':'))
            .map(|(_, value)| value.trim().to_string())
    };
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let total_kib = meminfo
        .lines()
        .find(|line| line.starts_with("MemTotal:"))
        .and_then(|line| line.split_whitespace().nth(1))
        .and_then(|kib| kib.parse::<u64>().ok())
        .unwrap_or(0);
    DeviceInfo {
        backend: HOST,
        index: 0,
        name: field("model name").unwrap_or_else(|| std::env::consts::ARCH.to_string()),
        vendor: field("vendor_id").unwrap_or_default(),
        driver: concat!("devbuf ", env!("CARGO_PKG_VERSION")).into(),
        selector: HOST.into(),
        global_mem_bytes: total_kib.saturating_mul(1024),
        kinds: MemKind::ALLOCATABLE.to_vec(),
        unusable_reason: None,
        test_double: None,
    }
}
