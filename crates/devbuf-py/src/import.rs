//! The import side: `devbuf.asarray` and `devbuf.from_dlpack` take DLPack (the producer's C
//! exchange table when its type has one, else `__dlpack__`, or a capsule), SUAI, CAI, or the
//! buffer protocol, zero-copy. The producer stays alive as long as any view of its memory.
//!
//! Python values are converted here (a wrong type is a TypeError naming the key); what they mean
//! is validated once, in `devbuf::interface`.

use std::ffi::CStr;
use std::ptr::NonNull;
use std::sync::Arc;

use devbuf::dlpack::ManagedTensor;
use devbuf::dlpark::ffi::{
    DLDevice, DLDeviceType, DLManagedTensor, DLManagedTensorVersioned, DLPackExchangeAPI,
};
use devbuf::interface::{self, ForeignLayout, InterfaceDict};
use devbuf::{Array, Buffer, DType, MemKind, Owner};
use parking_lot::Mutex;
use pyo3::exceptions::{PyBufferError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyCapsule, PyDict, PyString, PyType};
use pyo3::{ffi, intern};

use crate::array::PyArray;
use crate::errors::IntoPyResult;
use crate::foreign::resolve_queue;
use crate::foreign::{self, capsule_name};
use crate::queues::{PyQueue, shared_queue, shared_queue_for_dlpack};
use crate::streams;

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
        copy_of(py, &imported, None)
    } else {
        Ok(imported)
    }
}

/// A copy of `array` on `queue` (default: the array's own queue).
fn copy_of<'py>(
    py: Python<'py>,
    array: &Bound<'py, PyArray>,
    queue: Option<Py<PyQueue>>,
) -> PyResult<Bound<'py, PyArray>> {
    let this = array.get();
    let queue = queue.unwrap_or_else(|| this.queue.clone_ref(py));
    let target = &queue.get().queue;
    let kind = match this.array.buffer().kind() {
        kind @ (MemKind::Host | MemKind::Device | MemKind::Shared) if target.supports(kind) => kind,
        _ if this.array.buffer().is_host_accessible() && target.supports(MemKind::Host) => {
            MemKind::Host
        }
        _ => MemKind::Device,
    };
    let copy = py.detach(|| this.array.copy_to(target, kind)).py()?;
    Ok(PyArray::wrap(py, copy, queue)?.into_bound(py))
}

/// The protocols an object can be imported through, in the order they are tried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Protocol {
    Dlpack,
    Suai,
    Cai,
    Buffer,
}

const PROTOCOLS: [Protocol; 4] = [
    Protocol::Dlpack,
    Protocol::Suai,
    Protocol::Cai,
    Protocol::Buffer,
];

/// The protocol each producer type last imported through, so that the next import of the same
/// type goes straight to it instead of probing attributes it lacks (each miss costs an exception
/// inside CPython). A hint only: if the type's instance does not speak it, probing starts over.
type TypeProtocols = Mutex<Vec<(Py<PyType>, Protocol)>>;
static TYPE_PROTOCOLS: PyOnceLock<TypeProtocols> = PyOnceLock::new();
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
    let cache = TYPE_PROTOCOLS.get_or_init(py, Default::default);
    let hint = cache
        .lock()
        .iter()
        .find(|(known, _)| known.is(&ty))
        .map(|&(_, protocol)| protocol);
    if let Some(protocol) = hint
        && let Some(array) = import_through(py, obj, protocol, sync)?
    {
        return Ok(array);
    }
    // A producer that cannot describe its data through one protocol (BufferError) may still
    // through another; every other error is the user's to see.
    let mut unexportable = None;
    for protocol in PROTOCOLS.into_iter().filter(|&p| Some(p) != hint) {
        match import_through(py, obj, protocol, sync) {
            Ok(Some(array)) => {
                let evicted = {
                    let mut cache = cache.lock();
                    let known = cache.iter().position(|(known, _)| known.is(&ty));
                    let evicted = match known {
                        Some(at) => Some(cache.remove(at)),
                        None if cache.len() == TYPE_CACHE_SIZE => Some(cache.remove(0)),
                        None => None,
                    };
                    cache.push((ty.unbind(), protocol));
                    evicted
                };
                // Dropped unlocked: a type's finalizer may run Python code that imports again.
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

/// Imports `obj` through `protocol`; `None` when the object does not speak it.
fn import_through<'py>(
    py: Python<'py>,
    obj: &Bound<'py, PyAny>,
    protocol: Protocol,
    sync: bool,
) -> PyResult<Option<Bound<'py, PyArray>>> {
    match protocol {
        Protocol::Dlpack => import_dlpack(py, obj, sync),
        Protocol::Suai => match obj.getattr_opt(intern!(py, "__sycl_usm_array_interface__"))? {
            Some(dict) => import_suai(py, obj, &dict).map(Some),
            None => Ok(None),
        },
        Protocol::Cai => match obj.getattr_opt(intern!(py, "__cuda_array_interface__"))? {
            Some(dict) => import_cai(py, obj, &dict, sync).map(Some),
            None => Ok(None),
        },
        // SAFETY: `obj` is a live object.
        Protocol::Buffer => match unsafe { ffi::PyObject_CheckBuffer(obj.as_ptr()) } {
            0 => Ok(None),
            _ => import_buffer_protocol(py, obj).map(Some),
        },
    }
}

/// DLPack through the producer type's C exchange table, else `__dlpack__`. `None` when the object
/// speaks no DLPack. With `sync`, our queue's later work is ordered after the producer's stream.
fn import_dlpack<'py>(
    py: Python<'py>,
    obj: &Bound<'py, PyAny>,
    sync: bool,
) -> PyResult<Option<Bound<'py, PyArray>>> {
    if let Some(api) = exchange_api_of(py, obj)? {
        let mut tensor: *mut DLManagedTensorVersioned = std::ptr::null_mut();
        let status = match api.managed_tensor_from_py_object_no_sync {
            // SAFETY: the table comes from the object's type, which promises the function accepts
            // its instances; it returns 0 with `tensor` set, or -1 with a Python exception set.
            Some(export) => unsafe { export(obj.as_ptr().cast(), &mut tensor) },
            None => return Ok(None),
        };
        let tensor = match NonNull::new(tensor) {
            Some(tensor) if status == 0 => tensor,
            _ => return Err(PyErr::fetch(py)),
        };
        // SAFETY: we own the tensor; it is alive.
        let device = unsafe { tensor.as_ref().dl_tensor.device };
        // Deletes the tensor if it cannot be imported.
        let array = import_managed(py, ManagedTensor::Versioned(tensor), None, None)?;
        // The no-sync export leaves ordering to us: order after the producer's current stream.
        if sync && let Some(current_work_stream) = api.current_work_stream {
            streams::order_after_producer(py, array.get().array.buffer(), |stream_out| {
                // SAFETY: the producer's table; `stream_out` is a valid out-pointer.
                unsafe { current_work_stream(device.device_type, device.device_id, stream_out) }
            })?;
        }
        return Ok(Some(array));
    }
    let Some(dlpack) = obj.getattr_opt(intern!(py, "__dlpack__"))? else {
        return Ok(None);
    };
    let announced = match obj.getattr_opt(intern!(py, "__dlpack_device__"))? {
        Some(device) => {
            let (device_type, device_id): (i32, i32) = device.call0()?.extract()?;
            let device = DLDevice {
                device_type: DLDeviceType(device_type as _),
                device_id,
            };
            let queue = reachable_queue(py, device, "__dlpack_device__")?;
            Some((device, foreign::dlpack_producer_queue(py, obj, queue)?))
        }
        None => None,
    };
    // Our stream (a CUDA stream, a dpctl queue), which the producer makes wait for its work.
    let stream = match &announced {
        Some((_, queue)) => streams::consumer_stream_argument(py, queue.get(), sync)?,
        None => None,
    };
    // When the producer ordered our queue after its work, host views must wait for it too.
    let ordered = match (&announced, &stream) {
        (Some((_, queue)), Some(_)) if sync => Arc::clone(&queue.get().queue).as_foreign_queue(),
        _ => None,
    };
    let kwargs = PyDict::new(py);
    kwargs.set_item(intern!(py, "stream"), stream)?;
    kwargs.set_item(intern!(py, "max_version"), (1, 3))?;
    // Older producers take fewer keywords: retry with what they understand.
    let capsule = match dlpack.call((), Some(&kwargs)) {
        Ok(capsule) => capsule,
        Err(err) if err.is_instance_of::<PyTypeError>(py) => {
            kwargs.del_item(intern!(py, "max_version"))?;
            dlpack.call((), Some(&kwargs))?
        }
        Err(err) => return Err(err),
    };
    let capsule = capsule
        .cast_into::<PyCapsule>()
        .map_err(|_| PyTypeError::new_err("__dlpack__ did not return a capsule"))?;
    let array = import_capsule(py, &capsule, announced)?;
    if let Some(ordered) = ordered {
        array.get().array.buffer().record_producer(ordered).py()?;
    }
    Ok(Some(array))
}

/// The shared queue of a DLPack `device`; BufferError naming `key` when no usable backend
/// reaches it (so an importer may still try the object's other protocols).
fn reachable_queue(py: Python<'_>, device: DLDevice, key: &str) -> PyResult<Py<PyQueue>> {
    shared_queue_for_dlpack(py, device).map_err(|err| {
        PyBufferError::new_err(format!(
            "{key}: devbuf cannot reach DLPack device ({}, {}): {}",
            device.device_type.0,
            device.device_id,
            err.value(py)
        ))
    })
}

/// The producer type's `__dlpack_c_exchange_api__` table (or the seed's older name), if any.
fn exchange_api_of(
    py: Python<'_>,
    obj: &Bound<'_, PyAny>,
) -> PyResult<Option<&'static DLPackExchangeAPI>> {
    let ty = obj.get_type();
    let attribute = match ty.getattr_opt(intern!(py, "__dlpack_c_exchange_api__"))? {
        Some(attribute) => attribute,
        None => match ty.getattr_opt(intern!(py, "__c_dlpack_exchange_api__"))? {
            Some(attribute) => attribute,
            None => return Ok(None),
        },
    };
    // Torch and devbuf publish a capsule; the proposal's first form was an int address.
    let address = match attribute.cast::<PyCapsule>() {
        // SAFETY: a live capsule; a wrong name yields null with an exception we clear.
        Ok(capsule) => unsafe {
            let ptr = ffi::PyCapsule_GetPointer(capsule.as_ptr(), c"dlpack_exchange_api".as_ptr());
            if ptr.is_null() {
                ffi::PyErr_Clear();
            }
            ptr as usize
        },
        Err(_) => attribute.extract::<usize>().unwrap_or(0),
    };
    // SAFETY: the table outlives the process (the protocol's rule); the header says its version.
    let api = unsafe { (address as *const DLPackExchangeAPI).as_ref() };
    Ok(api.filter(|api| api.header.version.major == devbuf::dlpack::VERSION.major))
}

/// Imports a DLPack capsule, taking ownership of its tensor. `announced` is the device (and its
/// queue) the producer's `__dlpack_device__` named, if the capsule came from its `__dlpack__`.
pub(crate) fn import_capsule<'py>(
    py: Python<'py>,
    capsule: &Bound<'py, PyCapsule>,
    announced: Option<(DLDevice, Py<PyQueue>)>,
) -> PyResult<Bound<'py, PyArray>> {
    let name = capsule_name(capsule);
    // SAFETY: the capsule's name says what its pointer is.
    let (tensor, used_name) = unsafe {
        match name.to_bytes() {
            b"dltensor_versioned" => (
                ManagedTensor::Versioned(capsule_pointer::<DLManagedTensorVersioned>(
                    capsule, name,
                )?),
                c"used_dltensor_versioned",
            ),
            b"dltensor" => (
                ManagedTensor::Legacy(capsule_pointer::<DLManagedTensor>(capsule, name)?),
                c"used_dltensor",
            ),
            b"used_dltensor_versioned" | b"used_dltensor" => {
                return Err(PyValueError::new_err(
                    "capsule: this DLPack capsule was already consumed",
                ));
            }
            other => {
                return Err(PyTypeError::new_err(format!(
                    "capsule: {:?} is not a DLPack capsule name",
                    String::from_utf8_lossy(other)
                )));
            }
        }
    };
    import_managed(py, tensor, Some((capsule, used_name)), announced)
}

/// # Safety
/// The capsule named `name` holds a `T`.
unsafe fn capsule_pointer<T>(capsule: &Bound<'_, PyCapsule>, name: &CStr) -> PyResult<NonNull<T>> {
    // SAFETY: a live capsule and its own name.
    let ptr = unsafe { ffi::PyCapsule_GetPointer(capsule.as_ptr(), name.as_ptr()) };
    NonNull::new(ptr.cast::<T>()).ok_or_else(|| PyErr::fetch(capsule.py()))
}

/// Takes ownership of a managed tensor (marking its capsule used, if any) and wraps it. Until the
/// tensor is validated, an error leaves it with its capsule, whose destructor frees it; a tensor
/// without a capsule is deleted on error.
///
/// The tensor's own device decides where the memory is: the producer may not describe it
/// elsewhere than `__dlpack_device__` said (devbuf asks for no `dl_device`), and the stream devbuf
/// handed it belonged to the announced device, so a mismatch is refused.
fn import_managed<'py>(
    py: Python<'py>,
    tensor: ManagedTensor,
    capsule: Option<(&Bound<'py, PyCapsule>, &'static CStr)>,
    announced: Option<(DLDevice, Py<PyQueue>)>,
) -> PyResult<Bound<'py, PyArray>> {
    let take = || -> PyResult<()> {
        if let Some((capsule, used_name)) = capsule {
            // SAFETY: a live capsule; the name is static.
            if unsafe { ffi::PyCapsule_SetName(capsule.as_ptr(), used_name.as_ptr()) } != 0 {
                return Err(PyErr::fetch(py));
            }
        }
        Ok(())
    };
    let validated = (|| {
        // SAFETY: the tensor is alive while its capsule (or we) own it.
        let (dl_tensor, readonly) = unsafe { tensor.tensor() }.py()?;
        // SAFETY: DLPack promises `ndim` shape and stride values behind the pointers.
        let foreign = unsafe { interface::import_dltensor(dl_tensor, readonly) }.py()?;
        let device = dl_tensor.device;
        let queue = match announced {
            Some((said, queue)) if said == device => queue,
            Some((said, _)) => {
                return Err(PyBufferError::new_err(format!(
                    "device: the tensor is on DLPack device ({}, {}) but __dlpack_device__() \
                     said ({}, {}); devbuf imports memory only where its producer says it is",
                    device.device_type.0, device.device_id, said.device_type.0, said.device_id
                )));
            }
            None => reachable_queue(py, device, "device")?,
        };
        let kind = foreign_kind(&queue, &foreign, "data")?;
        Ok((foreign, queue, kind))
    })();
    let (foreign, queue, kind) = match validated {
        Ok(parts) => parts,
        Err(err) => {
            // A tensor of an unknown major version must still be deleted (DLPack's rule), as must
            // one that came without a capsule.
            // SAFETY: reading the version is valid for any tensor of either ABI.
            let wrong_version = unsafe { tensor.version() }.major != devbuf::dlpack::VERSION.major
                && matches!(tensor, ManagedTensor::Versioned(_));
            if capsule.is_none() || wrong_version {
                take()?;
                // SAFETY: we own the tensor now and never use it again.
                unsafe { tensor.delete() };
            }
            return Err(err);
        }
    };
    take()?;
    // SAFETY: we own the tensor now; the owner deletes it once after the last view.
    let owner = unsafe { tensor.into_owner() };
    wrap_classified(py, foreign, queue, kind, owner)
}

/// Takes ownership of a tensor that came without a capsule (deleting it if it cannot be imported).
pub(crate) fn import_owned_tensor<'py>(
    py: Python<'py>,
    tensor: ManagedTensor,
) -> PyResult<Bound<'py, PyArray>> {
    import_managed(py, tensor, None, None)
}

/// Wraps validated foreign memory reachable by `queue` in an Array.
fn wrap_foreign<'py>(
    py: Python<'py>,
    foreign: ForeignLayout,
    queue: Py<PyQueue>,
    owner: Owner,
    pointer_key: &'static str,
) -> PyResult<Bound<'py, PyArray>> {
    let kind = foreign_kind(&queue, &foreign, pointer_key)?;
    wrap_classified(py, foreign, queue, kind, owner)
}

/// What kind of memory of `queue`'s runtime the foreign span is; a ValueError naming
/// `pointer_key` when a device runtime does not know the pointer.
fn foreign_kind(
    queue: &Py<PyQueue>,
    foreign: &ForeignLayout,
    pointer_key: &'static str,
) -> PyResult<MemKind> {
    if foreign.len == 0 {
        return Ok(MemKind::Unknown);
    }
    let runtime_queue = &queue.get().queue;
    let kind = runtime_queue.kind_of(foreign.base as *const u8);
    let device = runtime_queue.device();
    if kind == MemKind::Unknown && device.backend != devbuf::host::HOST {
        return Err(PyValueError::new_err(format!(
            "{pointer_key}: {:#x} is not memory of {:?} (the runtime classifies it as unknown)",
            foreign.base, device.selector
        )));
    }
    Ok(kind)
}

/// Wraps foreign memory of `kind` ([`foreign_kind`]) in an Array.
fn wrap_classified<'py>(
    py: Python<'py>,
    foreign: ForeignLayout,
    queue: Py<PyQueue>,
    kind: MemKind,
    owner: Owner,
) -> PyResult<Bound<'py, PyArray>> {
    let runtime_queue = queue.get().queue.clone();
    // SAFETY: the protocol promised `len` bytes at `base` reachable by this device, alive while
    // `owner` is held.
    let buffer = unsafe {
        Buffer::from_foreign(
            runtime_queue,
            foreign.base as *mut u8,
            foreign.len,
            kind,
            owner,
        )
    };
    let array = Array::new(buffer, foreign.layout).py()?;
    Ok(PyArray::wrap(py, array, queue)?.into_bound(py))
}

/// Reads the keys CAI and SUAI share; a wrong Python type is a TypeError naming the key.
fn read_interface_dict<'py>(
    dict: &Bound<'py, PyAny>,
    protocol: &str,
) -> PyResult<(InterfaceDict, Option<Bound<'py, PyDict>>)> {
    let py = dict.py();
    let dict = dict
        .cast::<PyDict>()
        .map_err(|_| PyTypeError::new_err(format!("{protocol} is not a dict")))?;
    let required = |key: &Bound<'py, PyString>| -> PyResult<Bound<'py, PyAny>> {
        dict.get_item(key)?
            .ok_or_else(|| PyValueError::new_err(format!("{}: missing from {protocol}", key)))
    };
    let typed = |key: &'static str, what: &'static str| {
        move |_: PyErr| PyTypeError::new_err(format!("{key}: expected {what}"))
    };
    let version = required(intern!(py, "version"))?
        .extract::<i64>()
        .map_err(typed("version", "an int"))?;
    let shape = required(intern!(py, "shape"))?
        .extract::<Vec<i64>>()
        .map_err(typed("shape", "a tuple of ints"))?;
    let typestr = required(intern!(py, "typestr"))?
        .extract::<String>()
        .map_err(typed("typestr", "a str"))?;
    let data = match dict.get_item(intern!(py, "data"))? {
        None => None,
        Some(data) => Some(
            data.extract::<(usize, bool)>()
                .map_err(typed("data", "a tuple (int pointer, bool read-only)"))?,
        ),
    };
    let strides = match dict.get_item(intern!(py, "strides"))? {
        Some(strides) if !strides.is_none() => Some(
            strides
                .extract::<Vec<i64>>()
                .map_err(typed("strides", "None or a tuple of ints"))?,
        ),
        _ => None,
    };
    let descr_key = if protocol.contains("sycl") {
        intern!(py, "typedescr")
    } else {
        intern!(py, "descr")
    };
    let descr = match dict.get_item(descr_key)? {
        Some(descr) if !descr.is_none() => {
            Some(descr.extract::<Vec<(String, String)>>().map_err(typed(
                if protocol.contains("sycl") {
                    "typedescr"
                } else {
                    "descr"
                },
                "a list of (name, typestr) tuples",
            ))?)
        }
        _ => None,
    };
    let parsed = InterfaceDict {
        version,
        data: data.unwrap_or((0, false)),
        shape,
        typestr,
        descr,
        strides,
        offset: 0,
        has_mask: false,
    };
    let present = data.is_some().then(|| dict.clone());
    Ok((parsed, present))
}

fn import_suai<'py>(
    py: Python<'py>,
    obj: &Bound<'py, PyAny>,
    dict: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyArray>> {
    let (mut parsed, with_data) = read_interface_dict(dict, "__sycl_usm_array_interface__")?;
    let Some(dict) = with_data else {
        // The spec's fallback for host-accessible USM: no `data`, use the buffer protocol. A fault
        // is still SUAI's, naming the key.
        // SAFETY: `obj` is a live object.
        if unsafe { ffi::PyObject_CheckBuffer(obj.as_ptr()) } == 0 {
            return Err(PyValueError::new_err(
                "data: missing from __sycl_usm_array_interface__, and the object has no buffer \
                 protocol to fall back on",
            ));
        }
        return import_buffer_protocol(py, obj);
    };
    parsed.offset = match dict.get_item(intern!(py, "offset"))? {
        Some(offset) if !offset.is_none() => offset
            .extract()
            .map_err(|_| PyTypeError::new_err("offset: expected an int"))?,
        _ => 0,
    };
    let syclobj = dict.get_item(intern!(py, "syclobj"))?.ok_or_else(|| {
        PyValueError::new_err("syclobj: missing from __sycl_usm_array_interface__")
    })?;
    let foreign = interface::import_suai(&parsed).py()?;
    let resolved = foreign::queue_from_syclobj(py, &syclobj, foreign.base)?;
    let key = if parsed.offset == 0 { "data" } else { "offset" };
    let array = wrap_foreign(
        py,
        foreign,
        resolved.queue,
        Owner::keep_alive(obj.clone().unbind()),
        key,
    )?;
    // The producer may still have work on the memory in its queue: ours is ordered after it.
    if let Some(producer) = resolved.producer {
        array.get().array.buffer().record_producer(producer).py()?;
    }
    Ok(array)
}

fn import_cai<'py>(
    py: Python<'py>,
    obj: &Bound<'py, PyAny>,
    dict: &Bound<'py, PyAny>,
    sync: bool,
) -> PyResult<Bound<'py, PyArray>> {
    let (mut parsed, with_data) = read_interface_dict(dict, "__cuda_array_interface__")?;
    let dict = with_data
        .ok_or_else(|| PyValueError::new_err("data: missing from __cuda_array_interface__"))?;
    parsed.has_mask = dict
        .get_item(intern!(py, "mask"))?
        .is_some_and(|mask| !mask.is_none());
    let stream = match dict.get_item(intern!(py, "stream"))? {
        Some(stream) if !stream.is_none() => Some(
            stream
                .extract::<i64>()
                .map_err(|_| PyTypeError::new_err("stream: expected None or an int"))?,
        ),
        _ => None,
    };
    let foreign = interface::import_cai(&parsed).py()?;
    // An empty array has no memory to classify (the spec makes its `data` 0): any queue of the
    // protocol's backend will do.
    let selector = if foreign.len == 0 {
        devbuf::backend_for(devbuf::Protocol::Cai)
            .map(|backend| backend.name())
            .ok_or_else(|| {
                PyValueError::new_err(
                    "__cuda_array_interface__: no backend compiled into devbuf speaks it",
                )
            })?
            .to_string()
    } else {
        let base = foreign.base;
        let queue = py
            .detach(|| devbuf::queue_for_pointer(devbuf::Protocol::Cai, base))
            .py()?;
        queue.device().selector.clone()
    };
    let queue = shared_queue(py, &selector)?;
    let array = wrap_foreign(
        py,
        foreign,
        queue,
        Owner::keep_alive(obj.clone().unbind()),
        "data",
    )?;
    streams::order_after_producer_stream(
        array.get().array.buffer(),
        devbuf::Protocol::Cai,
        stream,
        sync,
    )?;
    Ok(array)
}

/// A Py_buffer held until the last view of its memory is gone, released under the GIL.
pub(crate) struct HeldBuffer(pub(crate) Box<ffi::Py_buffer>);

// SAFETY: the view is only touched again in Drop, under the GIL.
unsafe impl Send for HeldBuffer {}
// SAFETY: as above; shared references never touch it.
unsafe impl Sync for HeldBuffer {}

impl Drop for HeldBuffer {
    fn drop(&mut self) {
        // After interpreter shutdown there is nothing left to release to.
        // SAFETY: Py_IsInitialized may be called at any time.
        if unsafe { ffi::Py_IsInitialized() } != 0 {
            // SAFETY: the view was filled by PyObject_GetBuffer and is released once.
            Python::attach(|_| unsafe { ffi::PyBuffer_Release(&mut *self.0) });
        }
    }
}

fn import_buffer_protocol<'py>(
    py: Python<'py>,
    obj: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyArray>> {
    // SAFETY: an all-zero Py_buffer is a valid "empty" value for PyObject_GetBuffer to fill.
    let mut view: Box<ffi::Py_buffer> = Box::new(unsafe { std::mem::zeroed() });
    // SAFETY: `obj` is live and `view` is writable.
    if unsafe { ffi::PyObject_GetBuffer(obj.as_ptr(), &mut *view, ffi::PyBUF_RECORDS_RO) } != 0 {
        return Err(PyErr::fetch(py));
    }
    let held = HeldBuffer(view);
    let view = &*held.0;
    // The exporter's count sizes the reads below: bound it first.
    let ndim = devbuf::check_ndim(view.ndim.into(), "ndim").py()?;
    // SAFETY: the exporter filled format (or null), shape and strides with `ndim` entries.
    let (format, shape, strides) = unsafe {
        let format =
            (!view.format.is_null()).then(|| CStr::from_ptr(view.format).to_str().unwrap_or("?"));
        let shape: Vec<i64> = if view.shape.is_null() {
            vec![(view.len / view.itemsize.max(1)) as i64]
        } else {
            std::slice::from_raw_parts(view.shape, ndim)
                .iter()
                .map(|&n| n as i64)
                .collect()
        };
        let strides = (!view.strides.is_null()).then(|| {
            std::slice::from_raw_parts(view.strides, ndim)
                .iter()
                .map(|&s| s as i64)
                .collect()
        });
        (format, shape, strides)
    };
    let dtype = DType::from_buffer_format(format, view.itemsize as usize).py()?;
    let foreign = interface::import_strided(
        dtype,
        &shape,
        strides,
        view.buf as usize,
        view.readonly != 0,
        "data",
    )
    .py()?;
    let queue = shared_queue(py, devbuf::host::HOST)?;
    wrap_foreign(py, foreign, queue, Owner::keep_alive(held), "data")
}

/// `devbuf.asarray(obj, copy=False, device=None, sync=True)`: a devbuf Array viewing `obj`'s
/// memory (DLPack, SUAI, CAI or the buffer protocol), zero-copy unless `copy` is true or `device`
/// names another device, in which case the data is copied there. `sync=False` skips ordering our
/// later work after the producer's stream (CAI v3's consumer opt-out; also
/// `DEVBUF_CUDA_ARRAY_INTERFACE_SYNC=0` for the process).
#[pyfunction]
#[pyo3(signature = (obj, copy = false, device = None, sync = true))]
pub fn asarray<'py>(
    py: Python<'py>,
    obj: &Bound<'py, PyAny>,
    copy: bool,
    device: Option<&Bound<'py, PyAny>>,
    sync: bool,
) -> PyResult<Bound<'py, PyArray>> {
    let array = import_object(py, obj, false, sync)?;
    match device {
        Some(device) => {
            let queue = resolve_queue(py, Some(device))?;
            if copy || !same_device(&array, &queue) {
                copy_of(py, &array, Some(queue))
            } else {
                Ok(array)
            }
        }
        None if copy => copy_of(py, &array, None),
        None => Ok(array),
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
    let moves = queue.as_ref().is_some_and(|q| !same_device(&array, q));
    if moves && copy == Some(false) {
        return Err(PyBufferError::new_err(
            "device: the data lives on another device and copy=False forbids copying it",
        ));
    }
    if copy == Some(true) || moves {
        copy_of(py, &array, queue)
    } else {
        Ok(array)
    }
}

fn same_device(array: &Bound<'_, PyArray>, queue: &Py<PyQueue>) -> bool {
    array.get().array.buffer().device().selector == queue.get().queue.device().selector
}
