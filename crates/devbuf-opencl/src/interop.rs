//! The OpenCL queue's exchange answers ([`devbuf_core::Interop`]): kDLOpenCL memory, which no
//! exchange protocol hands over with a queue or stream.

use devbuf_core::dlpark::ffi::{DLDevice, DLDeviceType};
use devbuf_core::interop::Holder;
use devbuf_core::{Interop, MemKind, Result};

use crate::queue::OpenClQueue;

/// The exchange half: kDLOpenCL memory, which no exchange protocol hands over with a queue or
/// stream, so no other library enqueues work on this queue.
impl Interop for OpenClQueue {
    fn dlpack_device(&self, _kind: MemKind) -> DLDevice {
        DLDevice {
            device_type: DLDeviceType::OPENCL,
            device_id: i32::try_from(self.info.index).unwrap_or(-1),
        }
    }

    fn dlpack_export_refusal(&self) -> Option<String> {
        None
    }

    /// As far as the device's memory strategy can tell: Intel USM names the allocation holding
    /// any pointer into it; with SVM only devbuf's own allocations are known.
    fn holder_of(&self, ptr: *const u8) -> Result<Holder> {
        if ptr.is_null() {
            return Ok(Holder::Unknown);
        }
        Ok(self.memory.holder_of(&self.context, ptr))
    }

    // No handle of this queue is handed out (its queue runs in order), and kDLOpenCL has no
    // consumer or producer streams.
    devbuf_core::hands_nothing_out!();

    fn ipc(&self) -> Result<&dyn devbuf_core::IpcSharing> {
        Err(devbuf_core::ipc::unsupported(
            &self.info,
            crate::ipc::NO_IPC,
        ))
    }
}
