//! Sharing memory between processes: not reachable through dpctl's SYCL C API.

/// Why a SYCL queue cannot share memory with other processes ([`devbuf_core::Interop::ipc`]).
pub(crate) const NO_IPC: &str = "dpctl's SYCL C API has no inter-process handles for USM, and \
     the runtimes it runs on here (OpenCL) have none either; Level Zero's IPC (zeMemGetIpcHandle) \
     is not reachable through it";
