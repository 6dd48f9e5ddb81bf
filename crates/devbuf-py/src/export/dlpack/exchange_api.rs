//! DLPack 1.3's C exchange API: a static table of C functions published on the `Array` type as
//! `__dlpack_c_exchange_api__` (a "dlpack_exchange_api" capsule), so C and Rust consumers
//! exchange tensors without going through Python calls.
//!
//! Every function is `extern "C"`, catches panics, and reports failure by returning -1 with a
//! Python exception set (or through `SetError` for the allocator, which may run without the GIL).

use std::ffi::{CString, c_char, c_int, c_void};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::ptr::NonNull;

use devbuf::dlpack::{self, DlpackTemplate, ManagedTensor};
use devbuf::dlpark::DlpackFlags;
use devbuf::dlpark::ffi::{
    DLDevice, DLDeviceType, DLManagedTensorVersioned, DLPackExchangeAPI, DLPackExchangeAPIHeader,
    DLTensor,
};
use devbuf::{Array, Buffer, DType, Layout};
use pyo3::exceptions::{PyBufferError, PyRuntimeError, PyTypeError};
use pyo3::prelude::*;
use pyo3::types::PyCapsule;
use pyo3::{Borrowed, ffi};

use crate::errors::IntoPyResult;
use crate::objects::array::PyArray;
use crate::objects::queue::shared_queue_for_dlpack;

/// The table; it lives for the whole process, as the protocol requires.
struct Table(DLPackExchangeAPI);

// SAFETY: the table is immutable; `prev_api` is null.
unsafe impl Sync for Table {}

static TABLE: Table = Table(DLPackExchangeAPI {
    header: DLPackExchangeAPIHeader {
        version: dlpack::VERSION,
        prev_api: std::ptr::null_mut(),
    },
    managed_tensor_allocator: Some(managed_tensor_allocator),
    managed_tensor_from_py_object_no_sync: Some(managed_tensor_from_py_object),
    managed_tensor_to_py_object_no_sync: Some(managed_tensor_to_py_object),
    dltensor_from_py_object_no_sync: Some(dltensor_from_py_object),
    current_work_stream: Some(current_work_stream),
});

/// The capsule published as `Array.__dlpack_c_exchange_api__`.
pub(crate) fn capsule(py: Python<'_>) -> PyResult<Bound<'_, PyCapsule>> {
    let table = std::ptr::from_ref(&TABLE.0).cast_mut().cast::<c_void>();
    // SAFETY: a static table and a static name; no destructor is needed.
    let capsule = unsafe { ffi::PyCapsule_New(table, c"dlpack_exchange_api".as_ptr(), None) };
    if capsule.is_null() {
        return Err(PyErr::fetch(py));
    }
    // SAFETY: a new reference to a capsule.
    Ok(unsafe { Bound::from_owned_ptr(py, capsule).cast_into_unchecked() })
}

/// Runs `body`, turning an Err or a panic into -1 with the Python exception set: the one way in
/// for every function of the table (C callers, not CPython's calls, so no pyo3 trampoline of its
/// own; `Python::attach` on a thread that is already attached, as the protocol's callers are, only
/// counts it, and a `Py` dropped inside is released at once).
#[inline]
fn guarded(body: impl FnOnce(Python<'_>) -> PyResult<()>) -> c_int {
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        Python::attach(|py| match body(py) {
            Ok(()) => 0,
            Err(err) => {
                err.restore(py);
                -1
            }
        })
    }));
    outcome.unwrap_or_else(|_| {
        Python::attach(|py| {
            PyRuntimeError::new_err("devbuf: panic in a DLPack exchange function").restore(py)
        });
        -1
    })
}

/// Borrows `py_object` as one of our arrays.
///
/// # Safety
/// `py_object` is a live Python object and the thread is attached.
unsafe fn borrow_array<'a, 'py>(
    py: Python<'py>,
    py_object: *mut c_void,
) -> PyResult<Borrowed<'a, 'py, PyArray>> {
    if py_object.is_null() {
        return Err(PyTypeError::new_err("py_object: NULL"));
    }
    // SAFETY: the caller guarantees a live object.
    let object = unsafe { Borrowed::from_ptr(py, py_object.cast()) };
    object.cast::<PyArray>().map_err(|_| {
        PyTypeError::new_err(
            "py_object: not a devbuf Array or Buffer (use the exchange table of its own type)",
        )
    })
}

/// A no-sync export leaves ordering to the consumer, which orders after `current_work_stream`,
/// the device's shared queue: `devbuf::exchange::exchange_table_export` on that queue, looked up
/// only where the memory's own queue is not it or something may have to be ordered.
fn export_without_sync(
    py: Python<'_>,
    this: &PyArray,
    buffer: &Buffer,
    device: DLDevice,
) -> PyResult<()> {
    if exported_in_order(this, buffer) {
        return Ok(());
    }
    export_on_work_stream(py, buffer, device)
}

/// Marks `buffer` exported and says so when its export needs no ordering: nothing to synchronize,
/// and its queue is the device's shared one (the consumer's `current_work_stream`).
#[inline]
fn exported_in_order(this: &PyArray, buffer: &Buffer) -> bool {
    let in_order = !buffer.needs_synchronize() && this.queue.get().shared;
    if in_order {
        buffer.mark_exported();
    }
    in_order
}

#[cold]
fn export_on_work_stream(py: Python<'_>, buffer: &Buffer, device: DLDevice) -> PyResult<()> {
    let queue = shared_queue_for_dlpack(py, device)?;
    let queue = queue.get().queue()?;
    devbuf::exchange::exchange_table_export(buffer, queue).py()
}

unsafe extern "C" fn managed_tensor_from_py_object(
    py_object: *mut c_void,
    out: *mut *mut DLManagedTensorVersioned,
) -> c_int {
    guarded(|py| {
        // SAFETY: the protocol passes a live object of our type and a writable out-pointer.
        let array = unsafe { borrow_array(py, py_object)? };
        let this = array.get();
        let open = this.array(py)?;
        let template = this
            .dlpack(&open)
            .own_device_template()
            .map_err(PyBufferError::new_err)?
            .clone();
        let buffer = open.buffer();
        export_without_sync(py, this, buffer, template.device())?;
        let tensor = dlpack::export::<DLManagedTensorVersioned>(
            &open,
            template,
            DlpackFlags::empty(),
            false,
        );
        // SAFETY: `out` is writable (caller).
        unsafe { *out = tensor.as_ptr() };
        Ok(())
    })
}

unsafe extern "C" fn dltensor_from_py_object(py_object: *mut c_void, out: *mut DLTensor) -> c_int {
    // A panic there (none is known) takes the guarded path too, which raises its own.
    // SAFETY: the protocol passes a live object (or NULL) and a writable DLTensor.
    let plain = catch_unwind(AssertUnwindSafe(|| unsafe { fill_plain(py_object, out) }));
    if matches!(plain, Ok(true)) {
        return 0;
    }
    guarded(|py| {
        // SAFETY: as above.
        let array = unsafe { borrow_array(py, py_object) }?;
        let open = array.get().array(py)?;
        let template = array
            .get()
            .dlpack(&open)
            .own_device_template()
            .map_err(PyBufferError::new_err)?;
        // A bare DLTensor has no flags: handing out read-only memory would invite writes.
        if open.readonly() {
            return Err(PyBufferError::new_err(
                "py_object: the array is read-only and a bare DLTensor cannot say so; use \
                 managed_tensor_from_py_object_no_sync, whose flags can",
            ));
        }
        export_without_sync(py, array.get(), open.buffer(), template.device())?;
        // The tensor owns nothing: its consumer keeps `py_object` to keep the memory alive.
        open.anchor();
        // SAFETY: `out` is writable (caller); the template lives as long as the array.
        template.fill(unsafe { &mut *out });
        Ok(())
    })
}

/// [`dltensor_from_py_object`]'s common case (our writable array, exported in order, so no
/// Python call), filled without [`guarded`]'s attach: a C caller is no pyo3 frame, so
/// `Python::attach` would take `PyGILState_Ensure` and `_Release`, several times the ~6 ns this
/// takes (its goal is 50 ns, BENCHMARKS.md). Sound on the caller's attachment uncounted because
/// it makes and drops no `Py` (borrowed objects and Rust data only), so nothing waits in pyo3's
/// pool. `false`, having changed nothing, for every other case: the caller then takes the guarded
/// path, which does the same checks and raises what fails.
///
/// # Safety
/// The thread is attached (the protocol's caller holds the GIL: it passes a Python object);
/// `py_object` is a live object or NULL, `out` writable.
unsafe fn fill_plain(py_object: *mut c_void, out: *mut DLTensor) -> bool {
    // SAFETY: the caller's.
    let py = unsafe { Python::assume_attached() };
    // SAFETY: the caller's.
    let Ok(array) = (unsafe { borrow_array(py, py_object) }) else {
        return false;
    };
    let this = array.get();
    let Ok(open) = this.array(py) else {
        return false;
    };
    let Ok(template) = this.dlpack(&open).own_device_template() else {
        return false;
    };
    if open.readonly() || !exported_in_order(this, open.buffer()) {
        return false;
    }
    // The tensor owns nothing: its consumer keeps `py_object` to keep the memory alive.
    open.anchor();
    // SAFETY: `out` is writable (caller); the template lives as long as the array.
    template.fill(unsafe { &mut *out });
    true
}

unsafe extern "C" fn managed_tensor_to_py_object(
    tensor: *mut DLManagedTensorVersioned,
    out_py_object: *mut *mut c_void,
) -> c_int {
    guarded(|py| {
        let tensor = NonNull::new(tensor).ok_or_else(|| PyTypeError::new_err("tensor: NULL"))?;
        let array =
            crate::import::dlpack::import_owned_tensor(py, ManagedTensor::Versioned(tensor))?;
        // SAFETY: `out_py_object` is writable (caller); it receives a new reference.
        unsafe { *out_py_object = array.into_ptr().cast() };
        Ok(())
    })
}

unsafe extern "C" fn managed_tensor_allocator(
    prototype: *mut DLTensor,
    out: *mut *mut DLManagedTensorVersioned,
    error_ctx: *mut c_void,
    set_error: Option<unsafe extern "C" fn(*mut c_void, *const c_char, *const c_char)>,
) -> c_int {
    // No Python here: the allocator may be called without the GIL and reports through SetError.
    let result = catch_unwind(AssertUnwindSafe(
        || -> Result<(), (&'static str, String)> {
            // SAFETY: the caller passes a valid prototype with `ndim` shape entries.
            let prototype =
                unsafe { prototype.as_ref() }.ok_or(("ValueError", "prototype: NULL".into()))?;
            let dtype =
                DType::from_dlpack(prototype.dtype).map_err(|e| ("ValueError", e.to_string()))?;
            let ndim = usize::try_from(prototype.ndim)
                .map_err(|_| ("ValueError", "ndim: negative".to_string()))?;
            let shape = if ndim == 0 {
                Vec::new()
            } else if prototype.shape.is_null() {
                return Err(("ValueError", "shape: NULL".into()));
            } else {
                // SAFETY: DLPack promises `ndim` readable values.
                unsafe { std::slice::from_raw_parts(prototype.shape, ndim) }
                    .iter()
                    .map(|&n| {
                        usize::try_from(n)
                            .map_err(|_| ("ValueError", format!("shape: extent {n} is negative")))
                    })
                    .collect::<Result<Vec<_>, _>>()?
            };
            let device = prototype.device;
            let kind = devbuf::dlpack_kind_for(device.device_type).ok_or_else(|| {
                (
                    "ValueError",
                    format!(
                        "device: devbuf cannot allocate on DLPack device type {}",
                        device.device_type.0
                    ),
                )
            })?;
            let error = |e: devbuf::Error| {
                let kind = match e {
                    devbuf::Error::OutOfMemory { .. } => "MemoryError",
                    _ => "RuntimeError",
                };
                (kind, e.to_string())
            };
            let layout =
                Layout::contiguous(dtype, &shape, 0).map_err(|e| ("ValueError", e.to_string()))?;
            let queue = devbuf::queue_for_dlpack_device(device).map_err(error)?;
            let buffer = Buffer::alloc(&queue, kind, layout.nbytes()).map_err(error)?;
            let array = Array::new(buffer, layout).map_err(error)?;
            let template =
                DlpackTemplate::new(&array, queue.interop().dlpack_device(kind)).map_err(error)?;
            let tensor = dlpack::export::<DLManagedTensorVersioned>(
                &array,
                template,
                DlpackFlags::empty(),
                false,
            );
            // SAFETY: `out` is writable (caller).
            unsafe { *out = tensor.as_ptr() };
            Ok(())
        },
    ));
    let failure = match result {
        Ok(Ok(())) => return 0,
        Ok(Err(failure)) => failure,
        Err(_) => (
            "RuntimeError",
            "devbuf: panic in the DLPack allocator".to_string(),
        ),
    };
    if let Some(set_error) = set_error {
        let kind = CString::new(failure.0).unwrap_or_default();
        let message = CString::new(failure.1.replace('\0', " ")).unwrap_or_default();
        // SAFETY: the caller's error callback with its own context and two C strings.
        unsafe { set_error(error_ctx, kind.as_ptr(), message.as_ptr()) };
    }
    -1
}

unsafe extern "C" fn current_work_stream(
    device_type: DLDeviceType,
    device_id: i32,
    out_current_stream: *mut *mut c_void,
) -> c_int {
    if device_type == DLDeviceType::CPU {
        // SAFETY: `out_current_stream` is writable (caller).
        unsafe { *out_current_stream = std::ptr::null_mut() };
        return 0;
    }
    guarded(|py| {
        let queue = shared_queue_for_dlpack(
            py,
            DLDevice {
                device_type,
                device_id,
            },
        )?;
        let stream = queue
            .get()
            .queue()?
            .interop()
            .dlpack_work_stream()
            .unwrap_or(0);
        // SAFETY: `out_current_stream` is writable (caller).
        unsafe { *out_current_stream = stream as *mut c_void };
        Ok(())
    })
}
