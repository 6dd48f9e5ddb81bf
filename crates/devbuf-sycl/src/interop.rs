//! The SYCL queue's exchange answers ([`devbuf_core::Interop`]): kDLOneAPI memory, handed to
//! other libraries with copies of the queue handed out (SUAI's `syclobj`, dpctl's `sycl_queue`,
//! DLPack's work stream), which they enqueue on.

use std::sync::Arc;

use devbuf_core::dlpark::ffi::{DLDevice, DLDeviceType};
use devbuf_core::interop::{ConsumerOrder, Holder, ProducerStream, ProducerWork};
use devbuf_core::{
    Error, Event, ExportedHandle, ForeignObject, ForeignQueue, Interop, MemKind, Queue, Result,
    StreamHandle,
};

use crate::event::SyclEvent;
use crate::loader::SYCL;
use crate::queue::SyclQueue;
use crate::raw::{Device, owned_handle};

/// The exchange half: kDLOneAPI memory, handed to other libraries with copies of the queue handed
/// out, which they enqueue on.
impl Interop for SyclQueue {
    fn dlpack_device(&self, _kind: MemKind) -> DLDevice {
        DLDevice {
            device_type: DLDeviceType::ONEAPI,
            device_id: self.dlpack_id.unwrap_or(-1),
        }
    }

    fn dlpack_export_refusal(&self) -> Option<String> {
        self.dlpack_refusal()
    }

    /// dpctl's C API tells a USM pointer's type and device in a context, not the bounds of its
    /// allocation (SYCL has no such query; Level Zero's `zeMemGetAddressRange` is not reachable
    /// through it): an import's span is checked at its first and last byte (same USM type, same
    /// device, in this queue's context). The bytes between are not: a span over two neighbouring
    /// allocations of the same type and device passes.
    fn holder_of(&self, ptr: *const u8) -> Result<Holder> {
        let kind = self.kind_of(ptr);
        if kind == MemKind::Unknown {
            return Ok(Holder::Unknown);
        }
        if !self.multi_device_context {
            // One device in the context: the USM type there says the device too.
            return Ok(Holder::Unbounded { kind, place: 0 });
        }
        let rt = self.runtime();
        // SAFETY: the pointer is USM of this context (classified above), so the runtime finds
        // its device instead of throwing; the call returns a new handle we own.
        let device = unsafe {
            Device::from_raw(
                rt,
                rt.api()
                    .DPCTLUSM_GetPointerDevice(ptr.cast_mut().cast(), self.context.as_ptr()),
            )
        }
        .ok_or_else(|| Error::runtime(SYCL, "DPCTLUSM_GetPointerDevice", "returned null"))?;
        // SAFETY: a live device handle; hashing does not throw.
        let place = unsafe { rt.api().DPCTLDevice_Hash(device.as_ptr()) } as u64;
        Ok(Holder::Unbounded { kind, place })
    }

    /// No native stream: SYCL's queue is the handle ([`Interop::dlpack_work_stream`],
    /// [`Interop::export_handle`]).
    fn native_stream(&self) -> Option<StreamHandle> {
        None
    }

    /// The `sycl::queue*` handed out: what DLPack's exchange API names for kDLOneAPI.
    fn dlpack_work_stream(&self) -> Option<usize> {
        Some(self.handed_out.as_ptr() as usize)
    }

    /// A fresh owned copy of the queue handed out as a "SyclQueueRef" payload (destroyed with
    /// `DPCTLQueue_Delete`).
    fn export_handle(&self) -> Option<ExportedHandle> {
        let api = self.runtime().api();
        let delete = *api.DPCTLQueue_Delete.as_ref().ok()?;
        // SAFETY: the queue is live; Copy returns a new handle, or null.
        let copy = unsafe { api.DPCTLQueue_Copy(self.handed_out.as_ptr()) };
        owned_handle(c"SyclQueueRef", copy, delete)
    }

    /// Other libraries enqueue on copies of the queue handed out (SUAI's `syclobj`, dpctl's
    /// `sycl_queue`, DLPack's `stream`): dpnp does for every operation on devbuf memory.
    fn untracked_foreign_work(&self) -> bool {
        true
    }

    /// A barrier on the queue handed out, which devbuf's command queue waits for; nothing when
    /// that is the command queue itself (in order: their work there comes first anyway).
    fn order_after_foreign_work(&self) -> Result<()> {
        self.order_commands_after_handed_out()
    }

    /// `SyclQueue::all_work_event`: a barrier on the queue handed out covers their work,
    /// which devbuf's last command does not.
    fn foreign_work_event(&self) -> Result<Option<Event>> {
        self.all_work_event().map(Some)
    }

    /// As `foreign_work_event` (`SyclQueue::all_work_event`).
    fn handed_out_event(&self) -> Result<Event> {
        self.all_work_event()
    }

    /// Unless the queue handed out runs out of order: devbuf's commands then run on a private
    /// in-order queue beside it.
    fn hands_out_command_queue(&self) -> bool {
        !self.split
    }

    /// On a queue shared with them, an in-order queue: [`Queue::wait_event`]; on a queue handed out
    /// beside devbuf's command queue, the event joins the record of work its consumers submit by
    /// (`SyclQueue::order_handed_out_after_event`).
    fn order_handed_out_after(&self, event: &Event) -> Result<()> {
        if !self.split {
            return Queue::wait_event(self, event);
        }
        match event.downcast_ref::<SyclEvent>() {
            Some(sycl) if std::ptr::eq(sycl.event.rt, self.runtime()) => {
                self.order_handed_out_after_event(sycl)
            }
            // Another runtime's event: the host waits for it.
            _ => event.wait(),
        }
    }

    /// Other libraries' own queues (dpctl's default ones) are out of [`Queue::wait_device`]'s
    /// sight; the runtime's own free waits for their commands on the memory.
    fn wait_device_covers_every_queue(&self) -> bool {
        false
    }

    /// A kDLOneAPI consumer's `stream` is its SYCL queue (a devbuf queue or a "SyclQueueRef"),
    /// made to wait for all pending work on the memory without blocking the host; anything else
    /// is a wrong type.
    unsafe fn dlpack_consumer(
        &self,
        device: DLDevice,
        stream: &ForeignObject<'_>,
    ) -> Option<Result<ConsumerOrder>> {
        if device.device_type != DLDeviceType::ONEAPI || matches!(stream, ForeignObject::Nothing) {
            return None;
        }
        let consumer: Arc<dyn ForeignQueue> = match stream {
            ForeignObject::Queue {
                foreign: Some(queue),
                ..
            } => Arc::clone(queue),
            // Taken as the devbuf queue that hands it out (a device's default queue, a queue
            // adopted before, or one adopted now): the memory is then handed out on it, and every
            // later access waits for the consumer's work there.
            ForeignObject::Handle { name, ptr } if name.to_bytes() == b"SyclQueueRef" => {
                // SAFETY: a live "SyclQueueRef" payload (the caller's promise).
                match unsafe { SyclQueue::from_producer_queue_ref(self.runtime(), *ptr as *mut _) }
                {
                    Ok((_, consumer)) => consumer,
                    Err(err) => return Some(Err(err)),
                }
            }
            _ => {
                return Some(Err(Error::wrong_type(
                    "stream",
                    format!("a kDLOneAPI export takes None or a dpctl.SyclQueue, not {stream:?}"),
                )));
            }
        };
        Some(Ok(ConsumerOrder::AfterPendingWork(consumer)))
    }

    /// A kDLOneAPI consumer without a queue takes the generic rule (pending work completed).
    fn dlpack_orders_streamless_export(&self, _device: DLDevice) -> bool {
        false
    }

    /// SUAI has no stream: its producer's queue comes with the `syclobj` that names the memory's
    /// queue ([`devbuf_core::ResolvedQueue::producer`]), and CAI and the exchange API's work
    /// streams are not SYCL's.
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
