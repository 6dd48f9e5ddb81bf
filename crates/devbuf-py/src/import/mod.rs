//! The import side: `devbuf.asarray` and `devbuf.from_dlpack` take DLPack (the producer's C
//! exchange table when its type has one, else `__dlpack__`, or a capsule), SUAI, CAI, or the
//! buffer protocol, zero-copy. The producer stays alive as long as any view of its memory. This
//! module picks the protocol; each has its own module (`dlpack`, `interface_dicts`,
//! `buffer_protocol`), and `wrap` wraps what they validated.
//!
//! Python values are converted there (a wrong type is a TypeError naming the key); what they mean
//! is validated once, in `devbuf::interface`.

// Caller numbers become addresses here: every size, count, offset and alignment is checked
// (docs/architecture.md, "Untrusted numbers").
#![deny(clippy::arithmetic_side_effects)]

pub(crate) mod buffer_protocol;
pub(crate) mod dlpack;
pub(crate) mod handle;
mod interface_dicts;
mod ordering;
mod wrap;

use devbuf::MemKind;
use parking_lot::Mutex;
use pyo3::exceptions::{PyBufferError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyCapsule, PyType};
use pyo3::{ffi, intern};
use std::sync::Arc;

use crate::errors::IntoPyResult;
use crate::import::buffer_protocol::import_buffer_protocol;
use crate::import::dlpack::{import_capsule, import_dlpack};
use crate::import::interface_dicts::{import_cai, import_suai};
use crate::objects::array::{PyArray, ReadonlyOrigin};
use crate::objects::foreign_objects::resolve_queue;
use crate::objects::queue::PyQueue;

/// Imports any supported object zero-copy (or copies it when `copy`). With `sync`, later work
/// on the array's queue is ordered after the producer's stream (CAI v3, DLPack); without, the
/// caller takes that over.
pub(crate) fn import_object<'py>(
    py: Python<'py>,
    obj: &Bound<'py, PyAny>,
    copy: bool,
    sync: bool,
) -> PyResult<Bound<'py, PyArray>> {
    let imported = match obj.cast::<PyArray>() {
        Ok(ours) => ours.clone(),
        Err(_) => import_foreign(py, obj, sync)?,
    };
    if copy {
        copy_of(py, &imported, None, None)
    } else {
        Ok(imported)
    }
}

/// A copy of `array` in `kind` memory on `queue`. Without `kind`: device memory when `queue`
/// (a device the caller named) is a device's, as CuPy's and PyTorch's copies to a device are, else
/// the array's own kind on its own queue.
fn copy_of<'py>(
    py: Python<'py>,
    array: &Bound<'py, PyArray>,
    queue: Option<Py<PyQueue>>,
    kind: Option<MemKind>,
) -> PyResult<Bound<'py, PyArray>> {
    let this = array.get();
    let open = this.array(py)?;
    let named_device = match &queue {
        Some(queue) => {
            let target = queue.get().queue()?;
            !target.reaches_any_host_memory() && target.supports(MemKind::Device)
        }
        None => false,
    };
    let target = match &queue {
        Some(named) => Arc::clone(named.get().queue()?),
        // The array's own stream, which it keeps using after a `Stream.close()`.
        None => Arc::clone(this.queue.get().held()),
    };
    let queue = queue.unwrap_or_else(|| this.queue.clone_ref(py));
    let kind = match (kind, open.buffer().kind()) {
        (Some(kind), _) => kind,
        _ if named_device => MemKind::Device,
        (None, kind @ (MemKind::Host | MemKind::Device | MemKind::Shared))
            if target.supports(kind) =>
        {
            kind
        }
        _ if open.buffer().is_host_accessible() && target.supports(MemKind::Host) => MemKind::Host,
        _ => MemKind::Device,
    };
    let source: &devbuf::Array = &open;
    let copy = py.detach(|| source.copy_to(&target, kind)).py()?;
    Ok(PyArray::wrap(py, copy, queue)?.into_bound(py))
}

/// The ways in: the protocols an object can be imported through (not `devbuf::Protocol`, the
/// protocols that belong to one backend).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Route {
    Dlpack,
    Suai,
    Cai,
    BufferProtocol,
}

/// The order they are tried in. SUAI before DLPack: an object that speaks both (dpctl's and dpnp's
/// arrays) describes its memory and queue in one getter, while its `__dlpack__` with our queue as
/// `stream` orders that queue after its own (barriers on both queues) and `__dlpack_device__`
/// may build device objects: dpnp's import through SUAI measured a fifth of the DLPack one
/// (BENCHMARKS.md). The ordering is kept either way: SUAI records the producer's queue and our
/// work waits for it. An object without SUAI pays one failed attribute lookup on its type's
/// first import only (the per-type hint below).
const ROUTES: [Route; 4] = [
    Route::Suai,
    Route::Dlpack,
    Route::Cai,
    Route::BufferProtocol,
];

/// The route each producer type last imported through, so that the next import of the same
/// type goes straight to it instead of probing attributes it lacks (each miss costs an exception
/// inside CPython). A hint only: if the type's instance does not speak it, probing starts over
/// (and where the cache is busy, `try_lock`, the import probes without it).
static TYPE_ROUTES: Mutex<Vec<(Py<PyType>, Route)>> = Mutex::new(Vec::new());
const TYPE_CACHE_SIZE: usize = 32;

fn import_foreign<'py>(
    py: Python<'py>,
    obj: &Bound<'py, PyAny>,
    sync: bool,
) -> PyResult<Bound<'py, PyArray>> {
    if let Ok(capsule) = obj.cast::<PyCapsule>() {
        return import_capsule(py, capsule, None);
    }
    let ty = obj.get_type();
    let hint = TYPE_ROUTES.try_lock().and_then(|cache| {
        cache
            .iter()
            .find(|(known, _)| known.is(&ty))
            .map(|&(_, route)| route)
    });
    // A producer that cannot describe its data through one protocol (BufferError) may still
    // through another (NumPy's DLPack refuses bfloat16, its buffer protocol does not); every
    // other error is the user's to see.
    let mut unexportable = None;
    if let Some(route) = hint {
        match import_through(py, obj, route, sync) {
            Ok(Some(array)) => return Ok(array),
            Ok(None) => {}
            Err(err) if err.is_instance_of::<PyBufferError>(py) => unexportable = Some(err),
            Err(err) => return Err(err),
        }
    }
    for route in ROUTES.into_iter().filter(|&r| Some(r) != hint) {
        match import_through(py, obj, route, sync) {
            // An element type without a buffer format came through NumPy's array interface
            // (the buffer protocol's fallback): not the route the type's other arrays take.
            Ok(Some(array)) if !has_buffer_format(&array)? => return Ok(array),
            Ok(Some(array)) => {
                let entry = (ty.unbind(), route);
                let evicted = TYPE_ROUTES.try_lock().map(|mut cache| {
                    let known = cache.iter().position(|(known, _)| known.is(&entry.0));
                    let evicted = match known {
                        Some(at) => Some(cache.remove(at)),
                        None if cache.len() == TYPE_CACHE_SIZE => Some(cache.remove(0)),
                        None => None,
                    };
                    cache.push(entry);
                    evicted
                });
                // Dropped outside the cache: a type's finalizer may run Python code that imports
                // again.
                drop(evicted);
                return Ok(array);
            }
            Ok(None) => {}
            Err(err) if err.is_instance_of::<PyBufferError>(py) => unexportable = Some(err),
            Err(err) => return Err(err),
        }
    }
    Err(unexportable.unwrap_or_else(|| {
        PyTypeError::new_err(format!(
            "cannot import a {}: it has none of __dlpack__, __sycl_usm_array_interface__, \
             __cuda_array_interface__ or the buffer protocol",
            obj.get_type()
                .name()
                .map_or_else(|_| "?".into(), |n| n.to_string())
        ))
    }))
}

fn has_buffer_format(array: &Bound<'_, PyArray>) -> PyResult<bool> {
    let open = array.get().array(array.py())?;
    Ok(open.layout().dtype().buffer_format().is_some())
}

/// Imports `obj` through `route`; `None` when the object does not speak it.
fn import_through<'py>(
    py: Python<'py>,
    obj: &Bound<'py, PyAny>,
    route: Route,
    sync: bool,
) -> PyResult<Option<Bound<'py, PyArray>>> {
    let Some(array) = import_route(py, obj, route, sync)? else {
        return Ok(None);
    };
    let open = array.get().array(py)?;
    if open.buffer().kind() == MemKind::Unknown
        && let Some(ours) = devbuf_memory_behind(obj, &open)?
    {
        return Ok(Some(ours));
    }
    if open.layout().readonly() {
        array.get().set_readonly_origin(ReadonlyOrigin {
            producer: obj.get_type().unbind(),
            through: match route {
                Route::Dlpack => "DLPack (the tensor's read-only flag)",
                Route::Suai => "__sycl_usm_array_interface__ (data[1])",
                Route::Cai => "__cuda_array_interface__ (data[1])",
                Route::BufferProtocol => "the buffer protocol (a read-only buffer)",
            },
        });
    }
    drop(open);
    Ok(Some(array))
}

/// The devbuf memory a foreign host view (NumPy's `np.asarray(devbuf_array)`, a memoryview of
/// one) shows, found through the view's `base` / `obj` chain: the same elements as a view of
/// devbuf's own allocation, so that they import back with their kind and device, not as memory
/// of unknown origin. `None` when the chain ends elsewhere or the elements are not inside it.
fn devbuf_memory_behind<'py>(
    obj: &Bound<'py, PyAny>,
    imported: &devbuf::Array,
) -> PyResult<Option<Bound<'py, PyArray>>> {
    let py = obj.py();
    let mut link = obj.clone();
    // NumPy collapses chains of views onto their base, so a few steps reach the exporter.
    for _ in 0..8 {
        if let Ok(ours) = link.cast::<PyArray>() {
            let owner = ours.get();
            let open = owner.array(py)?;
            let buffer = open.buffer();
            let Some(offset) = imported.data_ptr().checked_sub(buffer.ptr() as usize) else {
                return Ok(None);
            };
            let layout = imported.layout();
            let Ok(layout) = devbuf::Layout::new(
                layout.dtype(),
                layout.shape(),
                Some(layout.strides()),
                offset,
                layout.readonly() || open.readonly(),
            ) else {
                return Ok(None);
            };
            let Ok(view) = devbuf::Array::new(buffer.clone(), layout) else {
                return Ok(None);
            };
            let made = PyArray::wrap(py, view, owner.queue.clone_ref(py))?.into_bound(py);
            made.get().inherit_readonly_origin(py, owner);
            return Ok(Some(made));
        }
        let next = match link.getattr_opt(intern!(py, "base"))? {
            Some(base) if !base.is_none() => base,
            _ => match link.getattr_opt(intern!(py, "obj"))? {
                Some(exporter) if !exporter.is_none() => exporter,
                _ => return Ok(None),
            },
        };
        link = next;
    }
    Ok(None)
}

/// [`import_through`]'s protocol step.
fn import_route<'py>(
    py: Python<'py>,
    obj: &Bound<'py, PyAny>,
    route: Route,
    sync: bool,
) -> PyResult<Option<Bound<'py, PyArray>>> {
    match route {
        Route::Dlpack => import_dlpack(py, obj, sync),
        Route::Suai => match obj.getattr_opt(intern!(py, "__sycl_usm_array_interface__"))? {
            Some(dict) => import_suai(py, obj, &dict, sync).map(Some),
            None => Ok(None),
        },
        Route::Cai => match obj.getattr_opt(intern!(py, "__cuda_array_interface__"))? {
            Some(dict) => import_cai(py, obj, &dict, sync).map(Some),
            None => Ok(None),
        },
        // SAFETY: `obj` is a live object.
        Route::BufferProtocol => match unsafe { ffi::PyObject_CheckBuffer(obj.as_ptr()) } {
            0 => Ok(None),
            _ => import_buffer_protocol(py, obj).map(Some),
        },
    }
}

/// `devbuf.asarray(obj, copy, device, sync, kind=kind)` of an object with memory of its own (the
/// `asarray` module takes Python values first): a devbuf Array viewing `obj`'s memory (SUAI,
/// DLPack, CAI or the buffer protocol, tried in that order). `copy`, as in NumPy 2 and the array
/// API: None copies only when it must (`device` names another device), True always copies, and
/// False never does: where the data would have to move, it is a ValueError. A copy onto a named
/// device is device memory unless `kind` ("host", "device" or "shared") asks for another kind.
/// `sync=False` skips ordering our later work after the producer's stream (CAI v3's consumer
/// opt-out; also `DEVBUF_CUDA_ARRAY_INTERFACE_SYNC=0` for the process).
pub fn asarray<'py>(
    py: Python<'py>,
    obj: &Bound<'py, PyAny>,
    copy: Option<bool>,
    device: Option<&Bound<'py, PyAny>>,
    sync: bool,
    kind: Option<&str>,
) -> PyResult<Bound<'py, PyArray>> {
    if copy.is_none() && device.is_none() && kind.is_none() {
        // The plain call: a view of `obj`'s memory wherever it is (a closed array of ours is
        // still refused).
        let array = import_object(py, obj, false, sync)?;
        array.get().array(py)?;
        return Ok(array);
    }
    let kind = kind.map(str::parse::<MemKind>).transpose().py()?;
    let array = import_object(py, obj, false, sync)?;
    let queue = device.map(|d| resolve_queue(py, Some(d))).transpose()?;
    let moves = match &queue {
        Some(queue) => !same_device(&array, queue)?,
        None => false,
    };
    let own_kind = array.get().array(py)?.buffer().kind();
    match copy {
        Some(false) if moves => Err(PyValueError::new_err(format!(
            "copy: the data lives on {:?} and copy=False forbids copying it to {:?}",
            array.get().array(py)?.buffer().device().selector,
            queue
                .as_ref()
                .map_or("", |q| q.get().held().device().selector.as_str()),
        ))),
        Some(false) if kind.is_some_and(|kind| kind != own_kind) => Err(PyValueError::new_err(
            format!("kind: the data is {own_kind} memory and copy=False forbids copying it",),
        )),
        Some(true) => copy_of(py, &array, queue, kind),
        _ if moves || kind.is_some_and(|kind| kind != own_kind) => copy_of(py, &array, queue, kind),
        _ => Ok(array),
    }
}

/// `devbuf.from_dlpack(x, /, *, device=None, copy=None)`, as in the array API: `x` is an object
/// with `__dlpack__` (or a DLPack capsule). `copy=False` forbids copies, `True` forces one.
#[pyfunction]
#[pyo3(signature = (x, /, *, device = None, copy = None))]
pub fn from_dlpack<'py>(
    py: Python<'py>,
    x: &Bound<'py, PyAny>,
    device: Option<&Bound<'py, PyAny>>,
    copy: Option<bool>,
) -> PyResult<Bound<'py, PyArray>> {
    let array = match x.cast::<PyCapsule>() {
        Ok(capsule) => import_capsule(py, capsule, None)?,
        Err(_) => match x.cast::<PyArray>() {
            Ok(ours) => ours.clone(),
            Err(_) => import_dlpack(py, x, true)?.ok_or_else(|| {
                PyTypeError::new_err("from_dlpack: the object has no __dlpack__ method")
            })?,
        },
    };
    let queue = device.map(|d| resolve_queue(py, Some(d))).transpose()?;
    let moves = match &queue {
        Some(queue) => !same_device(&array, queue)?,
        None => false,
    };
    if moves && copy == Some(false) {
        return Err(PyBufferError::new_err(
            "device: the data lives on another device and copy=False forbids copying it",
        ));
    }
    if copy == Some(true) || moves {
        copy_of(py, &array, queue, None)
    } else {
        Ok(array)
    }
}

fn same_device(array: &Bound<'_, PyArray>, queue: &Py<PyQueue>) -> PyResult<bool> {
    let open = array.get().array(array.py())?;
    Ok(open.buffer().device().selector == queue.get().queue()?.device().selector)
}
