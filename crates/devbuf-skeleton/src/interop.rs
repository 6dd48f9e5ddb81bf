//! The exchange half ([`devbuf_core::Interop`]): kDLCPU memory, handed to other libraries with no
//! stream or queue, so the answers of a queue that hands nothing out.

use devbuf_core::dlpark::ffi::{DLDevice, DLDeviceType};
use devbuf_core::interop::Holder;
use devbuf_core::{Interop, IpcSharing, MemKind, Result};

use crate::queue::SkeletonQueue;

impl Interop for SkeletonQueue {
    fn dlpack_device(&self, _kind: MemKind) -> DLDevice {
        DLDevice {
            device_type: DLDeviceType::CPU,
            device_id: 0,
        }
    }

    fn dlpack_export_refusal(&self) -> Option<String> {
        None
    }

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
