//! Sharing memory with other processes: this backend cannot, and says why.

/// Why memory of this backend cannot be shared between processes.
pub(crate) const NO_IPC: &str = "the skeleton backend's memory is private to the process";
