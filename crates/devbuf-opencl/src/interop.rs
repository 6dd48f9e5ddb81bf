//! The OpenCL queue's exchange answers ([`devbuf_core::Interop`]): kDLOpenCL memory, which no
//! exchange protocol hands over with a queue or stream.

use std::ffi::c_void;

use devbuf_core::dlpark::ffi::{DLDevice, DLDeviceType};
use devbuf_core::interop::{ConsumerOrder, Holder, ProducerStream, ProducerWork};
use devbuf_core::{
    Event, ExportedHandle, ForeignObject, Interop, MemKind, Queue, Result, StreamHandle,
};

use crate::memory::{Allocator, svm_holding};
use crate::queue::OpenClQueue;
use crate::usm::{CL_MEM_ALLOC_BASE_PTR_INTEL, CL_MEM_ALLOC_SIZE_INTEL};

/// The exchange half: kDLOpenCL memory, which no exchange protocol hands over with a queue or
/// stream, so no other library enqueues work on this queue.
impl Interop for OpenClQueue {
    /// Intel USM names the allocation holding any pointer into it (`clGetMemAllocInfoINTEL`'s
    /// base pointer and size); SVM pointers carry nothing the runtime can be asked, so only
    /// devbuf's own SVM allocations are known, by its own table.
    fn holder_of(&self, ptr: *const u8) -> Result<Holder> {
        if ptr.is_null() {
            return Ok(Holder::Unknown);
        }
        Ok(match &self.allocator {
            Allocator::Usm(api) => {
                let kind = api.kind_of(&self.context, ptr);
                if kind == MemKind::Unknown {
                    return Ok(Holder::Unknown);
                }
                let base =
                    api.alloc_info::<*mut c_void>(&self.context, ptr, CL_MEM_ALLOC_BASE_PTR_INTEL);
                let size = api.alloc_info::<usize>(&self.context, ptr, CL_MEM_ALLOC_SIZE_INTEL);
                let range = base.zip(size).and_then(|(base, size)| {
                    let start = base as usize;
                    let range = start..start.checked_add(size)?;
                    range.contains(&(ptr as usize)).then_some(range)
                });
                match range {
                    Some(range) => Holder::Allocation { kind, range },
                    // A runtime that types the pointer but does not bound its allocation.
                    None => Holder::Unbounded { kind, place: 0 },
                }
            }
            Allocator::Svm { allocations, .. } => svm_holding(&allocations.lock(), ptr).map_or(
                Holder::Unknown,
                |(start, allocation)| Holder::Allocation {
                    kind: allocation.kind,
                    range: start..start + allocation.len,
                },
            ),
            Allocator::None => Holder::Unknown,
        })
    }

    fn dlpack_device(&self, _kind: MemKind) -> DLDevice {
        DLDevice {
            device_type: DLDeviceType::OPENCL,
            device_id: i32::try_from(self.info.index).unwrap_or(-1),
        }
    }

    fn ipc(&self) -> Result<&dyn devbuf_core::IpcSharing> {
        Err(devbuf_core::ipc::unsupported(
            &self.info,
            crate::ipc::NO_IPC,
        ))
    }

    fn dlpack_export_refusal(&self) -> Option<String> {
        None
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

    /// No protocol carries an OpenCL producer's queue.
    unsafe fn order_after_producer(
        &self,
        _stream: ProducerStream<'_>,
        _sync: bool,
    ) -> Result<ProducerWork> {
        Ok(ProducerWork::default())
    }
}
