//! The exchange half ([`devbuf_core::Interop`]): kDLCPU memory, handed to other libraries with no
//! stream or queue, so the answers of a queue that hands nothing out.

use devbuf_core::interop::Holder;
use devbuf_core::{Interop, IpcSharing, Result};

use crate::queue::SkeletonQueue;

impl Interop for SkeletonQueue {
    devbuf_core::exports_host_memory!();

    fn holder_of(&self, ptr: *const u8) -> Result<Holder> {
        Ok(self.memory.holder_of(ptr))
    }

    devbuf_core::hands_nothing_out!();

    fn ipc(&self) -> Result<&dyn IpcSharing> {
        Err(devbuf_core::ipc::unsupported(
            &self.device,
            crate::ipc::NO_IPC,
        ))
    }
}
