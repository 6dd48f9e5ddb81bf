//! DLPack imports: through the producer type's C exchange table, `__dlpack__`, or a bare capsule.
//! The tensor's own device decides where the memory is, and every count it holds is bounded before
//! use (in `devbuf::interface`).

use std::ffi::CStr;
use std::ptr::NonNull;
use std::sync::Arc;

use devbuf::dlpack::ManagedTensor;
use devbuf::dlpark::ffi::{
    DLDevice, DLDeviceType, DLManagedTensor, DLManagedTensorVersioned, DLPackExchangeAPI,
};
use devbuf::interface::{self};
use pyo3::exceptions::{PyBufferError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyCapsule, PyDict};
use pyo3::{ffi, intern};

use crate::errors::IntoPyResult;
use crate::import::ordering;
use crate::import::wrap::{foreign_kind, wrap_classified};
use crate::objects::array::PyArray;
use crate::objects::foreign_objects::{self, capsule_name};
use crate::objects::queue::{PyQueue, shared_queue, shared_queue_for_dlpack};
use crate::shutdown;

/// DLPack through the producer type's C exchange table, else `__dlpack__`. `None` when the object
/// speaks no DLPack. With `sync`, our queue's later work is ordered after the producer's stream.
pub(crate) fn import_dlpack<'py>(
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
            ordering::order_after_producer(py, array.get().array(py)?.buffer(), |stream_out| {
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
            let (device_type, device_id): (i32, i32) =
                shutdown::call(&device, (), None)?.extract()?;
            let device = DLDevice {
                device_type: DLDeviceType(device_type as _),
                device_id,
            };
            let queue = reachable_queue(py, device, "__dlpack_device__")?;
            Some((
                device,
                foreign_objects::dlpack_producer_queue(py, obj, queue)?,
            ))
        }
        None => None,
    };
    // Our stream (a CUDA stream, a dpctl queue), which the producer makes wait for its work.
    let stream = match &announced {
        Some((_, queue)) => ordering::consumer_stream_argument(py, queue.get(), sync)?,
        None => None,
    };
    let passed = stream.is_some();
    let consumer = announced.as_ref().map(|(_, queue)| queue.clone_ref(py));
    let kwargs = PyDict::new(py);
    kwargs.set_item(intern!(py, "stream"), stream)?;
    kwargs.set_item(intern!(py, "max_version"), (1, 3))?;
    // Older producers take fewer keywords: retry with what they understand.
    // The producer's Python code, called so that interpreter shutdown cannot unwind devbuf.
    let capsule = match shutdown::call(&dlpack, (), Some(&kwargs)) {
        Ok(capsule) => capsule,
        Err(err) if err.is_instance_of::<PyTypeError>(py) => {
            kwargs.del_item(intern!(py, "max_version"))?;
            shutdown::call(&dlpack, (), Some(&kwargs))?
        }
        Err(err) => return Err(err),
    };
    let capsule = capsule
        .cast_into::<PyCapsule>()
        .map_err(|_| PyTypeError::new_err("__dlpack__ did not return a capsule"))?;
    let array = import_capsule(py, &capsule, announced)?;
    if let Some(queue) = consumer {
        let buffer = array.get().array(py)?;
        devbuf::exchange::after_dlpack_import(buffer.buffer(), queue.get().queue()?, passed, sync)
            .py()?;
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

/// The queue of the backend whose runtime recognises the memory at `ptr`, where several backends
/// list `device`'s type (`devbuf::queue_for_dlpack_memory`) and the queue `chosen` for the device
/// has no stream a producer could have been handed (kDLCPU's host-like backends); else `chosen`.
fn routed_by_pointer(
    py: Python<'_>,
    device: DLDevice,
    ptr: usize,
    chosen: Py<PyQueue>,
) -> PyResult<Py<PyQueue>> {
    let queue = chosen.get().queue()?;
    let interop = queue.interop();
    if interop.native_stream().is_some() || interop.dlpack_work_stream().is_some() {
        return Ok(chosen);
    }
    match devbuf::queue_for_dlpack_memory(device, ptr) {
        Some(Ok(owner)) if !Arc::ptr_eq(&owner, queue) => {
            shared_queue(py, &owner.device().selector)
        }
        Some(Err(err)) => Err(err).py(),
        _ => Ok(chosen),
    }
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
        let queue = routed_by_pointer(py, device, foreign.base(), queue)?;
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
    wrap_classified(py, foreign, queue, kind, owner, None)
}

/// Takes ownership of a tensor that came without a capsule (deleting it if it cannot be imported).
pub(crate) fn import_owned_tensor<'py>(
    py: Python<'py>,
    tensor: ManagedTensor,
) -> PyResult<Bound<'py, PyArray>> {
    import_managed(py, tensor, None, None)
}
