//! The one error type every devbuf crate returns.
//!
//! Each variant maps to one Python exception class (see `devbuf-py`), and every message names the
//! key, value or operation at fault so that a user can act on it without reading our code.

use crate::MemKind;

/// Errors from devbuf's model, its descriptor parsing and its backends.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// A descriptor (CAI, SUAI, DLPack or a view request) holds a value that is out of range or
    /// inconsistent. `key` is the descriptor's own key name (`shape`, `strides`, `typestr`...).
    #[error("{key}: {message}")]
    InvalidDescriptor { key: &'static str, message: String },

    /// A descriptor key holds a value of the wrong type.
    #[error("{key}: {message}")]
    InvalidType { key: &'static str, message: String },

    /// The memory cannot be exported through the requested protocol (Python: BufferError).
    #[error("{0}")]
    Unexportable(String),

    /// The runtime refused an allocation (Python: MemoryError).
    #[error("cannot allocate {size} bytes of {kind} memory on {device}: {reason}")]
    OutOfMemory {
        kind: MemKind,
        size: usize,
        device: String,
        reason: String,
    },

    /// The device cannot do this at all (a USM kind it lacks, a copy it cannot reach).
    #[error("{device}: {what} is not supported: {reason}")]
    Unsupported {
        device: String,
        what: String,
        reason: String,
    },

    /// The backend's runtime is not usable in this process.
    #[error("{backend} backend unavailable: {reason}")]
    Unavailable {
        backend: &'static str,
        reason: String,
    },

    /// A selector names no device.
    #[error("no device matches {selector:?}: {reason}")]
    DeviceNotFound { selector: String, reason: String },

    /// A runtime call failed.
    #[error("{backend}: {operation} failed: {message}")]
    Runtime {
        backend: &'static str,
        operation: &'static str,
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
