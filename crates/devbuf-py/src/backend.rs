//! The backend-specific parts of the protocols: which queue a `syclobj` or a CUDA pointer means.
//! Everything else reaches Python through the core traits.

use devbuf::dlpark::ffi::{DLDevice, DLDeviceType};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use std::collections::VecDeque;
use std::sync::Arc;

use devbuf::cuda::CudaQueue;
use devbuf::dlpack;
use devbuf::sycl::{ForeignSyclQueue, Runtime, SyclQueue};
use devbuf::{ForeignQueue, Queue};
use parking_lot::Mutex;
use pyo3::exceptions::PyTypeError;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyCapsule, PyString};
use pyo3::{ffi, intern};

use crate::device::{PyQueue, shared_queue};
use crate::errors::IntoPyResult;

/// A DLPack device from `__dlpack_device__`'s pair.
pub(crate) fn dl_device(device_type: i32, device_id: i32) -> DLDevice {
    DLDevice {
        device_type: DLDeviceType(device_type as _),
        device_id,
    }
}

/// What a SUAI `syclobj` resolves to: the queue for its memory, and the producer's queue whose
/// pending work imports are ordered after (none for a context or a filter string, which name no
/// queue).
pub(crate) struct SyclobjQueue {
    pub(crate) queue: Py<PyQueue>,
    pub(crate) producer: Option<Arc<dyn ForeignQueue>>,
}

impl SyclobjQueue {
    fn clone_ref(&self, py: Python<'_>) -> SyclobjQueue {
        SyclobjQueue {
            queue: self.queue.clone_ref(py),
            producer: self.producer.clone(),
        }
    }
}

/// Queues recently resolved from `syclobj` objects (dpctl queues and contexts are long-lived and
/// shared by many arrays), keyed by identity; a context with several devices is not cached, since
/// the queue then depends on the pointer's device. Each entry holds its object, so an id is never
/// reused while cached; the cache is small so that it keeps few objects alive.
type SyclobjCache = Mutex<VecDeque<(Py<PyAny>, SyclobjQueue)>>;
static SYCLOBJ_QUEUES: PyOnceLock<SyclobjCache> = PyOnceLock::new();
const SYCLOBJ_CACHE_SIZE: usize = 16;

/// The queue a SUAI `syclobj` names, for memory at `data`: every form dpctl accepts — a devbuf
/// or dpctl queue, a dpctl context, any object with `_get_capsule()`, a "SyclQueueRef" or
/// "SyclContextRef" capsule, or a filter string (the root device's default context).
pub(crate) fn queue_from_syclobj(
    py: Python<'_>,
    syclobj: &Bound<'_, PyAny>,
    data: usize,
) -> PyResult<SyclobjQueue> {
    if let Ok(queue) = syclobj.cast::<PyQueue>() {
        return Ok(SyclobjQueue {
            producer: Arc::clone(&queue.get().queue).as_foreign_queue(),
            queue: queue.clone().unbind(),
        });
    }
    if let Ok(filter) = syclobj.cast::<PyString>() {
        return Ok(SyclobjQueue {
            queue: shared_queue(py, &format!("sycl:{}", filter.to_str()?))?,
            producer: None,
        });
    }
    let is_capsule = syclobj.cast::<PyCapsule>().is_ok();
    let cache = SYCLOBJ_QUEUES.get_or_init(py, Default::default);
    if !is_capsule && let Some((_, resolved)) = cache.lock().iter().find(|(obj, _)| obj.is(syclobj))
    {
        return Ok(resolved.clone_ref(py));
    }
    let capsule = if is_capsule {
        syclobj.clone()
    } else {
        match syclobj.getattr_opt(intern!(py, "_get_capsule"))? {
            Some(get_capsule) => get_capsule.call0()?,
            None => {
                return Err(PyValueError::new_err(format!(
                    "syclobj: {} is none of a SYCL queue, context, capsule or filter string",
                    syclobj.repr()?
                )));
            }
        }
    };
    let resolved = queue_from_capsule(py, &capsule, data)?;
    let per_pointer = sycl_queue(&resolved.queue.get().queue)
        .is_some_and(|sycl| resolved.producer.is_none() && sycl.has_multi_device_context());
    if !is_capsule && !per_pointer {
        let entry = (syclobj.clone().unbind(), resolved.clone_ref(py));
        let evicted = {
            let mut cache = cache.lock();
            let evicted = (cache.len() == SYCLOBJ_CACHE_SIZE)
                .then(|| cache.pop_front())
                .flatten();
            cache.push_back(entry);
            evicted
        };
        // Dropped unlocked: its object's finalizer may run Python code that imports again.
        drop(evicted);
    }
    Ok(resolved)
}

/// The queue a "SyclQueueRef" or "SyclContextRef" capsule names (borrowed: never freed here).
fn queue_from_capsule(
    py: Python<'_>,
    capsule: &Bound<'_, PyAny>,
    data: usize,
) -> PyResult<SyclobjQueue> {
    let capsule = capsule
        .cast::<PyCapsule>()
        .map_err(|_| PyTypeError::new_err("syclobj: _get_capsule() did not return a capsule"))?;
    let name = crate::import::capsule_name(capsule);
    // SAFETY: a live capsule and its own name.
    let payload = unsafe { ffi::PyCapsule_GetPointer(capsule.as_ptr(), name.as_ptr()) };
    if payload.is_null() {
        return Err(PyErr::fetch(py));
    }
    let runtime = sycl_runtime(py)?;
    let payload = payload as usize;
    // dpctl's capsule payloads are live handles of the library it loaded, which devbuf loads too
    // (the package's __init__ points devbuf at dpctl's own library).
    let (queue, producer): (Arc<dyn Queue>, _) = match name.to_bytes() {
        b"SyclQueueRef" | b"used_SyclQueueRef" => {
            let (queue, producer) = py
                // SAFETY: a live "SyclQueueRef" payload of this runtime (above).
                .detach(|| unsafe {
                    SyclQueue::from_producer_queue_ref(runtime, payload as *mut _)
                })
                .py()?;
            (queue as Arc<dyn Queue>, Some(producer))
        }
        b"SyclContextRef" | b"used_SyclContextRef" => {
            // SAFETY: a live "SyclContextRef" payload of this runtime (above).
            let (queue, _kind) = py
                .detach(|| unsafe {
                    SyclQueue::from_context_ref_and_pointer(
                        runtime,
                        payload as *mut _,
                        data as *const u8,
                    )
                })
                .py()?;
            (queue as Arc<dyn Queue>, None)
        }
        other => {
            return Err(PyValueError::new_err(format!(
                "syclobj: a capsule named {:?} is neither \"SyclQueueRef\" nor \"SyclContextRef\"",
                String::from_utf8_lossy(other)
            )));
        }
    };
    Ok(SyclobjQueue {
        queue: wrap_queue(py, queue)?,
        producer,
    })
}

/// The SYCL queue a DLPack consumer passes as `stream` (a `dpctl.SyclQueue`, a devbuf queue, or
/// any object whose `_get_capsule()` gives a "SyclQueueRef"), as another library's queue; `None`
/// for anything else.
pub(crate) fn foreign_sycl_queue(
    py: Python<'_>,
    stream: &Bound<'_, PyAny>,
) -> PyResult<Option<Arc<dyn ForeignQueue>>> {
    if let Ok(queue) = stream.cast::<PyQueue>() {
        return Ok(Arc::clone(&queue.get().queue).as_foreign_queue());
    }
    let Some(get_capsule) = stream.getattr_opt(intern!(py, "_get_capsule"))? else {
        return Ok(None);
    };
    let Ok(capsule) = get_capsule.call0()?.cast_into::<PyCapsule>() else {
        return Ok(None);
    };
    let name = crate::import::capsule_name(&capsule);
    if name != c"SyclQueueRef" {
        return Ok(None);
    }
    // SAFETY: a live capsule and its own name.
    let payload = unsafe { ffi::PyCapsule_GetPointer(capsule.as_ptr(), name.as_ptr()) };
    let runtime = sycl_runtime(py)?;
    // SAFETY: a live "SyclQueueRef" payload of dpctl's runtime, which devbuf loads too.
    let queue = unsafe { ForeignSyclQueue::from_queue_ref(runtime, payload) }.py()?;
    Ok(Some(Arc::new(queue)))
}

/// The devbuf queue for another library's SYCL queue given as `device=` (a `dpctl.SyclQueue`,
/// or any object whose `_get_capsule()` gives a "SyclQueueRef"): that very `sycl::queue` when it
/// is in order, else devbuf's in-order queue on its device and context. `None` for other objects.
pub(crate) fn queue_from_sycl_queue_object(
    py: Python<'_>,
    obj: &Bound<'_, PyAny>,
) -> PyResult<Option<Py<PyQueue>>> {
    let Some(get_capsule) = obj.getattr_opt(intern!(py, "_get_capsule"))? else {
        return Ok(None);
    };
    let Ok(capsule) = get_capsule.call0()?.cast_into::<PyCapsule>() else {
        return Ok(None);
    };
    if crate::import::capsule_name(&capsule) != c"SyclQueueRef" {
        return Ok(None);
    }
    // The pointer only matters for contexts, which this capsule is not.
    queue_from_capsule(py, capsule.as_any(), 0).map(|resolved| Some(resolved.queue))
}

/// The queue a SYCL DLPack producer's memory is imported on: the producer's own queue, named by
/// its `sycl_queue` (dpctl's and dpnp's convention), when that is a queue on `device_queue`'s
/// device in the default context (where DLPack memory lives); else `device_queue`, that device's
/// shared queue. So dpnp → devbuf → dpnp keeps dpnp's queue.
pub(crate) fn sycl_producer_queue(
    py: Python<'_>,
    producer: &Bound<'_, PyAny>,
    device_queue: Py<PyQueue>,
) -> PyResult<Py<PyQueue>> {
    if sycl_queue(&device_queue.get().queue).is_none() {
        return Ok(device_queue);
    }
    let Some(own) = producer.getattr_opt(intern!(py, "sycl_queue"))? else {
        return Ok(device_queue);
    };
    // Resolved through the `syclobj` cache (a producer's queue object is shared by its arrays);
    // an attribute that names no SYCL queue leaves the import on the device's queue.
    let Ok(SyclobjQueue { queue: own, .. }) = queue_from_syclobj(py, &own, 0) else {
        return Ok(device_queue);
    };
    let same_place = sycl_queue(&own.get().queue).is_some_and(|sycl| {
        sycl.is_default_context()
            && sycl.device().selector == device_queue.get().queue.device().selector
    });
    Ok(if same_place { own } else { device_queue })
}

/// What devbuf passes as `stream` to a kDLOneAPI producer's `__dlpack__`: its queue as a
/// `dpctl.SyclQueue` (made once per queue from its "SyclQueueRef" capsule), so that the producer
/// makes it wait for its work. `None` where dpctl is not installed.
pub(crate) fn dpctl_queue(py: Python<'_>, queue: &PyQueue) -> PyResult<Option<Py<PyAny>>> {
    let made = queue.dpctl_queue.get_or_try_init(py, || -> PyResult<_> {
        let Some(handle) = queue.queue.export_handle() else {
            return Ok(None);
        };
        let Ok(dpctl) = py.import(intern!(py, "dpctl")) else {
            return Ok(None);
        };
        let capsule = crate::device::handle_capsule(py, handle)?;
        let made = dpctl.getattr(intern!(py, "SyclQueue"))?.call1((capsule,))?;
        Ok(Some(made.unbind()))
    })?;
    Ok(made.as_ref().map(|queue| queue.clone_ref(py)))
}

/// The Python queue for a runtime queue: the shared one when it is its device's shared queue.
fn wrap_queue(py: Python<'_>, queue: Arc<dyn Queue>) -> PyResult<Py<PyQueue>> {
    if let Ok(shared) = shared_queue(py, &queue.device().selector)
        && Arc::ptr_eq(&shared.get().queue, &queue)
    {
        return Ok(shared);
    }
    PyQueue::wrap(py, queue)
}

/// The SYCL runtime devbuf loaded.
fn sycl_runtime(py: Python<'_>) -> PyResult<&'static Runtime> {
    let queue = shared_queue(py, "sycl")?;
    match sycl_queue(&queue.get().queue) {
        Some(sycl) => Ok(sycl.runtime()),
        None => Err(PyValueError::new_err(
            "syclobj: the SYCL backend is not available",
        )),
    }
}

/// The SYCL queue behind a devbuf queue, if it is one.
pub(crate) fn sycl_queue(queue: &Arc<dyn Queue>) -> Option<&SyclQueue> {
    queue.as_any().downcast_ref::<SyclQueue>()
}

/// Why memory of `queue` cannot leave through DLPack zero-copy on its own `device`, if it cannot:
/// DLPack has no pointer form for it (OpenCL), or it is SYCL memory outside its device's default
/// context, the only one dpctl and dpnp accept.
pub(crate) fn dlpack_export_refusal(queue: &Arc<dyn Queue>, device: DLDevice) -> Option<String> {
    if let Some(refusal) = dlpack::pointer_refusal(device) {
        return Some(refusal.into());
    }
    let sycl = sycl_queue(queue)?;
    if !sycl.is_default_context() {
        return Some(
            "SYCL memory bound to a context other than its device's default context cannot be \
             exported through DLPack (consumers look it up in the default context)"
                .into(),
        );
    }
    if sycl.dlpack_device_id().is_none() {
        return Some(
            "the SYCL device is not a root device dpctl lists: DLPack has no id for it".into(),
        );
    }
    None
}

/// The shared queue of the CUDA device that owns `ptr` (CAI's `data`).
pub(crate) fn queue_for_cuda_pointer(py: Python<'_>, ptr: usize) -> PyResult<Py<PyQueue>> {
    let found = py.detach(|| devbuf::cuda::queue_for_pointer(ptr)).py()?;
    match found {
        Some((queue, _)) => shared_queue(py, &queue.device().selector),
        None => Err(PyValueError::new_err(format!(
            "data: {ptr:#x} is not CUDA memory (the driver does not know the pointer)"
        ))),
    }
}

/// The CUDA queue behind a devbuf queue, if it is one.
pub(crate) fn cuda_queue(queue: &Arc<dyn Queue>) -> Option<&CudaQueue> {
    queue.as_any().downcast_ref::<CudaQueue>()
}
