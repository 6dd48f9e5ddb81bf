//! The host queue's exchange answers: its memory is DLPack's kDLCPU, it hands no handle to other
//! libraries (nothing but devbuf enqueues on it, and it runs synchronously), and it shares memory
//! between processes through a memfd ([`super::ipc`]).

use dlpark::ffi::{DLDevice, DLDeviceType};

use super::queue::HostQueue;
use crate::interop::IpcSharing;
use crate::interop::{
    ConsumerOrder, ExportedHandle, ForeignObject, Holder, Interop, ProducerStream, ProducerWork,
    StreamHandle,
};
use crate::{CompletedEvent, Event, MemKind, Result};

impl Interop for HostQueue {
    fn dlpack_device(&self, _kind: MemKind) -> DLDevice {
        DLDevice {
            device_type: DLDeviceType::CPU,
            device_id: 0,
        }
    }

    fn dlpack_export_refusal(&self) -> Option<String> {
        None
    }

    /// Its own allocations, by the registry; any other address may be host memory of the
    /// process, which nothing can tell from garbage: unchecked, its producer trusted.
    fn holder_of(&self, ptr: *const u8) -> Result<Holder> {
        Ok(self.memory.holder_of(ptr))
    }

    fn native_stream(&self) -> Option<StreamHandle> {
        None
    }

    /// The CPU's stream is DLPack's null stream.
    fn dlpack_work_stream(&self) -> Option<usize> {
        None
    }

    fn export_handle(&self) -> Option<ExportedHandle> {
        None
    }

    /// Nothing is handed out, and host memory has no queue another library could enqueue on.
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
        Ok(Event::new(CompletedEvent))
    }

    /// Nothing is handed out but the queue itself.
    fn hands_out_command_queue(&self) -> bool {
        true
    }

    /// Nothing is handed out, and nothing runs later than the call that enqueued it.
    fn order_handed_out_after(&self, _event: &Event) -> Result<()> {
        Ok(())
    }

    /// Its work is done when a call returns: there is nothing asynchronous to wait for.
    fn wait_device_covers_every_queue(&self) -> bool {
        true
    }

    /// kDLCPU has no consumer streams: the generic rule (stream None or -1) applies.
    unsafe fn dlpack_consumer(
        &self,
        _device: DLDevice,
        _stream: &ForeignObject<'_>,
    ) -> Option<Result<ConsumerOrder>> {
        None
    }

    /// kDLCPU has no consumer streams, so no rule for none either.
    fn dlpack_orders_streamless_export(&self, _device: DLDevice) -> bool {
        false
    }

    /// Host memory comes with no producer stream to follow.
    unsafe fn order_after_producer(
        &self,
        _stream: ProducerStream<'_>,
        _sync: bool,
    ) -> Result<ProducerWork> {
        Ok(ProducerWork::default())
    }

    fn ipc(&self) -> Result<&dyn IpcSharing> {
        Ok(self)
    }
}
