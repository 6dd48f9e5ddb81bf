//! Other libraries' SYCL objects: which queue a SUAI `syclobj` or another library's queue handle
//! means (the registry's questions, see [`devbuf_core::exchange`]), adopting their queues and
//! contexts, and which memory DLPack cannot carry.

use std::ffi::c_void;
use std::sync::Arc;

use std::sync::Weak;

use devbuf_core::{Error, ForeignObject, ForeignQueue, MemKind, Queue, ResolvedQueue, Result};

use crate::loader::Runtime;
use crate::loader::SYCL;
use crate::memory::classify;
use crate::queue::{SyclQueue, queues_of};
use crate::raw::{Context, Device, RawQueue};

/// The runtime a `syclobj` handle belongs to (dpctl's capsule payloads are live handles of the
/// library it loaded, which devbuf loads too: the package's `__init__` points devbuf at it).
fn runtime_for_syclobj(runtime: Result<&'static Runtime>) -> Result<&'static Runtime> {
    runtime.map_err(|_| Error::invalid("syclobj", "the SYCL backend is not available"))
}

/// The queue a SUAI `syclobj` names for memory at `data`: a filter string (the root device's
/// default context), a "SyclQueueRef" (the producer's queue, whose work imports wait for) or a
/// "SyclContextRef" (the queue on the data's device in that context).
///
/// # Safety
/// A [`ForeignObject::Handle`] is a live handle of the kind its name says, for the call.
pub(crate) unsafe fn queue_for_syclobj(
    runtime: Result<&'static Runtime>,
    syclobj: &ForeignObject<'_>,
    data: usize,
) -> Result<ResolvedQueue> {
    let (queue, producer): (Arc<SyclQueue>, Option<Arc<dyn ForeignQueue>>) = match syclobj {
        ForeignObject::Text(filter) => (SyclQueue::open(runtime?, filter)?, None),
        ForeignObject::Handle { name, ptr } => {
            let runtime = runtime_for_syclobj(runtime)?;
            let payload = *ptr as *mut c_void;
            match name.to_bytes() {
                b"SyclQueueRef" | b"used_SyclQueueRef" => {
                    // SAFETY: a live "SyclQueueRef" payload (the caller's promise).
                    let (queue, producer) =
                        unsafe { SyclQueue::from_producer_queue_ref(runtime, payload) }?;
                    (queue, Some(producer))
                }
                b"SyclContextRef" | b"used_SyclContextRef" => {
                    // SAFETY: a live "SyclContextRef" payload (the caller's promise).
                    let (queue, _kind) = unsafe {
                        SyclQueue::from_context_ref_and_pointer(runtime, payload, data as *const u8)
                    }?;
                    (queue, None)
                }
                other => {
                    return Err(Error::invalid(
                        "syclobj",
                        format!(
                            "a capsule named {:?} is neither \"SyclQueueRef\" nor \"SyclContextRef\"",
                            String::from_utf8_lossy(other)
                        ),
                    ));
                }
            }
        }
        ForeignObject::NotACapsule => {
            return Err(Error::wrong_type(
                "syclobj",
                "_get_capsule() did not return a capsule",
            ));
        }
        other => {
            return Err(Error::invalid(
                "syclobj",
                format!("{other:?} is none of a SYCL queue, context, capsule or filter string"),
            ));
        }
    };
    let same_for_every_pointer = producer.is_some() || !queue.has_multi_device_context();
    Ok(ResolvedQueue {
        queue,
        producer,
        same_for_every_pointer,
    })
}

/// The queue for another library's SYCL object given as a device or a stream: a "SyclQueueRef"
/// handle (a `dpctl.SyclQueue`: the devbuf queue that hands out that very `sycl::queue`), or a
/// device's filter string (a `dpctl.SyclDevice`'s: the device's default queue).
///
/// # Safety
/// As for [`queue_for_syclobj`].
pub(crate) unsafe fn queue_for_device_object(
    runtime: Result<&'static Runtime>,
    object: &ForeignObject<'_>,
) -> Option<Result<Arc<dyn Queue>>> {
    match object {
        ForeignObject::Handle { name, ptr } if name.to_bytes() == b"SyclQueueRef" => {
            Some(runtime_for_syclobj(runtime).and_then(|runtime| {
                // SAFETY: a live "SyclQueueRef" payload (the caller's promise).
                let queue = unsafe { SyclQueue::from_queue_ref(runtime, *ptr as *mut c_void) }?;
                Ok(queue as Arc<dyn Queue>)
            }))
        }
        ForeignObject::Text(filter) => Some(
            runtime
                .and_then(|runtime| SyclQueue::open(runtime, filter))
                .map(|queue| queue as Arc<dyn Queue>),
        ),
        _ => None,
    }
}

impl SyclQueue {
    /// [`devbuf_core::Interop::dlpack_export_refusal`]: DLPack consumers look SYCL memory up in its device's
    /// default context, by dpctl's device index.
    pub(crate) fn dlpack_refusal(&self) -> Option<String> {
        if !self.is_default_context() {
            return Some(
                "SYCL memory bound to a context other than its device's default context cannot \
                 be exported through DLPack (consumers look it up in the default context)"
                    .into(),
            );
        }
        if self.dlpack_device_id().is_none() {
            return Some(
                "the SYCL device is not a root device dpctl lists: DLPack has no id for it".into(),
            );
        }
        None
    }
}

/// Adopting other libraries' queues and contexts.
impl SyclQueue {
    /// The devbuf queue that hands out a `sycl::queue` someone else owns: the payload of a
    /// "SyclQueueRef" capsule (dpctl's `SyclQueue._get_capsule()`). The device's default queue
    /// or a queue adopted before when it hands out that very queue; else a new one, registered,
    /// that hands it out (its commands on a private in-order queue when the caller's runs out of
    /// order, as dpctl's default queues do). The caller's queue is copied, never freed.
    ///
    /// # Safety
    /// `queue_ref` is a live `DPCTLSyclQueueRef` (a `sycl::queue*`) of the SYCL runtime `rt`
    /// belongs to, for the duration of the call.
    pub unsafe fn from_queue_ref(
        rt: &'static Runtime,
        queue_ref: *mut c_void,
    ) -> Result<Arc<SyclQueue>> {
        if queue_ref.is_null() {
            return Err(Error::invalid("syclobj", "the SyclQueueRef is null"));
        }
        if let Some(known) = SyclQueue::known_handing_out(rt, queue_ref) {
            return Ok(known);
        }
        let api = rt.api();
        // SAFETY: the caller guarantees the queue; Copy returns a new handle we own, or null.
        let copy = unsafe { RawQueue::from_raw(rt, api.DPCTLQueue_Copy(queue_ref.cast())) }
            .ok_or_else(|| Error::runtime(SYCL, "DPCTLQueue_Copy", "returned null"))?;
        // SAFETY: `copy` is live; the calls return new handles we own (copies of the queue's
        // context and device, which SYCL returns without throwing).
        let (context, device) = unsafe {
            (
                Context::from_raw(rt, api.DPCTLQueue_GetContext(copy.as_ptr())),
                Device::from_raw(rt, api.DPCTLQueue_GetDevice(copy.as_ptr())),
            )
        };
        let (Some(context), Some(device)) = (context, device) else {
            return Err(Error::runtime(
                SYCL,
                "DPCTLQueue_GetContext",
                "the queue has no context or device",
            ));
        };
        let queue = SyclQueue::handing_out(copy, context, device)?;
        Ok(SyclQueue::register(Arc::new(queue)))
    }

    /// Records `queue` (a user's stream, or another library's queue adopted) among the queues
    /// a handle another library passes back is matched with ([`SyclQueue::from_queue_ref`]).
    pub(crate) fn register(queue: Arc<SyclQueue>) -> Arc<SyclQueue> {
        let mut known = queues_of(queue.runtime()).adopted_queues.lock();
        known.retain(|queue| queue.strong_count() > 0);
        known.push(Arc::downgrade(&queue));
        drop(known);
        queue
    }

    /// The devbuf queue, still in use, that hands out the very `sycl::queue` `queue_ref` is a
    /// handle to: a device's default queue, or one adopted from another library.
    fn known_handing_out(rt: &'static Runtime, queue_ref: *mut c_void) -> Option<Arc<SyclQueue>> {
        let same = |known: &SyclQueue| {
            // SAFETY: both handles are live queues of `rt`; the call compares them.
            unsafe {
                rt.api()
                    .DPCTLQueue_AreEq(known.handed_out.as_ptr(), queue_ref.cast())
            }
        };
        let defaults = queues_of(rt).default_queues.lock();
        if let Some((_, known)) = defaults.iter().find(|(_, known)| same(known)) {
            return Some(Arc::clone(known));
        }
        drop(defaults);
        queues_of(rt)
            .adopted_queues
            .lock()
            .iter()
            .filter_map(Weak::upgrade)
            .find(|known| same(known))
    }

    /// Like [`SyclQueue::from_queue_ref`], for a SUAI producer's queue or a DLPack consumer's:
    /// also returns that queue as the libraries that hold it see it, whose work imports wait for
    /// and whose later work waits for devbuf's ([`devbuf_core::ordering::handed_out`]).
    ///
    /// # Safety
    /// As for [`SyclQueue::from_queue_ref`].
    pub unsafe fn from_producer_queue_ref(
        rt: &'static Runtime,
        queue_ref: *mut c_void,
    ) -> Result<(Arc<SyclQueue>, Arc<dyn ForeignQueue>)> {
        // SAFETY: the caller's guarantee.
        let queue = unsafe { SyclQueue::from_queue_ref(rt, queue_ref) }?;
        let producer = devbuf_core::ordering::handed_out(Arc::clone(&queue) as Arc<dyn Queue>);
        Ok((queue, producer))
    }

    /// A queue on a `sycl::context` someone else owns (the payload of a "SyclContextRef"
    /// capsule, dpctl's `SyclContext._get_capsule()`), on the context's first device. The
    /// caller's context is copied, never freed.
    ///
    /// # Safety
    /// `context_ref` is a live `DPCTLSyclContextRef` (a `sycl::context*`) of the SYCL runtime
    /// `rt` belongs to, for the duration of the call.
    pub unsafe fn from_context_ref(
        rt: &'static Runtime,
        context_ref: *mut c_void,
    ) -> Result<Arc<SyclQueue>> {
        // SAFETY: the caller's guarantee.
        let context = unsafe { borrowed_context(rt, context_ref) }?;
        let device = context
            .devices()
            .into_iter()
            .next()
            .ok_or_else(|| Error::invalid("syclobj", "the SYCL context has no devices"))?;
        SyclQueue::on_context(context, device)
    }

    /// Like [`SyclQueue::from_context_ref`], but on the device `usm_ptr` was allocated for, and
    /// with the pointer's kind: what importing SUAI data bound to a context needs. Memory the
    /// context does not know is an error naming `data`.
    ///
    /// # Safety
    /// As for [`SyclQueue::from_context_ref`]; `usm_ptr` is only looked up, never dereferenced.
    pub unsafe fn from_context_ref_and_pointer(
        rt: &'static Runtime,
        context_ref: *mut c_void,
        usm_ptr: *const u8,
    ) -> Result<(Arc<SyclQueue>, MemKind)> {
        // SAFETY: the caller's guarantee.
        let context = unsafe { borrowed_context(rt, context_ref) }?;
        let kind = classify(&context, context.knows_usm(), usm_ptr);
        if kind == MemKind::Unknown {
            return Err(Error::invalid(
                "data",
                format!("{usm_ptr:p} is not USM memory of the given SYCL context"),
            ));
        }
        // SAFETY: the pointer is USM of this context (classified above), so the runtime finds
        // its device instead of throwing; the call returns a new handle we own.
        let device = unsafe {
            Device::from_raw(
                rt,
                rt.api()
                    .DPCTLUSM_GetPointerDevice(usm_ptr.cast_mut().cast(), context.as_ptr()),
            )
        }
        .ok_or_else(|| Error::runtime(SYCL, "DPCTLUSM_GetPointerDevice", "returned null"))?;
        Ok((SyclQueue::on_context(context, device)?, kind))
    }
}

/// A second owned handle to a context the caller owns.
///
/// # Safety
/// `context_ref` is null or a live `DPCTLSyclContextRef` of the runtime `rt`.
pub(crate) unsafe fn borrowed_context(
    rt: &'static Runtime,
    context_ref: *mut c_void,
) -> Result<Context> {
    if context_ref.is_null() {
        return Err(Error::invalid("syclobj", "the SyclContextRef is null"));
    }
    // SAFETY: the caller's guarantee.
    unsafe { Context::copy_from(rt, context_ref.cast()) }
}
