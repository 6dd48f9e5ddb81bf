//! The exchange protocols' ordering rules applied to memory, once for every backend: each backend
//! answers its runtime's questions ([`crate::Interop`], [`crate::Backend`]) in terms that name no
//! runtime, and this module applies the answers to a [`Buffer`]'s pending work. The Python layer
//! reduces its objects to [`ForeignObject`]s and asks through here and the registry
//! (`devbuf::queue_for_suai_context` and friends) without naming a backend.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use dlpark::ffi::{DLDevice, DLDeviceType};

use crate::interop::{ConsumerOrder, ForeignObject, ProducerStream};
use crate::ordering::{as_foreign_queue, handed_out};
use crate::{Buffer, Error, ForeignQueue, Queue, Result, StreamHandle, blocking};

/// The exchange protocols that belong to one backend's runtime.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Protocol {
    /// `__sycl_usm_array_interface__` and the dpctl attributes around it.
    Suai,
    /// `__cuda_array_interface__` and the CUDA stream protocol (`__cuda_stream__`).
    Cai,
}

/// The protocol as users meet it, for messages.
impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Protocol::Suai => "__sycl_usm_array_interface__",
            Protocol::Cai => "__cuda_array_interface__",
        })
    }
}

/// What a protocol's context object resolves to.
#[derive(Debug)]
pub struct ResolvedQueue {
    /// The queue for the memory.
    pub queue: Arc<dyn Queue>,
    /// The producer's queue whose pending work an import is ordered after, when the object names
    /// one (a context or a filter string names none).
    pub producer: Option<Arc<dyn ForeignQueue>>,
    /// Whether the answer depends on the object alone, so the caller may cache it by the
    /// object's identity (a context with several devices depends on the pointer's device too).
    pub same_for_every_pointer: bool,
}

/// Readies `buffer` for a zero-copy DLPack export to `device`, ordered for the consumer's
/// `stream` argument by the rule of the memory's backend ([`crate::Interop::dlpack_consumer`]),
/// without blocking the host where the runtime allows it; `None` where that backend has no rule
/// for `device`, leaving the export to the generic rule (waiting for pending work).
///
/// # Safety
/// A stream handle in `stream` names one of the consumer's live streams or queues (DLPack's
/// contract).
pub unsafe fn order_dlpack_export(
    buffer: &Buffer,
    device: DLDevice,
    stream: &ForeignObject<'_>,
) -> Option<Result<()>> {
    let home = buffer.queue();
    // SAFETY: the caller's promise about `stream`.
    let order = match unsafe { home.interop().dlpack_consumer(device, stream) }? {
        Ok(order) => order,
        Err(err) => return Some(Err(err)),
    };
    Some(blocking(|| match order {
        ConsumerOrder::Nothing => Ok(()),
        ConsumerOrder::AfterPendingWork(consumer) => {
            buffer.order_on_foreign(consumer.as_ref())?;
            buffer.record_consumer(consumer.as_ref());
            Ok(())
        }
        ConsumerOrder::AfterQueue(consumer) => {
            buffer.record_consumer(consumer.as_ref());
            buffer.order_consumer_after_queue(consumer.as_ref(), home)
        }
    }))
}

/// Readies `buffer` for a zero-copy DLPack export to `device`, for the consumer's `stream`
/// argument (the array API's rules): the memory's backend applies its own rule where it has one
/// for `device` ([`order_dlpack_export`]); otherwise -1 means the consumer synchronizes itself,
/// a CPU export takes only None (or -1), and everything that may still touch the memory is
/// waited for first ([`prepare_streamless_dlpack_export`]). The memory is marked handed out.
///
/// # Safety
/// As for [`order_dlpack_export`].
pub unsafe fn prepare_dlpack_export(
    buffer: &Buffer,
    device: DLDevice,
    stream: &ForeignObject<'_>,
) -> Result<()> {
    // SAFETY: the caller's promise about `stream`.
    if let Some(done) = unsafe { order_dlpack_export(buffer, device, stream) } {
        if done.is_ok() {
            buffer.mark_exported();
        }
        return done;
    }
    match stream {
        ForeignObject::Int(-1) => {
            buffer.mark_exported();
            return Ok(());
        }
        ForeignObject::Nothing => {}
        other if device.device_type == DLDeviceType::CPU => {
            return Err(Error::invalid(
                "stream",
                format!("a CPU export takes stream=None (or -1), not {other:?}"),
            ));
        }
        _ => {}
    }
    prepare_streamless_dlpack_export(buffer)
}

/// The generic rule of [`prepare_dlpack_export`] for `stream=None`, alone: everything that may
/// still touch the memory completes first (the host waits, without the GIL). Exporters go
/// straight here for a device whose backend has no rule for a consumer without a stream
/// ([`crate::Interop::dlpack_orders_streamless_export`]).
#[inline]
pub fn prepare_streamless_dlpack_export(buffer: &Buffer) -> Result<()> {
    if buffer.needs_synchronize() {
        blocking(|| buffer.synchronize())?;
    }
    buffer.mark_exported();
    Ok(())
}

/// CAI v3's producer option: when off, exports always say `stream: None` and the user takes over
/// synchronization. On by default; `DEVBUF_CAI_EXPORT_STREAM=0` turns it off for the process.
static CAI_EXPORT_STREAM: std::sync::LazyLock<AtomicBool> = std::sync::LazyLock::new(|| {
    AtomicBool::new(std::env::var("DEVBUF_CAI_EXPORT_STREAM").map_or(true, |v| v != "0"))
});

/// Whether CAI exports name the stream a consumer must synchronize with (the default) or always
/// say None ([`cai_export_stream`]).
pub fn set_cai_export_stream(enabled: bool) {
    CAI_EXPORT_STREAM.store(enabled, Ordering::Relaxed);
}

/// The `stream` entry of a CAI export of `buffer`: the native stream of the queue a consumer
/// must synchronize with to see every write that may still be pending ([`Buffer::sync_queue`]),
/// or `None`; the memory is marked handed out on that queue, where the consumer will work
/// (CAI v3 tells it to). `None` when [`set_cai_export_stream`] turned the option off.
pub fn cai_export_stream(buffer: &Buffer) -> Result<Option<usize>> {
    if !CAI_EXPORT_STREAM.load(Ordering::Relaxed) {
        buffer.mark_exported();
        return Ok(None);
    }
    // Asked before this export marks the memory handed out: a first export has no other
    // consumer's work to order after.
    let sync = buffer.sync_queue(buffer.queue());
    buffer.mark_exported();
    let Some(queue) = sync? else {
        return Ok(None);
    };
    buffer.hand_out_on(&queue);
    Ok(queue.interop().native_stream().map(StreamHandle::get))
}

/// An export that names the memory's own queue to the consumer, which works there (SUAI's
/// `syclobj`, dpctl's `sycl_queue`): everything that may still touch the memory is ordered before
/// the later work of the libraries that hold that queue's handle ([`Buffer::order_access`]).
/// Callers skip it when [`Buffer::needs_ordering_on_own_queue`] says nothing can be pending
/// (exports are hot paths).
pub fn export_on_own_queue(buffer: &Buffer) -> Result<()> {
    buffer.mark_exported();
    buffer.order_on_foreign(&*handed_out(Arc::clone(buffer.queue())))
}

/// An export through DLPack's C exchange table without synchronization: the consumer orders its
/// work after the device's current work stream (`current_work_stream`), `work_queue`, so
/// everything that may still touch the memory is ordered before that queue's later work, and the
/// memory is handed out on it.
pub fn exchange_table_export(buffer: &Buffer, work_queue: &Arc<dyn Queue>) -> Result<()> {
    if buffer.needs_synchronize() {
        let consumer = handed_out(Arc::clone(work_queue));
        blocking(|| buffer.order_on_foreign(&*consumer))?;
    }
    buffer.hand_out_on(work_queue);
    Ok(())
}

/// The `stream` argument a consumer on `queue` passes to a producer's `__dlpack__` (the array
/// API's rules), in the form the queue's protocols give it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProducerStreamArgument {
    /// A native stream, numbered as the protocols do ([`crate::Interop::native_stream`]); -1
    /// (no ordering) without `sync`.
    Stream(i64),
    /// The queue itself, as the runtime's queue object where it has one the producer's protocol
    /// takes (a `dpctl.SyclQueue` for SYCL), else `None`.
    Queue,
    /// `None`.
    Nothing,
}

/// The `stream` argument a consumer on `queue` passes to a producer's `__dlpack__`, asking it to
/// order its pending work before `queue`'s (unless `sync` is off).
pub fn producer_stream_argument(queue: &Arc<dyn Queue>, sync: bool) -> ProducerStreamArgument {
    if let Some(stream) = queue.interop().native_stream() {
        return ProducerStreamArgument::Stream(if sync { stream.get() as i64 } else { -1 });
    }
    if sync {
        return ProducerStreamArgument::Queue;
    }
    ProducerStreamArgument::Nothing
}

/// After a DLPack import onto `queue` whose producer was passed `queue`'s stream argument
/// ([`producer_stream_argument`] with `sync`; `passed` says whether one was): the producer made
/// `queue` wait for its work, so host views and other queues are ordered after `queue`'s work at
/// that point too (the producer's work is recorded as pending on `buffer`).
pub fn after_dlpack_import(
    buffer: &Buffer,
    queue: &Arc<dyn Queue>,
    passed: bool,
    sync: bool,
) -> Result<()> {
    if !(passed && sync) {
        return Ok(());
    }
    match as_foreign_queue(queue) {
        Some(ordered) => buffer.record_producer(ordered),
        None => Ok(()),
    }
}

/// Whether a DLPack import through the C exchange table without synchronization must follow the
/// producer's current work stream ([`order_after_exchange_work_stream`]): only queues with native
/// streams have one to follow.
pub fn follows_exchange_work_stream(buffer: &Buffer) -> bool {
    buffer.queue().interop().native_stream().is_some()
}

/// After a DLPack import through the C exchange table without synchronization, orders later work
/// on `buffer` after `stream`, the producer's current work stream for the device as the table's
/// `current_work_stream` reported it.
///
/// # Safety
/// `stream` names one of the producer's live streams, alive while the data is used (the exchange
/// API's contract).
pub unsafe fn order_after_exchange_work_stream(buffer: &Buffer, stream: usize) -> Result<()> {
    // SAFETY: the caller's promise about `stream`.
    unsafe { order_after_producer(buffer, ProducerStream::ExchangeWorkStream(stream), true) }
}

/// Orders later work on `buffer`, memory just imported, after the producer's `stream` as the
/// protocol that carried it names it, unless `sync` is off; a stream value the protocol forbids
/// is refused either way. The memory's backend decodes the stream and orders its queue
/// ([`crate::Interop::order_after_producer`]); the ordering becomes pending work on `buffer`.
///
/// # Safety
/// A stream handle in `stream` names one of the producer's live streams (the protocol's
/// contract), alive while the data is used.
pub unsafe fn order_after_producer(
    buffer: &Buffer,
    stream: ProducerStream<'_>,
    sync: bool,
) -> Result<()> {
    let queue = buffer.queue();
    // SAFETY: the caller's promise about `stream`.
    let work = unsafe { queue.interop().order_after_producer(stream, sync) }?;
    if let Some(event) = work.ordered {
        buffer.record_work(queue, event);
    }
    if let Some(producer) = work.hold_back {
        buffer.hold_back(producer);
    }
    Ok(())
}
