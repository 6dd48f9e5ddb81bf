//! The export side of every protocol, for `Array` (and so `Buffer`):
//! `__sycl_usm_array_interface__`, `__cuda_array_interface__`, `__dlpack__` /
//! `__dlpack_device__`, and the buffer protocol.
//!
//! Getters build their dictionary once and hand out copies: a fresh dict per access (consumers
//! may mutate it) at the cost of one `PyDict_Copy`. A protocol the memory cannot honour raises
//! AttributeError, so that `hasattr` probes answer correctly.

use std::ffi::c_int;
use std::ptr::NonNull;

use devbuf::dlpack::{self, DlpackTemplate, ManagedTensorAbi};
use devbuf::dlpark::DlpackFlags;
use devbuf::dlpark::ffi::{DLDevice, DLDeviceType, DLManagedTensor, DLManagedTensorVersioned};
use devbuf::{Array, HostQueue, MemKind, Protocol};
use pyo3::exceptions::{PyAttributeError, PyBufferError, PyTypeError};
use pyo3::prelude::*;
use pyo3::types::{PyCapsule, PyDict, PyTuple};
use pyo3::{ffi, intern};

use crate::errors::IntoPyResult;
use crate::export::ordering;
use crate::objects::array::PyArray;

/// Memory of the backend `protocol` describes, else an AttributeError naming that backend.
fn require_protocol(this: &PyArray, protocol: Protocol, attribute: &str) -> PyResult<()> {
    let device = this.array.buffer().device();
    if devbuf::speaks(device, protocol) {
        return Ok(());
    }
    let speaker = devbuf::backend_for(protocol).map_or("another backend's", |b| b.name());
    Err(PyAttributeError::new_err(format!(
        "{attribute}: {} memory on {:?} is not {speaker} memory",
        this.array.buffer().kind(),
        device.selector
    )))
}

/// Exports that cannot describe this array are missing attributes, not errors.
fn as_attribute_error(err: PyErr, py: Python<'_>, attribute: &str) -> PyErr {
    if err.is_instance_of::<PyBufferError>(py) {
        PyAttributeError::new_err(format!("{attribute}: {}", err.value(py)))
    } else {
        err
    }
}

fn strides_value<'py>(py: Python<'py>, strides: Option<Vec<i64>>) -> PyResult<Bound<'py, PyAny>> {
    match strides {
        None => Ok(py.None().into_bound(py)),
        Some(strides) => Ok(PyTuple::new(py, strides)?.into_any()),
    }
}

pub(crate) fn suai<'py>(this: &PyArray, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
    const ATTRIBUTE: &str = "__sycl_usm_array_interface__";
    let cached = this.cache.suai.get_or_try_init(py, || {
        require_protocol(this, Protocol::Suai, ATTRIBUTE)?;
        this.array.buffer().mark_exported();
        let build = || -> PyResult<Py<PyDict>> {
            let layout = this.array.layout();
            let fields = this.array.suai_fields().py()?;
            let dict = PyDict::new(py);
            dict.set_item(intern!(py, "data"), (fields.data, this.array.readonly()))?;
            dict.set_item(intern!(py, "shape"), PyTuple::new(py, layout.shape())?)?;
            dict.set_item(intern!(py, "strides"), strides_value(py, fields.strides)?)?;
            dict.set_item(intern!(py, "offset"), fields.offset)?;
            dict.set_item(intern!(py, "typestr"), layout.dtype().typestr().py()?)?;
            dict.set_item(intern!(py, "version"), devbuf::interface::SUAI_VERSION)?;
            dict.set_item(intern!(py, "syclobj"), this.queue.clone_ref(py))?;
            Ok(dict.unbind())
        };
        build().map_err(|err| as_attribute_error(err, py, ATTRIBUTE))
    })?;
    order_pending_work_on_own_queue(this, py)?;
    cached.bind(py).copy()
}

/// A SYCL consumer orders its work on our queue (SUAI's `syclobj`, `sycl_queue`): pending work
/// elsewhere (another library's queue, when this memory was imported) must come first there.
pub(crate) fn order_pending_work_on_own_queue(this: &PyArray, py: Python<'_>) -> PyResult<()> {
    let buffer = this.array.buffer();
    if buffer.has_pending_work() {
        py.detach(|| buffer.order_on(buffer.queue())).py()?;
    }
    Ok(())
}

pub(crate) fn cai<'py>(this: &PyArray, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
    const ATTRIBUTE: &str = "__cuda_array_interface__";
    let cached = this.cache.cai.get_or_try_init(py, || {
        require_protocol(this, Protocol::Cai, ATTRIBUTE)?;
        this.array.buffer().mark_exported();
        let build = || -> PyResult<Py<PyDict>> {
            let layout = this.array.layout();
            let strides = this
                .array
                .cai_strides()
                .map(|s| s.iter().map(|&b| b as i64).collect());
            let dict = PyDict::new(py);
            dict.set_item(
                intern!(py, "data"),
                (this.array.cai_data(), this.array.readonly()),
            )?;
            dict.set_item(intern!(py, "shape"), PyTuple::new(py, layout.shape())?)?;
            dict.set_item(intern!(py, "strides"), strides_value(py, strides)?)?;
            dict.set_item(intern!(py, "typestr"), layout.dtype().typestr().py()?)?;
            dict.set_item(intern!(py, "version"), 3)?;
            dict.set_item(intern!(py, "stream"), py.None())?;
            Ok(dict.unbind())
        };
        build().map_err(|err| as_attribute_error(err, py, ATTRIBUTE))
    })?;
    let dict = cached.bind(py).copy()?;
    if let Some(stream) = ordering::cai_export_stream(this).py()? {
        dict.set_item(intern!(py, "stream"), stream)?;
    }
    Ok(dict)
}

fn own_dlpack_device(this: &PyArray) -> DLDevice {
    let buffer = this.array.buffer();
    buffer.queue().dlpack_device(buffer.kind())
}

pub(crate) fn dlpack_device<'py>(this: &PyArray, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
    let cached = this.cache.dlpack_device.get_or_try_init(py, || {
        let device = own_dlpack_device(this);
        PyTuple::new(py, [device.device_type.0 as i32, device.device_id]).map(Bound::unbind)
    })?;
    Ok(cached.bind(py).clone())
}

const CPU: DLDevice = DLDevice {
    device_type: DLDeviceType::CPU,
    device_id: 0,
};

/// The major version of `__dlpack__`'s `max_version=(major, minor)`; read directly, since this is
/// on every consumer's hot path.
pub(crate) fn major_version(max_version: &Bound<'_, PyAny>) -> PyResult<u32> {
    let major = match max_version.cast::<PyTuple>() {
        Ok(tuple) if tuple.len() == 2 => tuple.get_item(0)?.extract::<u32>().ok(),
        _ => None,
    };
    major.ok_or_else(|| {
        PyTypeError::new_err(format!(
            "max_version: expected a (major, minor) tuple of ints, got {}",
            max_version
                .repr()
                .map_or_else(|_| "?".into(), |r| r.to_string())
        ))
    })
}

/// `__dlpack__`, per the array API and DLPack 1.3: a versioned capsule when the consumer's
/// `max_version` is at least 1.0 (`versioned`), the legacy one otherwise; `dl_device` and `copy`
/// decide between a zero-copy export (also to the CPU for host-accessible memory) and a copy.
pub(crate) fn dlpack<'py>(
    this: &PyArray,
    py: Python<'py>,
    stream: Option<&Bound<'py, PyAny>>,
    versioned: bool,
    dl_device: Option<(i32, i32)>,
    copy: Option<bool>,
) -> PyResult<Bound<'py, PyCapsule>> {
    let prepared = this.dlpack();
    let own = match &prepared.template {
        Ok(template) => template.device(),
        Err(_) => own_dlpack_device(this),
    };
    let target = match dl_device {
        None => own,
        Some((device_type, device_id)) => DLDevice {
            device_type: DLDeviceType(device_type as _),
            device_id,
        },
    };
    let zero_copy = copy != Some(true)
        && (target == own || (target == CPU && this.array.buffer().is_host_accessible()));
    if zero_copy
        && target == own
        && let Some(refusal) = &prepared.refusal
    {
        return Err(PyBufferError::new_err(format!("__dlpack__: {refusal}")));
    }
    // The legacy capsule has no read-only flag: its consumer would take the memory as writable.
    if zero_copy && !versioned && this.array.readonly() {
        return Err(PyBufferError::new_err(
            "__dlpack__: the array is read-only and a legacy (unversioned) DLPack capsule cannot \
             say so; pass max_version=(1, 0) or later, or copy=True",
        ));
    }
    let (array, copied) = if zero_copy {
        ordering::prepare_dlpack_export(py, this, target, stream)?;
        this.array.buffer().mark_exported();
        (None, false)
    } else {
        if copy == Some(false) {
            return Err(PyBufferError::new_err(format!(
                "dl_device: {:?} memory on DLPack device {:?} cannot be exported to {:?} without a copy, and copy=False",
                this.array.buffer().kind(),
                (own.device_type.0, own.device_id),
                (target.device_type.0, target.device_id),
            )));
        }
        let copy = if target == CPU {
            let host = HostQueue::shared();
            py.detach(|| this.array.copy_to(&host, MemKind::Host))
                .py()?
        } else if target == own {
            let queue = this.array.buffer().queue();
            let kind = this.array.buffer().kind();
            py.detach(|| this.array.copy_to(queue, kind)).py()?
        } else {
            return Err(PyBufferError::new_err(format!(
                "dl_device: devbuf copies to the CPU (1, 0) or to the array's own device {:?}, not to {:?}",
                (own.device_type.0, own.device_id),
                (target.device_type.0, target.device_id),
            )));
        };
        (Some(copy), true)
    };
    let flags = if copied {
        DlpackFlags::IS_COPIED
    } else {
        DlpackFlags::empty()
    };
    let (array, template) = match &array {
        Some(copy) => (copy, DlpackTemplate::new(copy, target).py()?),
        None => match &prepared.template {
            Ok(template) => (&this.array, template.clone().on_device(target)),
            Err(reason) => return Err(PyBufferError::new_err(reason.clone())),
        },
    };
    Ok(if versioned {
        export_capsule::<DLManagedTensorVersioned>(py, array, template, flags)?
    } else {
        export_capsule::<DLManagedTensor>(py, array, template, flags)?
    })
}

fn export_capsule<'py, T: ManagedTensorAbi>(
    py: Python<'py>,
    array: &Array,
    template: DlpackTemplate,
    flags: DlpackFlags,
) -> PyResult<Bound<'py, PyCapsule>> {
    let tensor = dlpack::export::<T>(array, template, flags, true);
    // SAFETY: the name is a static C string, the destructor matches the tensor's ABI, and the
    // capsule takes the capsule-side reference of the export.
    let capsule = unsafe {
        ffi::PyCapsule_New(
            tensor.as_ptr().cast(),
            T::CAPSULE_NAME.as_ptr(),
            Some(capsule_destructor::<T>),
        )
    };
    if capsule.is_null() {
        // SAFETY: the tensor never left us: as for a capsule that died unconsumed, this releases
        // the memory and frees the export, both references included (once: the block is gone).
        unsafe { dlpack::release_capsule(tensor, false) };
        return Err(PyErr::fetch(py));
    }
    // SAFETY: PyCapsule_New returned a new reference to a capsule.
    Ok(unsafe { Bound::from_owned_ptr(py, capsule).cast_into_unchecked() })
}

/// Releases the capsule's reference of an export. A consumer that took the tensor renamed the
/// capsule ("used_dltensor..."); otherwise the memory is released here.
unsafe extern "C" fn capsule_destructor<T: ManagedTensorAbi>(capsule: *mut ffi::PyObject) {
    // SAFETY: CPython calls this with our live capsule; the error indicator is saved and restored
    // around the calls, which may only fail by setting it.
    unsafe {
        let (mut kind, mut value, mut traceback) = (
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
        );
        ffi::PyErr_Fetch(&mut kind, &mut value, &mut traceback);
        let consumed = ffi::PyCapsule_IsValid(capsule, T::CAPSULE_NAME.as_ptr()) == 0;
        let name = ffi::PyCapsule_GetName(capsule);
        if let Some(tensor) = NonNull::new(ffi::PyCapsule_GetPointer(capsule, name).cast::<T>()) {
            dlpack::release_capsule(tensor, consumed);
        }
        ffi::PyErr_Clear();
        ffi::PyErr_Restore(kind, value, traceback);
    }
}

/// The buffer protocol, for host-accessible memory.
///
/// # Safety
/// `view` is a writable `Py_buffer` from CPython's `PyObject_GetBuffer`.
pub(crate) unsafe fn get_buffer(
    slf: &Bound<'_, PyArray>,
    view: *mut ffi::Py_buffer,
    flags: c_int,
) -> PyResult<()> {
    let this = slf.get();
    let buffer = this.array.buffer();
    let layout = this.array.layout();
    if !buffer.is_host_accessible() {
        return Err(PyBufferError::new_err(format!(
            "{} memory on {:?} is not host-accessible: use to_bytes(), or DLPack with a device-aware consumer",
            buffer.kind(),
            buffer.device().selector
        )));
    }
    if flags & ffi::PyBUF_WRITABLE != 0 && this.array.readonly() {
        return Err(PyBufferError::new_err("the array is read-only"));
    }
    let (c, f) = (layout.is_c_contiguous(), layout.is_f_contiguous());
    let contiguity_ok = if flags & ffi::PyBUF_ANY_CONTIGUOUS == ffi::PyBUF_ANY_CONTIGUOUS {
        c || f
    } else if flags & ffi::PyBUF_C_CONTIGUOUS == ffi::PyBUF_C_CONTIGUOUS {
        c
    } else if flags & ffi::PyBUF_F_CONTIGUOUS == ffi::PyBUF_F_CONTIGUOUS {
        f
    } else {
        c || flags & ffi::PyBUF_STRIDES == ffi::PyBUF_STRIDES
    };
    if !contiguity_ok {
        return Err(PyBufferError::new_err(format!(
            "the requested contiguity does not hold for byte strides {:?}",
            layout.strides()
        )));
    }
    let format = if flags & ffi::PyBUF_FORMAT != 0 {
        layout
            .dtype()
            .buffer_format()
            .ok_or_else(|| {
                PyBufferError::new_err(format!("{} has no buffer-protocol format", layout.dtype()))
            })?
            .as_ptr()
    } else {
        std::ptr::null()
    };
    // Device work still running on the memory must finish before the host reads it: devbuf's,
    // and once the memory was handed out, other libraries' on the queues devbuf knows of.
    if buffer.needs_synchronize() {
        slf.py().detach(|| buffer.synchronize()).py()?;
    }
    let ndim = layout.ndim();
    // SAFETY: `view` is valid (caller), and shape/strides point into the layout, which lives as
    // long as `view.obj` (a new reference to this array) keeps the array alive; usize and isize
    // have the same layout as Py_ssize_t.
    unsafe {
        (*view).buf = this.array.data_ptr() as *mut _;
        (*view).obj = slf.clone().into_any().into_ptr();
        (*view).len = layout.nbytes() as ffi::Py_ssize_t;
        (*view).readonly = this.array.readonly() as c_int;
        (*view).itemsize = layout.dtype().itemsize() as ffi::Py_ssize_t;
        (*view).format = format.cast_mut();
        (*view).ndim = ndim as c_int;
        (*view).shape = if flags & ffi::PyBUF_ND == ffi::PyBUF_ND {
            layout.shape().as_ptr().cast::<ffi::Py_ssize_t>().cast_mut()
        } else {
            std::ptr::null_mut()
        };
        (*view).strides = if flags & ffi::PyBUF_STRIDES == ffi::PyBUF_STRIDES {
            layout
                .strides()
                .as_ptr()
                .cast::<ffi::Py_ssize_t>()
                .cast_mut()
        } else {
            std::ptr::null_mut()
        };
        (*view).suboffsets = std::ptr::null_mut();
        (*view).internal = std::ptr::null_mut();
    }
    Ok(())
}
