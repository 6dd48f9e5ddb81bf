//! Sharing memory between processes: OpenCL has no way to.

/// Why an OpenCL queue cannot share memory with other processes ([`devbuf_core::Interop::ipc`]).
pub(crate) const NO_IPC: &str = "OpenCL has no way to share memory between processes";
