//! Streams devbuf orders work with but does not own: its own queues' streams as other libraries
//! see them once they hold the handle, and the stream a CAI producer names; and what a CAI import
//! does with that stream.

use std::sync::Arc;

use cudarc::driver::sys::{CUcontext, CUstream};
use devbuf_core::dlpark::ffi::{DLDevice, DLDeviceType};
use devbuf_core::interop::{ConsumerOrder, ProducerStream, ProducerWork};
use devbuf_core::{
    Buffer, Error, Event, ForeignObject, ForeignQueue, Queue, Result, blocking, exchange,
};

use crate::context::PrimaryContext;
use crate::event::{self, CudaEvent};
use crate::protocol::{self, CU_STREAM_LEGACY, ProtocolStream};
use crate::queue::{CudaQueue, stream_context};

/// Another library's stream, which its owner keeps alive while devbuf uses it.
#[derive(Debug)]
struct ForeignStream {
    handle: usize,
    /// The context the stream belongs to (for 1 and 2, the primary context, where they resolve).
    context: CUcontext,
    /// The primary context of the device the stream was imported with, kept alive with it.
    primary: Arc<PrimaryContext>,
}

// SAFETY: stream and context handles are usable from any thread; the owner keeps them alive.
unsafe impl Send for ForeignStream {}
// SAFETY: as above; `&ForeignStream` only records and waits, which the driver serialises.
unsafe impl Sync for ForeignStream {}

impl ForeignQueue for ForeignStream {
    fn record_event(&self) -> Result<Event> {
        let event = CudaEvent::record_in(&self.primary, self.context, self.handle as CUstream)?;
        Ok(Event::new(event))
    }

    fn wait_event(&self, event: &Event) -> Result<()> {
        match event.downcast_ref::<CudaEvent>() {
            Some(cuda) => Ok(event::enqueue_wait(
                self.handle as CUstream,
                self.context,
                cuda.raw(),
            )?),
            // Another backend's event: the stream cannot wait for it, the host can.
            None => event.wait(),
        }
    }
}

impl CudaQueue {
    /// [`devbuf_core::Interop::dlpack_consumer`] for memory of this queue: for a CUDA device, the consumer's
    /// `stream` (None or an int, DLPack's encoding) is the stream that waits.
    ///
    /// # Safety
    /// A stream handle in `stream`, unless -1, 1 or 2, is a live `CUstream` (the DLPack
    /// consumer's promise).
    pub(crate) unsafe fn dlpack_consumer_stream(
        &self,
        device: DLDevice,
        stream: &ForeignObject<'_>,
    ) -> Option<Result<ConsumerOrder>> {
        let cuda_device = matches!(
            device.device_type,
            DLDeviceType::CUDA | DLDeviceType::CUDAHOST | DLDeviceType::CUDAMANAGED
        );
        if !cuda_device {
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
                Some(handle) => ConsumerOrder::AfterQueue(self.foreign_stream(handle)?),
            })
        }))
    }

    /// Another library's stream `handle` (1 and 2 resolved in this queue's context).
    fn foreign_stream(&self, handle: usize) -> Result<Arc<dyn ForeignQueue>> {
        let context = stream_context(self.context(), handle)?;
        Ok(Arc::new(ForeignStream {
            handle,
            context,
            primary: Arc::clone(self.context()),
        }))
    }

    /// [`devbuf_core::Interop::order_after_producer`]: CAI's rule, where a producer that names no stream is
    /// taken to work on [`protocol::implied_cai_stream`]; the exchange API's work stream is
    /// read the same way, its NULL being the legacy default stream.
    ///
    /// # Safety
    /// As for [`CudaQueue::sync_cai_import`].
    pub(crate) unsafe fn producer_work(
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
        // SAFETY: the caller's promise about `producer`.
        unsafe { self.wait_for_stream(producer) }?;
        let hold_back = (handle != self.stream() && producer != ProtocolStream::PerThread)
            .then(|| self.foreign_stream(handle))
            .transpose()?;
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
