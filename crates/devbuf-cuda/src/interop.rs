//! The CUDA queue's exchange answers ([`devbuf_core::Interop`]): CUDA memory, handed to other
//! libraries with the stream it is ordered on, and the protocols' stream rules for exports to
//! (DLPack's `stream` argument) and imports from (CAI's `stream` entry, the exchange API's work
//! stream) other libraries.

use cudarc::driver::sys::CUstream;
use devbuf_core::dlpark::ffi::{DLDevice, DLDeviceType};
use devbuf_core::interop::{ConsumerOrder, Holder, ProducerStream, ProducerWork};
use devbuf_core::{
    Buffer, Error, Event, ExportedHandle, ForeignObject, Interop, MemKind, Queue, Result,
    StreamHandle, blocking, exchange,
};

use crate::event::{self, RawEvent};
use crate::foreign::own_stream;
use crate::memory;
use crate::protocol::{self, CU_STREAM_LEGACY, ProtocolStream};
use crate::queue::CudaQueue;

/// The exchange half: CUDA memory, handed to other libraries with the stream it is ordered on.
impl Interop for CudaQueue {
    fn dlpack_device(&self, kind: MemKind) -> DLDevice {
        let (device_type, device_id) = match kind {
            MemKind::Device => (DLDeviceType::CUDA, self.ordinal() as i32),
            MemKind::Host => (DLDeviceType::CUDAHOST, 0),
            MemKind::Shared => (DLDeviceType::CUDAMANAGED, 0),
            // Memory the driver does not know is plain host memory, if anything.
            MemKind::Unknown => (DLDeviceType::CPU, 0),
        };
        DLDevice {
            device_type,
            device_id,
        }
    }

    fn dlpack_export_refusal(&self) -> Option<String> {
        None
    }

    /// The allocation the pointer's attributes name (`memory::pointer_facts`: one driver call). The
    /// driver documents the range for allocations made by its allocators; where it bounds none
    /// (pinned memory on some drivers), the kind and device are what it tells. A stream-ordered pool may report the pool's mapped chunk rather
    /// than the block: a claim past the block but inside that chunk is not caught (it reaches
    /// other blocks of the pool, never unmapped memory).
    fn holder_of(&self, ptr: *const u8) -> Result<Holder> {
        let facts = crate::context::without_context(self.context().raw(), || {
            memory::pointer_facts(ptr as usize)
        })?;
        let (kind, range) = match facts {
            Some(facts) if facts.kind != MemKind::Device || facts.ordinal == self.ordinal() => {
                (facts.kind, facts.range)
            }
            _ => return Ok(Holder::Unknown),
        };
        Ok(match range {
            Some(range) if range.contains(&(ptr as usize)) => Holder::Allocation { kind, range },
            _ => Holder::Unbounded {
                kind,
                place: u64::from(self.ordinal()),
            },
        })
    }

    /// The context retained when the queue was made is still the device's primary context.
    fn check_memory_alive(&self) -> Result<()> {
        Ok(self.context().check_not_reset()?)
    }

    /// The stream itself: never 0 ([`CudaQueue::stream`]).
    fn native_stream(&self) -> Option<StreamHandle> {
        StreamHandle::new(self.stream())
    }

    /// The stream, as DLPack's exchange API names CUDA's work streams.
    fn dlpack_work_stream(&self) -> Option<usize> {
        Some(self.stream())
    }

    fn export_handle(&self) -> Option<ExportedHandle> {
        None
    }

    /// Consumers were given the stream itself (CAI, DLPack, the exchange table's work stream),
    /// and the ecosystem works on the legacy default stream by default (Numba's stream 0, CuPy's
    /// and PyTorch's null stream, RMM's default, DLPack's `stream=None`).
    fn untracked_foreign_work(&self) -> bool {
        true
    }

    /// Our stream is non-blocking, so the legacy default stream's work is ordered before it
    /// explicitly: an event recorded there, which our stream waits for. The legacy stream itself
    /// waits for the work enqueued before on every blocking stream of the context (NVIDIA's
    /// "Stream synchronization behavior"), so the event covers those streams too (Numba's
    /// `cuda.stream()`, CuPy's streams unless non-blocking). Work on our own stream is in order.
    fn order_after_foreign_work(&self) -> Result<()> {
        if self.stream() == CU_STREAM_LEGACY {
            return Ok(());
        }
        let mut mark = self.legacy_mark.lock();
        let event = match &mut *mark {
            Some(event) => event,
            None => mark.insert(RawEvent::create(self.context().raw())?),
        };
        event.record(CU_STREAM_LEGACY as CUstream)?;
        event::enqueue_wait(self.stream.raw(), self.context().raw(), event.raw())?;
        Ok(())
    }

    /// An event on the stream after the legacy stream's work; for another library's stream its
    /// owner destroyed, none, once the device has finished the work the driver still runs there.
    fn foreign_work_event(&self) -> Result<Option<Event>> {
        if !self.stream.is_alive() {
            self.wait_device()?;
            return Ok(None);
        }
        self.order_after_foreign_work()?;
        Ok(Some(Queue::record_event(self)?))
    }

    /// Other libraries work on the stream itself once they hold it: its events cover their work.
    /// Another library's stream its owner destroyed: an event that has completed, once the device
    /// has finished the work the driver still runs there.
    fn handed_out_event(&self) -> Result<Event> {
        if !self.stream.is_alive() {
            self.wait_device()?;
            return Ok(Event::new(devbuf_core::CompletedEvent));
        }
        Queue::record_event(self)
    }

    /// The stream handed out is the stream devbuf's commands run on.
    fn hands_out_command_queue(&self) -> bool {
        true
    }

    /// The stream handed out is the stream devbuf's commands run on; on another library's stream
    /// its owner destroyed, nobody can enqueue anything more.
    fn order_handed_out_after(&self, event: &Event) -> Result<()> {
        if !self.stream.is_alive() {
            return Ok(());
        }
        Queue::wait_event(self, event)
    }

    /// Every stream other libraries use devbuf memory on is in this queue's context, which
    /// [`Queue::wait_device`] synchronizes.
    fn wait_device_covers_every_queue(&self) -> bool {
        true
    }

    /// For a CUDA device, the consumer's `stream` (None or an int, DLPack's encoding) waits for
    /// an event recorded after all pending work on the memory, without blocking the host;
    /// nothing for -1, and 0 is refused.
    unsafe fn dlpack_consumer(
        &self,
        device: DLDevice,
        stream: &ForeignObject<'_>,
    ) -> Option<Result<ConsumerOrder>> {
        if !is_cuda_device(device) {
            return None;
        }
        let stream = match stream {
            ForeignObject::Nothing => None,
            ForeignObject::Int(value) => Some(*value),
            _ => {
                return Some(Err(Error::wrong_type(
                    "stream",
                    "expected None or an int (a CUDA stream)",
                )));
            }
        };
        Some(protocol::decode_dlpack_stream(stream).and_then(|consumer| {
            Ok(match consumer.handle() {
                None => ConsumerOrder::Nothing,
                // One of devbuf's own streams, handed back: the memory is handed out on it.
                Some(handle) => ConsumerOrder::AfterQueue(match own_stream(handle) {
                    Some(own) => devbuf_core::ordering::handed_out(own),
                    None => self.foreign_stream(handle)?,
                }),
            })
        }))
    }

    /// A CUDA device's `stream=None` is the legacy default stream (DLPack's encoding).
    fn dlpack_orders_streamless_export(&self, device: DLDevice) -> bool {
        is_cuda_device(device)
    }

    /// CAI's rule, where a producer that names no stream is taken to work on
    /// [`protocol::implied_cai_stream`], for a CAI's `stream` entry and for the work stream
    /// DLPack's exchange API reports (where NULL, 0, is the legacy default stream).
    unsafe fn order_after_producer(
        &self,
        stream: ProducerStream<'_>,
        sync: bool,
    ) -> Result<ProducerWork> {
        let stream = match stream {
            ProducerStream::CaiEntry(ForeignObject::Nothing) => protocol::implied_cai_stream(),
            ProducerStream::CaiEntry(ForeignObject::Int(value)) => value,
            ProducerStream::CaiEntry(other) => {
                return Err(Error::wrong_type(
                    "stream",
                    format!("a CAI stream is None or an int, not {other:?}"),
                ));
            }
            ProducerStream::ExchangeWorkStream(0) => CU_STREAM_LEGACY as i64,
            ProducerStream::ExchangeWorkStream(handle) => handle as i64,
        };
        let producer = protocol::decode_cai_stream(Some(stream))?;
        if !sync {
            return Ok(ProducerWork::default());
        }
        // SAFETY: the caller's promise about `stream`.
        blocking(|| unsafe { self.follow_producer(producer) })
    }

    fn ipc(&self) -> Result<&dyn devbuf_core::IpcSharing> {
        Ok(self)
    }
}

impl CudaQueue {
    /// Unless [`protocol::CAI_SYNC_ENV`] turned it off, orders this queue's work after the
    /// producer's (an event on the producer's stream that ours waits for: the host does not
    /// block), recorded as pending work on the memory, so that host views and re-exports wait for
    /// the producer's work too; and makes the producer's stream wait for every command devbuf
    /// later enqueues on the memory without waiting for it (CAI v3's rule for a consumer that
    /// works on its own stream).
    ///
    /// # Safety
    /// A [`ProtocolStream::Handle`] is a live `CUstream` (the CAI producer's promise) that stays
    /// alive while the memory is viewed.
    unsafe fn follow_producer(&self, producer: ProtocolStream) -> Result<ProducerWork> {
        let Some(handle) = producer.handle() else {
            return Ok(ProducerWork::default());
        };
        if !protocol::cai_import_sync_enabled() {
            return Ok(ProducerWork::default());
        }
        let mut hold_back = None;
        if handle != self.stream() {
            // The producer's stream, asked for its context once: an event there, which our stream
            // waits for.
            let producer_stream = self.foreign_stream(handle)?;
            let produced = producer_stream.record_event()?;
            Queue::wait_event(self, &produced)?;
            hold_back = (producer != ProtocolStream::PerThread).then_some(producer_stream);
        }
        Ok(ProducerWork {
            ordered: Some(Queue::record_event(self)?),
            hold_back,
        })
    }

    /// Imports a foreign CAI's `stream` entry for `buffer`, memory just imported with this queue:
    /// rejects 0, and orders as [`devbuf_core::Interop::order_after_producer`] does.
    ///
    /// # Safety
    /// `stream`, unless 1 or 2, is a live `CUstream` (the CAI producer's promise) that stays alive
    /// while `buffer` is viewed.
    pub unsafe fn sync_cai_import(&self, buffer: &Buffer, stream: Option<i64>) -> Result<()> {
        let queue = buffer.queue();
        if !queue
            .as_any()
            .downcast_ref::<CudaQueue>()
            .is_some_and(|own| std::ptr::eq(own, self))
        {
            return Err(Error::invalid(
                "stream",
                format!(
                    "the imported memory belongs to {}, not this queue",
                    queue.device()
                ),
            ));
        }
        let stream = match stream {
            Some(value) => ForeignObject::Int(value),
            None => ForeignObject::Nothing,
        };
        // SAFETY: the caller's promise about `stream`.
        unsafe { exchange::order_after_producer(buffer, ProducerStream::CaiEntry(stream), true) }
    }
}

/// The DLPack device types whose consumers name CUDA streams.
fn is_cuda_device(device: DLDevice) -> bool {
    matches!(
        device.device_type,
        DLDeviceType::CUDA | DLDeviceType::CUDAHOST | DLDeviceType::CUDAMANAGED
    )
}
