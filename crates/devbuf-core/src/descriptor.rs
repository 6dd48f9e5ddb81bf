//! [`BackendDescriptor`]: the facts about a backend that code outside the backend needs, stated
//! once by each backend as a `const` beside its `impl Backend` ([`crate::Backend::descriptor`]).
//! The registry's order and the default device's order, the DLPack device-type table, which
//! backends a protocol asks, `devbuf.backends()` in Python and the tests that run on every
//! backend all derive from these, so that no list of backends is written by hand
//! (docs/architecture.md, "The backend contract").

use dlpark::ffi::DLDeviceType;

use crate::MemKind;
use crate::exchange::Protocol;

/// The facts about one backend that the registry, the exchange protocols and the tests read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BackendDescriptor {
    /// The backend's name, also the first part of its selectors ("host", "sycl", "cuda",
    /// "opencl") and [`crate::DeviceInfo::backend`] of its devices.
    pub name: &'static str,
    /// The kinds of memory its devices may allocate (each device says which of them it does:
    /// [`crate::DeviceInfo::kinds`]).
    pub kinds: &'static [MemKind],
    /// The DLPack device types its memory is exported as and imported from.
    pub dlpack_device_types: &'static [DlpackDeviceType],
    /// The array-interface protocols that describe its memory. Several backends may speak one
    /// protocol; the one whose runtime recognises the memory answers an import
    /// ([`crate::Backend::claim_pointer`]).
    pub protocols: &'static [Protocol],
    /// The first words of other libraries' device strings that are this backend's selectors as
    /// they stand, without the "`name`:" prefix (dpctl's filter strings "gpu", "cpu:0",
    /// "level_zero:gpu:0" are SYCL's, as `dpctl.SyclDevice("gpu")` reads them).
    pub selector_words: &'static [&'static str],
    /// Whether it makes streams of its own on a device ([`crate::Backend::open_stream`]): what
    /// a user's `Stream` is. The host's one queue serves as every stream, so it does.
    pub makes_streams: bool,
    /// Whether its default device may be the default device (`device=None`): false for a backend
    /// that is available everywhere but never the device users mean (a second host-like
    /// backend), which then stays out of the default device's choice wherever it ranks.
    pub may_be_default: bool,
    /// Its place in the order the default device is looked for and the registry lists backends:
    /// lower first (ties broken by name, never by the order backends are compiled in).
    pub default_rank: u8,
}

impl BackendDescriptor {
    /// Whether `protocol` describes this backend's memory.
    pub fn speaks(&self, protocol: Protocol) -> bool {
        self.protocols.contains(&protocol)
    }

    /// The kind of memory devbuf allocates for a consumer that asks for `device_type` (DLPack's C
    /// exchange table allocator), if this backend allocates for it.
    pub fn allocates_for(&self, device_type: DLDeviceType) -> Option<MemKind> {
        self.dlpack_device_types
            .iter()
            .find(|entry| entry.device_type == device_type)
            .and_then(|entry| entry.allocates)
    }

    /// Whether memory of `device_type` may be this backend's.
    pub fn has_dlpack_device_type(&self, device_type: DLDeviceType) -> bool {
        self.dlpack_device_types
            .iter()
            .any(|entry| entry.device_type == device_type)
    }
}

/// A DLPack device type a backend's memory is exported as, and what devbuf allocates for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DlpackDeviceType {
    /// The device type.
    pub device_type: DLDeviceType,
    /// The kind of memory devbuf allocates when a consumer asks for memory of this device type
    /// (DLPack's C exchange table allocator); `None` where devbuf does not allocate for it.
    pub allocates: Option<MemKind>,
}

impl DlpackDeviceType {
    /// `device_type`, for which devbuf allocates `kind`.
    pub const fn allocating(device_type: DLDeviceType, kind: MemKind) -> Self {
        DlpackDeviceType {
            device_type,
            allocates: Some(kind),
        }
    }

    /// `device_type`, for which devbuf does not allocate.
    pub const fn not_allocating(device_type: DLDeviceType) -> Self {
        DlpackDeviceType {
            device_type,
            allocates: None,
        }
    }
}
