//! What the exchange protocols ask of SYCL (see [`devbuf_core::exchange`]): which queue a SUAI
//! `syclobj` or another library's queue handle means, which memory DLPack cannot carry, and how a
//! DLPack export orders work for a consumer's queue.

use std::ffi::c_void;
use std::sync::Arc;

use devbuf_core::{Error, ForeignObject, ForeignQueue, Queue, ResolvedQueue, Result};

use crate::queue::SyclQueue;
use crate::runtime::Runtime;

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

/// The queue for another library's SYCL queue given as a device (a "SyclQueueRef" handle): that
/// very `sycl::queue` when it is in order, else devbuf's in-order queue on its device and context.
///
/// # Safety
/// As for [`queue_for_syclobj`].
pub(crate) unsafe fn queue_for_device_object(
    runtime: Result<&'static Runtime>,
    object: &ForeignObject<'_>,
) -> Option<Result<Arc<dyn Queue>>> {
    let ForeignObject::Handle { name, ptr } = object else {
        return None;
    };
    if name.to_bytes() != b"SyclQueueRef" {
        return None;
    }
    Some(runtime_for_syclobj(runtime).and_then(|runtime| {
        // SAFETY: a live "SyclQueueRef" payload (the caller's promise).
        let queue = unsafe { SyclQueue::from_queue_ref(runtime, *ptr as *mut c_void) }?;
        Ok(queue as Arc<dyn Queue>)
    }))
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
