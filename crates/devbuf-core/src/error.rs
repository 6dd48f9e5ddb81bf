//! The one error type every devbuf crate returns.
//!
//! Each variant maps to one Python exception class (see `devbuf-py`), and every message names the
//! key, value or operation at fault so that a user can act on it without reading our code.

use std::str::FromStr;

use crate::MemKind;

/// Errors from devbuf's model, its descriptor parsing and its backends.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// A descriptor (CAI, SUAI, DLPack or a view request) holds a value that is out of range or
    /// inconsistent. `key` is the descriptor's own key name (`shape`, `strides`, `typestr`...).
    #[error("{key}: {message}")]
    InvalidDescriptor {
        /// The descriptor key at fault.
        key: &'static str,
        /// What is wrong with its value.
        message: String,
    },

    /// A descriptor key holds a value of the wrong type.
    #[error("{key}: {message}")]
    InvalidType {
        /// The descriptor key at fault.
        key: &'static str,
        /// The type expected and the type found.
        message: String,
    },

    /// An index reaches past the array: a position outside its dimension, more entries than
    /// dimensions (Python: IndexError).
    #[error("{key}: {message}")]
    IndexOutOfBounds {
        /// The argument at fault.
        key: &'static str,
        /// The position, the axis and its extent.
        message: String,
    },

    /// The memory cannot be exported through the requested protocol (Python: BufferError).
    #[error("{0}")]
    Unexportable(String),

    /// The runtime refused an allocation (Python: MemoryError).
    #[error("cannot allocate {size} bytes of {kind} memory on {device}: {reason}")]
    OutOfMemory {
        /// The kind of memory asked for.
        kind: MemKind,
        /// The bytes asked for.
        size: usize,
        /// The device's selector.
        device: String,
        /// The runtime's own reason.
        reason: String,
    },

    /// The device cannot do this at all (a USM kind it lacks, a copy it cannot reach).
    #[error("{device}: {what} is not supported: {reason}")]
    Unsupported {
        /// The device's selector.
        device: String,
        /// The operation or kind asked for.
        what: String,
        /// Why the device cannot.
        reason: String,
    },

    /// The backend's runtime is not usable in this process.
    #[error("{backend} backend unavailable: {reason}")]
    Unavailable {
        /// The backend's name.
        backend: &'static str,
        /// Why its runtime is not usable (missing library, no device...).
        reason: String,
    },

    /// A selector names no device.
    #[error("no device matches {selector:?}: {reason}")]
    DeviceNotFound {
        /// The selector as given (empty for the default device).
        selector: String,
        /// Why nothing matches it.
        reason: String,
    },

    /// A runtime call failed.
    #[error("{backend}: {operation} failed: {message}")]
    Runtime {
        /// The backend whose runtime failed.
        backend: &'static str,
        /// The runtime call that failed.
        operation: &'static str,
        /// The code the runtime returned, as its API numbers it (a `CUresult`, an OpenCL
        /// `cl_int`), so that callers can match it; `None` where the call returned none (the
        /// runtime could not be called, or it reports failures otherwise).
        code: Option<i64>,
        /// The runtime's error code and message.
        message: String,
    },
}

impl Error {
    /// A malformed descriptor value; `key` names the descriptor key.
    pub fn invalid(key: &'static str, message: impl Into<String>) -> Self {
        Error::InvalidDescriptor {
            key,
            message: message.into(),
        }
    }

    /// A descriptor value of the wrong type; `key` names the descriptor key.
    pub fn wrong_type(key: &'static str, message: impl Into<String>) -> Self {
        Error::InvalidType {
            key,
            message: message.into(),
        }
    }

    /// A runtime call that failed.
    pub fn runtime(
        backend: &'static str,
        operation: &'static str,
        message: impl Into<String>,
    ) -> Self {
        Error::Runtime {
            backend,
            operation,
            code: None,
            message: message.into(),
        }
    }

    /// Memory that cannot be exported as asked.
    pub fn unexportable(message: impl Into<String>) -> Self {
        Error::Unexportable(message.into())
    }
}

/// devbuf's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl FromStr for MemKind {
    type Err = Error;

    /// Parses the name of a kind that can be allocated: "host", "device" or "shared". The names
    /// other runtimes use for them get a hint (CUDA's pinned host memory is "host", its managed
    /// memory "shared"); "unknown" names no memory that can be asked for.
    fn from_str(s: &str) -> Result<Self> {
        const ALLOWED: &str = "one of \"host\", \"device\", \"shared\"";
        let hint = match s {
            "host" => return Ok(MemKind::Host),
            "device" => return Ok(MemKind::Device),
            "shared" => return Ok(MemKind::Shared),
            "pinned" | "page-locked" | "pagelocked" => {
                "; CUDA's pinned (page-locked) host memory, which the device reaches, is \"host\""
            }
            "managed" | "unified" => {
                "; CUDA's managed (unified) memory, which migrates on demand, is \"shared\""
            }
            "unknown" => {
                "; \"unknown\" is what devbuf reports for memory it cannot classify, not a kind \
                 it can allocate"
            }
            _ => "",
        };
        Err(Error::invalid(
            "kind",
            format!("{s:?} is not {ALLOWED}{hint}"),
        ))
    }
}
