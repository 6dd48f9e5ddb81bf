//! The OpenCL queue's exchange answers ([`devbuf_core::Interop`]): kDLOpenCL memory, which no
//! exchange protocol hands over with a queue or stream.

use devbuf_core::dlpark::ffi::{DLDevice, DLDeviceType};
use devbuf_core::interop::{ConsumerOrder, Holder, ProducerStream, ProducerWork};
use devbuf_core::{
    Event, ExportedHandle, ForeignObject, Interop, MemKind, Queue, Result, StreamHandle,
};

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

    fn native_stream(&self) -> Option<StreamHandle> {
        None
    }

    fn dlpack_work_stream(&self) -> Option<usize> {
        None
    }

    fn export_handle(&self) -> Option<ExportedHandle> {
        None
    }

    /// No handle of this queue is handed out.
    fn untracked_foreign_work(&self) -> bool {
        false
    }

    fn order_after_foreign_work(&self) -> Result<()> {
        Ok(())
    }

    fn foreign_work_event(&self) -> Result<Option<Event>> {
        Ok(None)
    }

    fn handed_out_event(&self) -> Result<Event> {
        Queue::record_event(self)
    }

    /// Nothing is handed out but the queue itself.
    fn hands_out_command_queue(&self) -> bool {
        true
    }

    /// Nothing is handed out; work on this queue runs in order.
    fn order_handed_out_after(&self, event: &Event) -> Result<()> {
        Queue::wait_event(self, event)
    }

    /// Nothing but this queue works on its memory.
    fn wait_device_covers_every_queue(&self) -> bool {
        true
    }

    /// kDLOpenCL has no consumer streams: the generic rule applies.
    unsafe fn dlpack_consumer(
        &self,
        _device: DLDevice,
        _stream: &ForeignObject<'_>,
    ) -> Option<Result<ConsumerOrder>> {
        None
    }

    fn dlpack_orders_streamless_export(&self, _device: DLDevice) -> bool {
        false
    }

    /// No protocol carries an OpenCL producer's queue.
    unsafe fn order_after_producer(
        &self,
        _stream: ProducerStream<'_>,
        _sync: bool,
    ) -> Result<ProducerWork> {
        Ok(ProducerWork::default())
    }

    fn ipc(&self) -> Result<&dyn devbuf_core::IpcSharing> {
        Err(devbuf_core::ipc::unsupported(
            &self.info,
            crate::ipc::NO_IPC,
        ))
    }
}
