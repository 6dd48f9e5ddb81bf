//! The host queue's exchange answers: its memory is DLPack's kDLCPU, it hands no handle to other
//! libraries (nothing but devbuf enqueues on it, and it runs synchronously), and it shares memory
//! between processes through a memfd ([`super::ipc`]).

use super::queue::HostQueue;
use crate::Result;
use crate::interop::{Holder, Interop, IpcSharing};

impl Interop for HostQueue {
    crate::exports_host_memory!();

    /// Its own allocations, by the registry; any other address may be host memory of the
    /// process, which nothing can tell from garbage: unchecked, its producer trusted.
    fn holder_of(&self, ptr: *const u8) -> Result<Holder> {
        Ok(self.memory.holder_of(ptr))
    }

    // Nothing is handed out and host memory has no queue another library could enqueue on;
    // kDLCPU has no consumer or producer streams.
    crate::hands_nothing_out!();

    fn ipc(&self) -> Result<&dyn IpcSharing> {
        Ok(self)
    }
}
