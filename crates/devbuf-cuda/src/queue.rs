//! [`CudaQueue`]: a device's primary context and one stream, as a [`devbuf_core::Queue`].

use std::any::Any;
use std::collections::{HashMap, HashSet};
use std::ptr::{self, NonNull};
use std::sync::Arc;

use cudarc::driver::sys::{self, CUcontext, CUresult, CUstream};
use devbuf_core::{
    Advice, DeviceInfo, Error, Event, Interop, Location, MemKind, Queue, Result, Rows, StreamOwner,
    copy_row_by_row,
};
use parking_lot::Mutex;

use crate::context::PrimaryContext;
use crate::device::{self, DeviceCaps};
use crate::event::{self, CudaEvent, RawEvent};
use crate::loader::{self, BACKEND, DriverError, call};
use crate::memory::{self, CudaKind, DeviceAllocator, NATIVE_ALIGNMENT};
use crate::peer;
use crate::protocol::{self, ProtocolStream};
use crate::rows;
use crate::stream::Stream;

/// A queue on one CUDA device: its primary context and one stream, on which every copy, fill and
/// stream-ordered allocation is enqueued. Usable from any number of threads at once.
#[derive(Debug)]
pub struct CudaQueue {
    device: DeviceInfo,
    /// The device's UUID (`GPU-…`), which names it in every process.
    pub(crate) uuid: String,
    /// An event recorded on the legacy default stream each time our stream must follow the work
    /// there ([`devbuf_core::Interop::order_after_foreign_work`]); made on first use, and reused: a stream's wait
    /// takes the state of the event's latest record when it is enqueued. Declared before the
    /// stream, so destroyed while the stream still holds the context.
    pub(crate) legacy_mark: Mutex<Option<RawEvent>>,
    pub(crate) stream: Stream,
    allocator: DeviceAllocator,
    can_map_host_memory: bool,
    /// Whether the host may touch managed memory while work runs on the device.
    pub(crate) concurrent_managed_access: bool,
    /// Aligned address handed out → address the driver returned, for allocations aligned beyond
    /// [`NATIVE_ALIGNMENT`] whose start had to move.
    over_aligned: Mutex<HashMap<usize, usize>>,
    /// Device memory from `cuMemAlloc` because the driver refused the stream-ordered allocator
    /// for it: it must be freed with `cuMemFree`.
    synchronous_fallbacks: Mutex<HashSet<usize>>,
}

impl CudaQueue {
    /// A queue on device `ordinal` with a new non-blocking stream in its primary context.
    pub fn new(ordinal: u32) -> Result<Self> {
        let (caps, context) = open_device(ordinal)?;
        let stream = Stream::create(&context)?;
        Ok(Self::with(caps, stream))
    }

    /// A queue that enqueues its work on `stream`, a stream someone else owns (CuPy's, torch's,
    /// Numba's), or 1 for the legacy default stream. The stream must belong to device `ordinal`'s
    /// primary context; 0 (ambiguous) and 2 (a different stream on every thread) are refused.
    ///
    /// # Safety
    /// `stream` stays alive for as long as the queue and every buffer allocated from it.
    pub unsafe fn with_stream(ordinal: u32, stream: usize) -> Result<Self> {
        // SAFETY: the caller's promise.
        unsafe { Self::with_borrowed_stream(ordinal, stream, None) }
    }

    /// [`CudaQueue::with_stream`], holding `owner` (which keeps the stream alive) while it lives.
    ///
    /// # Safety
    /// `stream` stays alive for as long as `owner` (or, without one, as the queue and every buffer
    /// allocated from it).
    pub(crate) unsafe fn with_borrowed_stream(
        ordinal: u32,
        stream: usize,
        owner: Option<StreamOwner>,
    ) -> Result<Self> {
        let (caps, context) = open_device(ordinal)?;
        match ProtocolStream::from_handle(stream)? {
            ProtocolStream::Legacy => {}
            ProtocolStream::Handle(handle) => {
                let owner = stream_context(&context, handle)?;
                if owner != context.raw() {
                    return Err(Error::invalid(
                        "stream",
                        format!(
                            "{handle:#x} is not a stream of {}'s primary context",
                            caps.info.selector
                        ),
                    ));
                }
            }
            ProtocolStream::PerThread | ProtocolStream::NoSync => {
                return Err(Error::invalid(
                    "stream",
                    "2 (the per-thread default stream) names a different stream on every thread, \
                     and a queue is shared between threads: pass a stream handle or 1",
                ));
            }
        }
        let stream = match owner {
            Some(owner) => Stream::borrow_owned_by(&context, stream as CUstream, owner),
            None => Stream::borrow(&context, stream as CUstream),
        };
        Ok(Self::with(caps, stream))
    }

    pub(crate) fn with(caps: DeviceCaps, stream: Stream) -> Self {
        CudaQueue {
            device: caps.info,
            uuid: caps.uuid,
            legacy_mark: Mutex::new(None),
            stream,
            allocator: if caps.memory_pools {
                DeviceAllocator::StreamOrdered
            } else {
                DeviceAllocator::Synchronous
            },
            can_map_host_memory: caps.can_map_host_memory,
            concurrent_managed_access: caps.concurrent_managed_access,
            over_aligned: Mutex::new(HashMap::new()),
            synchronous_fallbacks: Mutex::new(HashSet::new()),
        }
    }

    /// The device's ordinal.
    pub fn ordinal(&self) -> u32 {
        self.stream.context().ordinal()
    }

    /// The primary context the queue's stream belongs to.
    pub(crate) fn context(&self) -> &Arc<PrimaryContext> {
        self.stream.context()
    }

    /// The `CUstream` work is enqueued on; never 0, so it is also the integer that names it in a
    /// CAI `stream` entry and a `__dlpack__(stream=...)` argument (1 for the legacy default stream).
    pub fn stream(&self) -> usize {
        self.stream.raw() as usize
    }

    /// Whether device memory comes from the device's stream-ordered memory pool.
    pub fn uses_memory_pool(&self) -> bool {
        self.allocator == DeviceAllocator::StreamOrdered
    }

    /// Makes work enqueued on this queue from now on wait for all work enqueued so far on
    /// `producer`, without blocking the host: an event recorded on `producer`, waited on by our
    /// stream (what cuda.core does for a CAI `stream`).
    ///
    /// # Safety
    /// A [`ProtocolStream::Handle`] is a live `CUstream` (the driver cannot tell a stale or made-up
    /// handle from a real one).
    pub unsafe fn wait_for_stream(&self, producer: ProtocolStream) -> Result<()> {
        let Some(handle) = producer.handle() else {
            return Ok(());
        };
        if handle == self.stream() {
            return Ok(());
        }
        // An event must be recorded in its stream's own context (ours, reusing one of its events,
        // for the default streams and the streams of our primary context).
        let producer_context = stream_context(self.stream.context(), handle)?;
        let event = CudaEvent::record_in(self.context(), producer_context, handle as CUstream)?;
        event::enqueue_wait(self.stream.raw(), self.stream.context().raw(), event.raw())?;
        Ok(())
    }

    /// Makes work enqueued on `consumer` from now on wait for all work enqueued on this queue so
    /// far, without blocking the host (what a producer does for `__dlpack__(stream=...)`).
    ///
    /// # Safety
    /// A [`ProtocolStream::Handle`] is a live `CUstream`.
    pub unsafe fn make_stream_wait(&self, consumer: ProtocolStream) -> Result<()> {
        let Some(handle) = consumer.handle() else {
            return Ok(());
        };
        if handle == self.stream() {
            return Ok(());
        }
        let event = CudaEvent::record(self.stream.context(), self.stream.raw())?;
        let consumer_context = stream_context(self.stream.context(), handle)?;
        event::enqueue_wait(handle as CUstream, consumer_context, event.raw())?;
        Ok(())
    }

    /// Honours `__dlpack__(stream=...)` on memory of this queue: rejects 0, and orders the
    /// consumer's stream after this queue's work (nothing for -1).
    ///
    /// # Safety
    /// `stream`, unless -1, 1 or 2, is a live `CUstream` (the DLPack consumer's promise).
    pub unsafe fn sync_dlpack_export(&self, stream: Option<i64>) -> Result<()> {
        let consumer = protocol::decode_dlpack_stream(stream)?;
        // SAFETY: the caller's promise about `stream`.
        unsafe { self.make_stream_wait(consumer) }
    }

    /// What the driver says `ptr` is: `(device ordinal, kind)`, or `None` for memory CUDA does
    /// not know.
    pub fn classify(&self, ptr: usize) -> Result<Option<(u32, MemKind)>> {
        let context = self.context().raw();
        Ok(crate::context::without_context(context, || {
            memory::pointer_info(ptr)
        })?)
    }

    /// Whether the driver says all `len` bytes at `dst` lie in one pinned host allocation.
    fn is_pinned_host_range(&self, dst: usize, len: usize) -> Result<bool> {
        let Some(last) = len.checked_sub(1).and_then(|rest| dst.checked_add(rest)) else {
            return Ok(false);
        };
        let _current = self.context().enter()?;
        Ok(match memory::pointer_info(dst)? {
            Some((_, MemKind::Host)) => match memory::address_range(dst)? {
                Some(range) => range.contains(&dst) && range.contains(&last),
                None => false,
            },
            _ => false,
        })
    }

    fn out_of_memory(&self, kind: MemKind, size: usize, reason: String) -> Error {
        Error::OutOfMemory {
            kind,
            size,
            device: self.device.selector.clone(),
            reason,
        }
    }
}

/// The context a stream belongs to; 1 and 2 resolve in `ours`, the context current when used.
pub(crate) fn stream_context(
    ours: &PrimaryContext,
    handle: usize,
) -> Result<CUcontext, DriverError> {
    if matches!(
        ProtocolStream::from_handle(handle),
        Ok(ProtocolStream::Legacy | ProtocolStream::PerThread)
    ) {
        return Ok(ours.raw());
    }
    crate::context::without_context(ours.raw(), || {
        let mut context = ptr::null_mut();
        // SAFETY: `context` is a valid out-pointer; the stream's owner keeps it alive for this
        // call.
        call("cuStreamGetCtx", || unsafe {
            sys::cuStreamGetCtx(handle as CUstream, &mut context)
        })?;
        Ok(context)
    })
}

/// Checks that device `ordinal` exists and is usable, and retains its primary context.
pub(crate) fn open_device(ordinal: u32) -> Result<(DeviceCaps, Arc<PrimaryContext>)> {
    let driver = loader::loaded()?;
    if ordinal >= driver.device_count {
        return Err(Error::DeviceNotFound {
            selector: format!("{BACKEND}:{ordinal}"),
            reason: format!(
                "the driver shows this process {} CUDA device(s), {BACKEND}:0 to {BACKEND}:{}",
                driver.device_count,
                driver.device_count.saturating_sub(1)
            ),
        });
    }
    let caps = device::query(driver, ordinal)?;
    if let Some(reason) = &caps.info.unusable_reason {
        return Err(Error::Unsupported {
            device: caps.info.selector.clone(),
            what: "a devbuf queue".into(),
            reason: reason.clone(),
        });
    }
    let context = Arc::new(PrimaryContext::retain(ordinal)?);
    Ok((caps, context))
}

impl Queue for CudaQueue {
    fn device(&self) -> &DeviceInfo {
        &self.device
    }

    fn allocate(&self, kind: MemKind, size: usize, align: usize) -> Result<NonNull<u8>> {
        let Some(cuda_kind) = CudaKind::of(kind).filter(|_| self.supports(kind)) else {
            return Err(Error::Unsupported {
                device: self.device.selector.clone(),
                what: format!("{kind} allocation"),
                reason: format!("the device has no {kind} memory"),
            });
        };
        // CUDA aligns to 256 bytes; beyond that, over-allocate and move the start.
        let requested = memory::request_size(size, align).ok_or_else(|| {
            self.out_of_memory(kind, size, format!("padding to {align} bytes overflows"))
        })?;
        let (base, allocator) = memory::allocate(
            cuda_kind,
            requested,
            self.allocator,
            self.can_map_host_memory,
            self.context().raw(),
            self.stream.raw(),
        )
        .map_err(|err| {
            // Only a lack of memory is MemoryError; a broken context or a refused call is a fault.
            if err.is(CUresult::CUDA_ERROR_OUT_OF_MEMORY) {
                self.out_of_memory(kind, size, err.to_string())
            } else {
                err.into()
            }
        })?;
        if allocator != self.allocator && cuda_kind == CudaKind::Device {
            self.synchronous_fallbacks.lock().insert(base);
        }
        let aligned = memory::aligned_start(base, align);
        if aligned != base {
            self.over_aligned.lock().insert(aligned, base);
        }
        NonNull::new(aligned as *mut u8)
            .ok_or_else(|| self.out_of_memory(kind, size, "the driver returned null".into()))
    }

    fn allocates_in_order(&self, kind: MemKind) -> bool {
        kind == MemKind::Device && self.allocator == DeviceAllocator::StreamOrdered
    }

    /// As RMM's, CuPy's and PyTorch's: CAI v3 and DLPack take a null pointer for no elements.
    fn empty_buffers_are_null(&self) -> bool {
        true
    }

    /// Stream-ordered device memory (`cuMemFreeAsync`), unless the allocation fell back to
    /// `cuMemAlloc`; pinned and managed memory are freed at once.
    fn frees_in_order(&self, ptr: NonNull<u8>, kind: MemKind) -> bool {
        let in_order =
            CudaKind::of(kind).is_some_and(|kind| memory::frees_in_order(kind, self.allocator));
        if !in_order {
            return false;
        }
        let aligned = ptr.as_ptr() as usize;
        let base = self
            .over_aligned
            .lock()
            .get(&aligned)
            .copied()
            .unwrap_or(aligned);
        !self.synchronous_fallbacks.lock().contains(&base)
    }

    unsafe fn deallocate(&self, ptr: NonNull<u8>, kind: MemKind, _size: usize, align: usize) {
        let Some(cuda_kind) = CudaKind::of(kind) else {
            return;
        };
        let aligned = ptr.as_ptr() as usize;
        let base = if align > NATIVE_ALIGNMENT {
            self.over_aligned.lock().remove(&aligned).unwrap_or(aligned)
        } else {
            aligned
        };
        let allocator = if cuda_kind == CudaKind::Device
            && self.allocator == DeviceAllocator::StreamOrdered
            && self.synchronous_fallbacks.lock().remove(&base)
        {
            DeviceAllocator::Synchronous
        } else {
            self.allocator
        };
        // SAFETY: the caller passes back one allocation of ours, once, ordered after the work on
        // it (core waited where the free is not stream-ordered); `base` and `allocator` are what
        // the driver returned for it. A failure (the driver already shut down at process exit)
        // cannot be reported and leaves nothing to free.
        let _ = unsafe {
            memory::free(
                cuda_kind,
                base,
                allocator,
                self.context().raw(),
                self.stream.raw(),
            )
        };
    }

    unsafe fn copy(&self, dst: *mut u8, src: *const u8, len: usize) -> Result<()> {
        if len == 0 {
            return Ok(());
        }
        let (dst, src, stream) = (dst as usize, src as usize, self.stream.raw());
        let context = self.context().raw();
        let copied = crate::context::on_stream(context, stream, || {
            // SAFETY: the caller guarantees both ranges are valid for `len` bytes until the copy
            // completes; our stream is alive. With unified addressing the driver works out where
            // each side is.
            call("cuMemcpyAsync", || unsafe {
                sys::cuMemcpyAsync(dst as u64, src as u64, len, stream)
            })
        });
        match copied {
            Ok(()) => Ok(()),
            // Another device's pool memory, which a plain copy cannot reach without the pool's
            // access (`peer`): asked only then, so a copy within a device costs one call.
            Err(err) if err.is(CUresult::CUDA_ERROR_INVALID_VALUE) => {
                // SAFETY: as above.
                match unsafe { peer::copy(context, stream, self.ordinal(), dst, src, len)? } {
                    true => Ok(()),
                    false => Err(err.into()),
                }
            }
            Err(err) => Err(err.into()),
        }
    }

    unsafe fn copy_rows(&self, dst: *mut u8, src: *const u8, rows: Rows) -> Result<()> {
        if rows.count < 2 || rows.width == 0 {
            // SAFETY: the caller's.
            return unsafe { copy_row_by_row(self, dst, src, rows) };
        }
        // SAFETY: the caller's; our stream is alive.
        match unsafe { rows::copy_2d(self.context().raw(), self.stream.raw(), dst, src, rows) } {
            Ok(()) => Ok(()),
            // What the driver may refuse of a 2-D copy and not of a copy per row (`rows`): each
            // row then finds its way.
            // SAFETY: the caller's.
            Err(err) if err.is(CUresult::CUDA_ERROR_INVALID_VALUE) => unsafe {
                copy_row_by_row(self, dst, src, rows)
            },
            Err(err) => Err(err.into()),
        }
    }

    unsafe fn fill(&self, dst: *mut u8, byte: u8, len: usize) -> Result<()> {
        if len == 0 {
            return Ok(());
        }
        let stream = self.stream.raw();
        let filled = crate::context::on_stream(self.context().raw(), stream, || {
            // SAFETY: the caller guarantees `dst` is valid for `len` bytes until the fill
            // completes.
            call("cuMemsetD8Async", || unsafe {
                sys::cuMemsetD8Async(dst as u64, byte, len, stream)
            })
        });
        match filled {
            Ok(()) => Ok(()),
            // Pinned host memory the driver will not set (not mapped into the device's address
            // space): the host sets it, once the driver has shown that every byte is host memory
            // it allocated and earlier work is done (a broken context fails that wait). Nothing
            // else is ever touched from the host, whatever the address: the driver's error stands.
            Err(err) if err.code.is_some() && self.is_pinned_host_range(dst as usize, len)? => {
                self.stream.synchronize()?;
                // SAFETY: the caller guarantees `dst` is valid for `len` bytes, the driver says they
                // lie in one pinned host allocation, and earlier work on them has completed.
                unsafe { ptr::write_bytes(dst, byte, len) };
                Ok(())
            }
            Err(err) => Err(err.into()),
        }
    }

    fn wait(&self) -> Result<()> {
        Ok(self.stream.synchronize()?)
    }

    /// Every stream of every active primary context (the contexts CuPy, torch and Numba use
    /// too): consumers of exported memory may work on it from any device.
    fn wait_device(&self) -> Result<()> {
        let device_count = loader::loaded()?.device_count;
        Ok(crate::context::synchronize_active_primary_contexts(
            device_count,
        )?)
    }

    /// Managed memory is the host's only where the device allows concurrent access: elsewhere the
    /// host must not touch it while any work runs on the device, which devbuf cannot promise for a
    /// host view, so it copies instead.
    fn host_accessible(&self, kind: MemKind) -> bool {
        match kind {
            MemKind::Host => true,
            MemKind::Shared => self.concurrent_managed_access,
            MemKind::Device | MemKind::Unknown => false,
        }
    }

    fn record_event(&self) -> Result<Event> {
        Ok(Event::new(CudaEvent::record(
            self.stream.context(),
            self.stream.raw(),
        )?))
    }

    fn keeps_time(&self) -> bool {
        true
    }

    fn record_timed_event(&self) -> Result<Event> {
        Ok(Event::new(crate::event::record_timed(
            self.stream.context(),
            self.stream.raw(),
        )?))
    }

    fn is_idle(&self) -> Result<bool> {
        Ok(self.stream.is_idle()?)
    }

    /// Not once another library destroyed the stream this queue adopted.
    fn takes_work(&self) -> bool {
        self.stream.is_alive()
    }

    /// `cuMemGetInfo` in the stream's context: the device's free and total memory.
    fn memory_info(&self) -> Result<(usize, usize)> {
        let _current = crate::context::enter(self.stream.context().raw())?;
        let (mut free, mut total) = (0, 0);
        // SAFETY: both are valid out-pointers, and a context of the device is current.
        call("cuMemGetInfo", || unsafe {
            sys::cuMemGetInfo_v2(&mut free, &mut total)
        })?;
        Ok((free, total))
    }

    fn wait_event(&self, event: &Event) -> Result<()> {
        match event.downcast_ref::<CudaEvent>() {
            Some(cuda) => Ok(event::enqueue_wait(
                self.stream.raw(),
                self.stream.context().raw(),
                cuda.raw(),
            )?),
            // Another backend's event: the device cannot wait for it, the host can.
            None => event.wait(),
        }
    }

    unsafe fn prefetch(&self, ptr: *const u8, len: usize, to: Location) -> Result<()> {
        // SAFETY: forwarded from our caller.
        unsafe { self.prefetch_managed(ptr, len, to) }
    }

    unsafe fn advise(&self, ptr: *const u8, len: usize, advice: Advice) -> Result<()> {
        // SAFETY: forwarded from our caller.
        unsafe { self.advise_managed(ptr, len, advice) }
    }

    fn kind_of(&self, ptr: *const u8) -> MemKind {
        match self.classify(ptr as usize) {
            // Pinned and managed memory is reachable from every device; device memory is ours
            // only on our device.
            Ok(Some((ordinal, kind))) if kind != MemKind::Device || ordinal == self.ordinal() => {
                kind
            }
            _ => MemKind::Unknown,
        }
    }

    /// Device memory of a peer device (`cuDeviceCanAccessPeer`): copies reach it through
    /// `cuMemcpyPeerAsync` (the crate's `peer` module).
    fn copies_reach(&self, ptr: *const u8) -> bool {
        let context = self.context().raw();
        crate::context::without_context(context, || {
            peer::other_device(ptr as usize, self.ordinal())
        })
        .ok()
        .flatten()
        .is_some_and(|device| peer::can_access(self.ordinal(), device))
    }

    fn interop(&self) -> &dyn Interop {
        self
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
