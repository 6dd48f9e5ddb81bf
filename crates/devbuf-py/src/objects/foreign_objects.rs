//! Python objects other libraries hand over (SUAI's `syclobj`, DLPack's `stream`, a `device=`
//! argument) reduced to [`ForeignObject`]s, and the backends' answers about them turned back into
//! Python queues. Which runtime an object belongs to is the backends' question (through the
//! `devbuf` registry); this module only reads Python objects and caches by identity.

use std::collections::VecDeque;
use std::sync::Arc;

use devbuf::{ForeignObject, ForeignQueue, Protocol, Queue};
use parking_lot::Mutex;
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyCapsule, PyInt, PyString};
use pyo3::{ffi, intern};

use crate::errors::IntoPyResult;
use crate::objects::device::PyDevice;
use crate::objects::queue::{PyQueue, handle_capsule, shared_queue};

/// The name of a capsule (empty when it has none).
pub(crate) fn capsule_name<'a>(capsule: &'a Bound<'_, PyCapsule>) -> &'a std::ffi::CStr {
    // SAFETY: a live capsule; its name, if any, lives as long as the capsule.
    let name = unsafe { ffi::PyCapsule_GetName(capsule.as_ptr()) };
    if name.is_null() {
        c""
    } else {
        // SAFETY: a NUL-terminated name owned by the capsule.
        unsafe { std::ffi::CStr::from_ptr(name) }
    }
}

/// A Python object held for one question to the backends: the capsule (if any) its handle was
/// read from stays alive with it.
enum Held<'py> {
    Nothing,
    Int(i64),
    Text(Bound<'py, PyString>),
    /// A devbuf queue, and the queue as the libraries it was handed to see it.
    Queue(Arc<dyn Queue>, Option<Arc<dyn ForeignQueue>>),
    Capsule(Bound<'py, PyCapsule>, usize),
    NotACapsule,
    Other(String),
}

impl Held<'_> {
    /// The object as the backends see it, valid while `self` is.
    fn view(&self) -> PyResult<ForeignObject<'_>> {
        Ok(match self {
            Held::Nothing => ForeignObject::Nothing,
            Held::Int(value) => ForeignObject::Int(*value),
            Held::Text(text) => ForeignObject::Text(text.to_str()?),
            Held::Queue(queue, foreign) => ForeignObject::Queue {
                device: queue.device(),
                foreign: foreign.as_ref(),
            },
            Held::Capsule(capsule, ptr) => ForeignObject::Handle {
                name: capsule_name(capsule),
                ptr: *ptr,
            },
            Held::NotACapsule => ForeignObject::NotACapsule,
            Held::Other(repr) => ForeignObject::Other(repr),
        })
    }
}

/// Reads `obj`: None, an int, a string, a devbuf queue, a capsule, or an object whose
/// `_get_capsule()` gives its runtime handle (dpctl's queues and contexts), else its repr.
fn hold<'py>(obj: &Bound<'py, PyAny>) -> PyResult<Held<'py>> {
    let py = obj.py();
    if obj.is_none() {
        return Ok(Held::Nothing);
    }
    if let Ok(queue) = obj.cast::<PyQueue>() {
        // A syclobj: memory on a stream since closed still names its queue this way.
        let queue = queue.get().held();
        return Ok(Held::Queue(
            Arc::clone(queue),
            devbuf::ordering::as_foreign_queue(queue),
        ));
    }
    if obj.is_instance_of::<PyInt>() {
        if let Ok(value) = obj.extract::<i64>() {
            return Ok(Held::Int(value));
        }
    } else if let Ok(text) = obj.cast::<PyString>() {
        return Ok(Held::Text(text.clone()));
    }
    let capsule = match obj.cast::<PyCapsule>() {
        Ok(capsule) => Some(capsule.clone()),
        Err(_) => match obj.getattr_opt(intern!(py, "_get_capsule"))? {
            Some(get_capsule) => match get_capsule.call0()?.cast_into::<PyCapsule>() {
                Ok(capsule) => Some(capsule),
                Err(_) => return Ok(Held::NotACapsule),
            },
            None => None,
        },
    };
    match capsule {
        Some(capsule) => {
            let name = capsule_name(&capsule);
            // SAFETY: a live capsule and its own name.
            let payload = unsafe { ffi::PyCapsule_GetPointer(capsule.as_ptr(), name.as_ptr()) };
            if payload.is_null() {
                return Err(PyErr::fetch(py));
            }
            Ok(Held::Capsule(capsule, payload as usize))
        }
        None => Ok(Held::Other(obj.repr()?.to_string())),
    }
}

/// Asks `question` about `obj`, reduced to a [`ForeignObject`] that stays valid for the call.
pub(crate) fn ask<T>(
    obj: &Bound<'_, PyAny>,
    question: impl FnOnce(&ForeignObject<'_>) -> T,
) -> PyResult<T> {
    let held = hold(obj)?;
    Ok(question(&held.view()?))
}

/// What a SUAI `syclobj` resolves to: the queue for its memory, and the producer's queue whose
/// pending work imports are ordered after.
pub(crate) struct ContextQueue {
    pub(crate) queue: Py<PyQueue>,
    pub(crate) producer: Option<Arc<dyn ForeignQueue>>,
}

impl ContextQueue {
    fn clone_ref(&self, py: Python<'_>) -> ContextQueue {
        ContextQueue {
            queue: self.queue.clone_ref(py),
            producer: self.producer.clone(),
        }
    }
}

/// Queues recently resolved from `syclobj` objects (other libraries' queues and contexts are
/// long-lived and shared by many arrays), keyed by identity, when the backend says the answer does
/// not depend on the pointer. Each entry holds its object, so an id is never reused while cached;
/// the cache is small so that it keeps few objects alive. Taken with `try_lock` (as every cache of
/// this layer): where it is busy (a finalizer run from inside it, another thread) the call goes
/// without it instead of waiting for it while attached.
static CONTEXT_QUEUES: Mutex<VecDeque<(Py<PyAny>, ContextQueue)>> = Mutex::new(VecDeque::new());
const CONTEXT_CACHE_SIZE: usize = 16;

/// The queue a SUAI `syclobj` names, for memory at `data`.
pub(crate) fn queue_from_syclobj(
    py: Python<'_>,
    syclobj: &Bound<'_, PyAny>,
    data: usize,
) -> PyResult<ContextQueue> {
    // Only objects of other kinds than those below are cached: a hit is asked first (the common
    // case: a producer hands out one queue object for all its arrays).
    if let Some(resolved) = CONTEXT_QUEUES.try_lock().and_then(|cache| {
        cache
            .iter()
            .find(|(obj, _)| obj.is(syclobj))
            .map(|(_, resolved)| resolved.clone_ref(py))
    }) {
        return Ok(resolved);
    }
    if let Ok(queue) = syclobj.cast::<PyQueue>() {
        return Ok(ContextQueue {
            producer: devbuf::ordering::as_foreign_queue(queue.get().queue()?),
            queue: queue.clone().unbind(),
        });
    }
    // Strings and capsules are not cached: a string is cheap to resolve, a capsule is made per use.
    let by_identity = !syclobj.is_instance_of::<PyString>() && syclobj.cast::<PyCapsule>().is_err();
    let resolved = ask(syclobj, |object| {
        // SAFETY: `ask` holds the capsule a handle was read from for the call.
        py.detach(|| unsafe { devbuf::queue_for_suai_context(object, data) })
    })?
    .py()?;
    let cacheable = by_identity && resolved.same_for_every_pointer;
    let resolved = ContextQueue {
        queue: wrap_queue(py, resolved.queue)?,
        producer: resolved.producer,
    };
    if cacheable {
        let entry = (syclobj.clone().unbind(), resolved.clone_ref(py));
        let evicted = CONTEXT_QUEUES.try_lock().map(|mut cache| {
            let evicted = (cache.len() == CONTEXT_CACHE_SIZE)
                .then(|| cache.pop_front())
                .flatten();
            cache.push_back(entry);
            evicted
        });
        // Dropped outside the cache: its object's finalizer may run Python code that imports
        // again.
        drop(evicted);
    }
    Ok(resolved)
}

/// The devbuf queue for another library's queue object given as `device=` or `stream=`: one
/// whose `_get_capsule()` gives its runtime handle (a `dpctl.SyclQueue`); `None` for objects no
/// backend owns.
pub(crate) fn queue_from_device_object(
    py: Python<'_>,
    obj: &Bound<'_, PyAny>,
) -> PyResult<Option<Py<PyQueue>>> {
    // A capsule getter that gives no capsule names no device either.
    if obj.getattr_opt(intern!(py, "_get_capsule"))?.is_none() {
        return Ok(None);
    }
    let found = ask(obj, |object| {
        // SAFETY: `ask` holds the capsule a handle was read from for the call.
        py.detach(|| unsafe { devbuf::queue_for_device_object(object) })
    })?;
    match found {
        Some(queue) => Ok(Some(wrap_queue(py, queue.py()?)?)),
        None => Ok(None),
    }
}

/// The devbuf selector of another library's device object given as `device=`: one named by its
/// `filter_string` (a `dpctl.SyclDevice`), as the backend that owns such names reads it; `None`
/// for other objects.
fn selector_of_device_object(py: Python<'_>, obj: &Bound<'_, PyAny>) -> PyResult<Option<String>> {
    let Some(filter) = obj
        .getattr_opt(intern!(py, "filter_string"))?
        .and_then(|filter| filter.cast_into::<PyString>().ok())
    else {
        return Ok(None);
    };
    let filter = filter.to_str()?;
    // SAFETY: a string holds no handle.
    let found =
        py.detach(|| unsafe { devbuf::queue_for_device_object(&ForeignObject::Text(filter)) });
    Ok(match found {
        Some(queue) => Some(queue.py()?.device().selector.clone()),
        None => None,
    })
}

/// Whether memory of `queue` is SUAI's (and dpctl's).
pub(crate) fn speaks_suai(queue: &Arc<dyn Queue>) -> bool {
    devbuf::speaks(queue.device(), Protocol::Suai)
}

/// The queue a DLPack producer's memory is imported on: the producer's own queue, named by its
/// `sycl_queue` (dpctl's and dpnp's convention), when that queue is on `device_queue`'s device and
/// may carry DLPack memory; else `device_queue`, that device's shared queue. So dpnp → devbuf →
/// dpnp keeps dpnp's queue.
pub(crate) fn dlpack_producer_queue(
    py: Python<'_>,
    producer: &Bound<'_, PyAny>,
    device_queue: Py<PyQueue>,
) -> PyResult<Py<PyQueue>> {
    if !speaks_suai(device_queue.get().queue()?) {
        return Ok(device_queue);
    }
    let Some(own) = producer.getattr_opt(intern!(py, "sycl_queue"))? else {
        return Ok(device_queue);
    };
    // Resolved through the `syclobj` cache (a producer's queue object is shared by its arrays);
    // an attribute that names no queue leaves the import on the device's queue.
    let Ok(ContextQueue { queue: own, .. }) = queue_from_syclobj(py, &own, 0) else {
        return Ok(device_queue);
    };
    let own_queue = own.get().queue()?;
    let same_place = own_queue.interop().dlpack_export_refusal().is_none()
        && own_queue.device().selector == device_queue.get().queue()?.device().selector;
    Ok(if same_place { own } else { device_queue })
}

/// `queue` as a `dpctl.SyclQueue` (made once per queue from its exported handle): what devbuf
/// passes as `stream` to a kDLOneAPI producer, and `Queue.sycl_queue`. `None` where the queue
/// exports no handle or dpctl is not installed.
pub(crate) fn dpctl_queue(py: Python<'_>, queue: &PyQueue) -> PyResult<Option<Py<PyAny>>> {
    let made = queue.dpctl_queue.get_or_try_init(py, || -> PyResult<_> {
        let Some(handle) = queue.held().interop().export_handle() else {
            return Ok(None);
        };
        let Ok(dpctl) = py.import(intern!(py, "dpctl")) else {
            return Ok(None);
        };
        let capsule = handle_capsule(py, handle)?;
        let made = dpctl.getattr(intern!(py, "SyclQueue"))?.call1((capsule,))?;
        Ok(Some(made.unbind()))
    })?;
    Ok(made.as_ref().map(|queue| queue.clone_ref(py)))
}

/// The Python queue for a runtime queue: the shared one when it is its device's shared queue.
fn wrap_queue(py: Python<'_>, queue: Arc<dyn Queue>) -> PyResult<Py<PyQueue>> {
    if let Ok(shared) = shared_queue(py, &queue.device().selector)
        && Arc::ptr_eq(shared.get().queue()?, &queue)
    {
        return Ok(shared);
    }
    PyQueue::wrap(py, queue)
}

/// The selector a `device=` argument names.
pub(crate) fn selector_of(device: &Bound<'_, PyAny>) -> PyResult<String> {
    if let Ok(selector) = device.cast::<PyString>() {
        return Ok(selector.to_str()?.to_string());
    }
    if let Ok(device) = device.cast::<PyDevice>() {
        return Ok(device.get().info.selector.clone());
    }
    if let Ok(queue) = device.cast::<PyQueue>() {
        return Ok(queue.get().queue()?.device().selector.clone());
    }
    if let Some(selector) = selector_of_device_object(device.py(), device)? {
        return Ok(selector);
    }
    if let Some(queue) = queue_from_device_object(device.py(), device)? {
        return Ok(queue.get().held().device().selector.clone());
    }
    Err(PyTypeError::new_err(format!(
        "device: expected None, a selector string, a devbuf.Device, a devbuf.Stream, a \
         dpctl.SyclDevice or a dpctl.SyclQueue, got {}",
        device.get_type().name()?
    )))
}

/// The devbuf queue of another library's SYCL queue given as `device=`; `None` for selectors,
/// Devices, devbuf Queues and anything else (strings first: the common case, with no capsule).
pub(crate) fn sycl_queue_object(
    py: Python<'_>,
    device: &Bound<'_, PyAny>,
) -> PyResult<Option<Py<PyQueue>>> {
    if device.is_instance_of::<PyString>()
        || device.cast::<PyDevice>().is_ok()
        || device.cast::<PyQueue>().is_ok()
    {
        return Ok(None);
    }
    queue_from_device_object(py, device)
}

/// The queue a `device=` argument names: a Queue itself, a `dpctl.SyclQueue`'s queue, else the
/// shared queue of the device.
pub(crate) fn resolve_queue(
    py: Python<'_>,
    device: Option<&Bound<'_, PyAny>>,
) -> PyResult<Py<PyQueue>> {
    match device {
        None => crate::objects::default_device::current_default(py),
        Some(device) => {
            if let Ok(queue) = device.cast::<PyQueue>() {
                return Ok(queue.clone().unbind());
            }
            if let Ok(selector) = device.cast::<PyString>() {
                return queue_of_selector(py, selector);
            }
            if let Some(queue) = sycl_queue_object(py, device)? {
                return Ok(queue);
            }
            match selector_of(device)?.as_str() {
                "" => crate::objects::default_device::current_default(py),
                selector => shared_queue(py, selector),
            }
        }
    }
}

/// Selector strs already resolved to their shared queue, by the identity of the str object: a call
/// site passes the same str object every time (a literal), so a hit skips making a `String` of it,
/// hashing it and `shared_queue`'s lock. An entry holds its str, so that no other object can take
/// its address meanwhile; `shared_queue` never forgets a selector, so an entry stays true.
static SELECTOR_OBJECTS: Mutex<Vec<(Py<PyString>, Py<PyQueue>)>> = Mutex::new(Vec::new());
const SELECTOR_OBJECTS_SIZE: usize = 8;

fn queue_of_selector(py: Python<'_>, selector: &Bound<'_, PyString>) -> PyResult<Py<PyQueue>> {
    if let Some(queue) = SELECTOR_OBJECTS.try_lock().and_then(|cache| {
        cache
            .iter()
            .find(|(known, _)| known.is(selector))
            .map(|(_, queue)| queue.clone_ref(py))
    }) {
        return Ok(queue);
    }
    let text = selector.to_str()?;
    // The default device is asked each time, never cached: it is the current default's.
    if text.is_empty() {
        return crate::objects::default_device::current_default(py);
    }
    let queue = shared_queue(py, text)?;
    let entry = (selector.clone().unbind(), queue.clone_ref(py));
    let evicted = SELECTOR_OBJECTS.try_lock().map(|mut cache| {
        let evicted = (cache.len() == SELECTOR_OBJECTS_SIZE).then(|| cache.remove(0));
        cache.push(entry);
        evicted
    });
    // Dropped outside the cache: releasing a Python object may run Python code that resolves a
    // queue.
    drop(evicted);
    Ok(queue)
}
