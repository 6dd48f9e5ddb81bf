//! Streams devbuf orders work with but does not own: its own queues' streams as other libraries
//! see them once they hold the handle, and the stream a CAI producer names; and what a CAI import
//! does with that stream.

use std::sync::Arc;

use cudarc::driver::sys::{CUcontext, CUstream};
use devbuf_core::dlpark::ffi::{DLDevice, DLDeviceType};
use devbuf_core::{
    Buffer, Error, Event, ForeignObject, ForeignQueue, Protocol, Queue, Result, blocking,
};

use crate::context::PrimaryContext;
use crate::event::{self, CudaEvent};
use crate::protocol::{self, ProtocolStream};
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

/// Once another library holds a queue's stream (a CAI export's `stream`, a DLPack consumer's
/// argument), work it enqueues there is ordered like ours: the queue's events cover it.
impl ForeignQueue for CudaQueue {
    fn record_event(&self) -> Result<Event> {
        Queue::record_event(self)
    }

    fn wait_event(&self, event: &Event) -> Result<()> {
        Queue::wait_event(self, event)
    }
}

impl CudaQueue {
    /// [`Queue::order_dlpack_export`] for memory of this queue: for a CUDA device, the consumer's
    /// `stream` (None or an int, DLPack's encoding) is made to wait for all pending work on
    /// `buffer`, without blocking the host.
    ///
    /// # Safety
    /// As for [`CudaQueue::sync_dlpack_export`].
    pub(crate) unsafe fn order_dlpack_export_to(
        &self,
        buffer: &Buffer,
        device: DLDevice,
        stream: &ForeignObject<'_>,
    ) -> Option<Result<()>> {
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
        Some(blocking(|| {
            // The queue that sees all pending work (joined there when it is on several), else ours.
            let pending = buffer.sync_queue(buffer.queue())?;
            let producer = pending
                .as_ref()
                .and_then(|queue| queue.as_any().downcast_ref::<CudaQueue>())
                .unwrap_or(self);
            // SAFETY: the caller's promise about `stream`; 0 is refused inside.
            unsafe { producer.sync_dlpack_export(stream) }
        }))
    }

    /// [`Queue::order_after_producer_stream`]: CAI's rule, where a producer that names no stream
    /// is taken to work on [`protocol::implied_cai_stream`].
    ///
    /// # Safety
    /// As for [`CudaQueue::sync_cai_import`].
    pub(crate) unsafe fn order_after_cai_stream(
        &self,
        buffer: &Buffer,
        protocol: Protocol,
        stream: Option<i64>,
        sync: bool,
    ) -> Result<()> {
        if protocol != Protocol::Cai {
            return Ok(());
        }
        let stream = Some(stream.unwrap_or_else(protocol::implied_cai_stream));
        if !sync {
            return protocol::decode_cai_stream(stream).map(drop);
        }
        // SAFETY: the caller's promise about `stream`.
        blocking(|| unsafe { self.sync_cai_import(buffer, stream) })
    }

    /// Imports a foreign CAI's `stream` entry for `buffer`, memory just imported with this queue.
    /// Rejects 0; unless [`protocol::CAI_SYNC_ENV`] turned it off, it
    /// - orders this queue's work after the producer's (an event on the producer's stream that
    ///   ours waits for: the host does not block), and records that as pending work on `buffer`,
    ///   so that host views and re-exports wait for the producer's work too;
    /// - makes the producer's stream wait for every command devbuf later enqueues on `buffer`
    ///   without waiting for it (CAI v3's rule for a consumer that works on its own stream).
    ///
    /// # Safety
    /// `stream`, unless 1 or 2, is a live `CUstream` (the CAI producer's promise) that stays alive
    /// while `buffer` is viewed.
    pub unsafe fn sync_cai_import(&self, buffer: &Buffer, stream: Option<i64>) -> Result<()> {
        let producer = protocol::decode_cai_stream(stream)?;
        let Some(handle) = producer.handle() else {
            return Ok(());
        };
        if !protocol::cai_import_sync_enabled() {
            return Ok(());
        }
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
        // SAFETY: the caller's promise about `stream`.
        unsafe { self.wait_for_stream(producer) }?;
        buffer.record_work(queue, Queue::record_event(self)?);
        if handle != self.stream() && producer != ProtocolStream::PerThread {
            let context = stream_context(self.context(), handle)?;
            buffer.hold_back(Arc::new(ForeignStream {
                handle,
                context,
                primary: Arc::clone(self.context()),
            }));
        }
        Ok(())
    }
}
