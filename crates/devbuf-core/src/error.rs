//! The one error type every devbuf crate returns.
//!
//! Each variant maps to one Python exception class (see `devbuf-py`), and every message names the
//! key, value or operation at fault so that a user can act on it without reading our code.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

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

    /// Something would recurse without end: a memory resource that allocates from itself, or a
    /// stack of resources deeper than devbuf allows (Python: RecursionError).
    #[error("{key}: {message}")]
    Recursion {
        /// The argument at fault.
        key: &'static str,
        /// What reaches itself, or how deep the stack is.
        message: String,
    },

    /// Code devbuf called back failed (a memory resource written in Python): `source` is what it
    /// raised, which reaches devbuf's caller unchanged (in Python, the very exception raised),
    /// through every resource and adaptor in between.
    #[error("{context}: {source}")]
    Raised {
        /// What devbuf was doing when the callback failed.
        context: String,
        /// What the callback raised.
        source: Raised,
    },
}

/// An error raised by code devbuf called back, carried inside [`Error::Raised`] as it was raised.
/// Errors are compared by identity: two `Raised` are equal when they carry the same error.
#[derive(Clone)]
pub struct Raised {
    error: Arc<dyn std::error::Error + Send + Sync>,
    out_of_memory: bool,
}

impl Raised {
    /// Carries `error` as raised.
    pub fn new(error: impl std::error::Error + Send + Sync + 'static) -> Self {
        Raised {
            error: Arc::new(error),
            out_of_memory: false,
        }
    }

    /// Carries `error`, by which the callback said it ran out of memory (Python's
    /// `MemoryError`): what acts on exhaustion (a failure-callback adaptor) takes it as
    /// [`Error::OutOfMemory`], as RMM's takes a resource's `out_of_memory`.
    pub fn out_of_memory(error: impl std::error::Error + Send + Sync + 'static) -> Self {
        Raised {
            out_of_memory: true,
            ..Raised::new(error)
        }
    }

    /// Whether the callback said it ran out of memory.
    pub fn is_out_of_memory(&self) -> bool {
        self.out_of_memory
    }

    /// The error raised, when it is a `T`.
    pub fn downcast_ref<T: std::error::Error + 'static>(&self) -> Option<&T> {
        let error: &(dyn std::error::Error + 'static) = &*self.error;
        error.downcast_ref()
    }
}

impl fmt::Debug for Raised {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.error, f)
    }
}

impl fmt::Display for Raised {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.error, f)
    }
}

impl std::error::Error for Raised {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.error.source()
    }
}

impl PartialEq for Raised {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.error, &other.error)
    }
}

impl Eq for Raised {}

impl Error {
    /// Whether the allocation failed for want of memory: [`Error::OutOfMemory`], or a callback
    /// (a resource written in Python) that raised so ([`Raised::out_of_memory`]).
    pub fn is_out_of_memory(&self) -> bool {
        match self {
            Error::OutOfMemory { .. } => true,
            Error::Raised { source, .. } => source.is_out_of_memory(),
            _ => false,
        }
    }

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

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("raised by a callback")]
    struct Callback;

    /// What a callback raised travels as the error's `source`, found again by its type, and an
    /// error equals only itself (its clones).
    #[test]
    fn a_raised_error_is_carried_as_the_source() {
        let error = Error::Raised {
            context: "cannot allocate".into(),
            source: Raised::new(Callback),
        };
        assert_eq!(error.to_string(), "cannot allocate: raised by a callback");
        let Error::Raised { source, .. } = &error else {
            unreachable!()
        };
        assert!(source.downcast_ref::<Callback>().is_some());
        assert!(source.downcast_ref::<std::fmt::Error>().is_none());
        assert!(std::error::Error::source(&error).is_some());
        assert_eq!(error.clone(), error);
        let other = Error::Raised {
            context: "cannot allocate".into(),
            source: Raised::new(Callback),
        };
        assert_ne!(other, error);
        assert!(!error.is_out_of_memory());
        let exhausted = Error::Raised {
            context: "cannot allocate".into(),
            source: Raised::out_of_memory(Callback),
        };
        assert!(exhausted.is_out_of_memory());
    }
}
