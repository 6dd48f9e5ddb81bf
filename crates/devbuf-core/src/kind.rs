//! Kinds of memory and the identity of the device that owns them. (A kind's name parses with
//! `str::parse`, in `error.rs`, beside the error a wrong name raises.)

use std::fmt;

/// Where an allocation lives, in the vocabulary USM, CUDA and OpenCL share.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum MemKind {
    /// Host-resident memory the device can reach (USM host, CUDA pinned mapped memory).
    Host,
    /// Device-resident memory the host cannot dereference.
    Device,
    /// Memory that migrates between host and device on demand (USM shared, CUDA managed).
    Shared,
    /// Memory the runtime cannot classify: foreign, another context's, or plain pageable host memory.
    Unknown,
}

impl MemKind {
    /// The three kinds a queue can allocate, in a stable order.
    pub const ALLOCATABLE: [MemKind; 3] = [MemKind::Host, MemKind::Device, MemKind::Shared];

    /// The name used by dpctl's `get_usm_type()` and by devbuf's Python API.
    pub const fn as_str(self) -> &'static str {
        match self {
            MemKind::Host => "host",
            MemKind::Device => "device",
            MemKind::Shared => "shared",
            MemKind::Unknown => "unknown",
        }
    }
}

impl fmt::Display for MemKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The name of the host backend and its one selector ([`crate::host::HOST`]).
pub const HOST: &str = "host";

/// What a backend knows about one of its devices.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceInfo {
    /// Backend name: "host", "sycl", "cuda", "opencl".
    pub backend: &'static str,
    /// Index of the device within its backend (dpctl's root-device index for SYCL, the CUDA ordinal).
    pub index: u32,
    /// The device's own name.
    pub name: String,
    /// Vendor name.
    pub vendor: String,
    /// Driver version.
    pub driver: String,
    /// The selector that opens this device again, e.g. "sycl:opencl:cpu:0" or "cuda:0".
    pub selector: String,
    /// Global memory size in bytes (0 when the runtime does not say).
    pub global_mem_bytes: u64,
    /// The kinds of memory devbuf can allocate on this device.
    pub kinds: Vec<MemKind>,
    /// Why devbuf cannot use this device, when it cannot (e.g. no USM support).
    pub unusable_reason: Option<String>,
    /// What stands in for the hardware, when a test double of its runtime does (the CUDA driver
    /// double of tests/cuda-driver): nothing measured or checked on this device is a hardware
    /// result, and every listing must say so.
    pub test_double: Option<String>,
}

impl DeviceInfo {
    /// Whether devbuf can allocate memory of `kind` here.
    pub fn supports(&self, kind: MemKind) -> bool {
        self.unusable_reason.is_none() && self.kinds.contains(&kind)
    }
}

impl fmt::Display for DeviceInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.selector, self.name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kind_names_round_trip() {
        for kind in MemKind::ALLOCATABLE {
            assert_eq!(kind.as_str().parse::<MemKind>().unwrap(), kind);
            assert_eq!(kind.to_string(), kind.as_str());
        }
        assert_eq!(MemKind::Unknown.to_string(), "unknown");
    }

    #[test]
    fn only_allocatable_kinds_parse_and_other_vocabularies_get_a_hint() {
        let message = |name: &str| name.parse::<MemKind>().unwrap_err().to_string();
        let unknown = message("unknown");
        assert!(
            unknown
                .starts_with("kind: \"unknown\" is not one of \"host\", \"device\", \"shared\";"),
            "{unknown}"
        );
        assert!(
            message("pinned").ends_with("is \"host\""),
            "{}",
            message("pinned")
        );
        assert!(
            message("managed").ends_with("is \"shared\""),
            "{}",
            message("managed")
        );
        assert!(message("gpu").ends_with("\"shared\""), "{}", message("gpu"));
    }
}
