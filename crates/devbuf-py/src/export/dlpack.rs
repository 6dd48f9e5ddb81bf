//! `__dlpack__` (the method itself: `add_dlpack_method`) and `__dlpack_device__` of an `Array`
//! (and so a `Buffer`): capsules of either DLPack ABI, zero-copy or copied.

pub(crate) mod exchange_api;

use std::ffi::{CStr, c_char};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::ptr::NonNull;
use std::sync::Arc;

use devbuf::dlpack::export_plan::{
    CopyTo, ExportOrdering, ExportPlan, ExportRequest, ExportedArray,
    plain_export_is_streamless_zero_copy, plan_export,
};
use devbuf::dlpack::{self, DlpackTemplate, ManagedTensorAbi};
use devbuf::dlpark::DlpackFlags;
use devbuf::dlpark::ffi::{DLDevice, DLDeviceType, DLManagedTensor, DLManagedTensorVersioned};
use devbuf::{Array, MemKind};
use pyo3::exceptions::{PyBufferError, PyTypeError};
use pyo3::ffi;
use pyo3::panic::PanicException;
use pyo3::prelude::*;
use pyo3::types::{PyCapsule, PyTuple, PyType};

use crate::errors::IntoPyResult;
use crate::export::ordering;
use crate::gil_as_lock::LastObject;
use crate::objects::array::PyArray;
use crate::objects::queue::host_memory_queue;
use crate::vectorcall::{Body, Signature};

fn own_dlpack_device(array: &Array) -> DLDevice {
    let buffer = array.buffer();
    buffer.queue().interop().dlpack_device(buffer.kind())
}

pub(crate) fn dlpack_device<'py>(this: &PyArray, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
    let array = this.array(py)?;
    let cached = this.cache.dlpack_device.get_or_try_init(py, || {
        let device = own_dlpack_device(&array);
        PyTuple::new(py, [device.device_type.0 as i32, device.device_id]).map(Bound::unbind)
    })?;
    Ok(cached.bind(py).clone())
}

/// The major version of `__dlpack__`'s `max_version=(major, minor)`; read directly, since this is
/// on every consumer's hot path.
pub(crate) fn major_version(max_version: &Bound<'_, PyAny>) -> PyResult<u32> {
    match LAST_MAX_VERSION.answer_for(max_version.as_ptr()) {
        Some(major) => Ok(major),
        None => read_and_keep_major_version(max_version),
    }
}

/// The last exact tuple `max_version` read, with its major version: a consumer passes the same
/// tuple on every call (NumPy's `from_dlpack` keeps one; a call site's literal is a constant of
/// its code), and a tuple's items never change.
static LAST_MAX_VERSION: LastObject = LastObject::new();

#[inline(never)]
fn read_and_keep_major_version(max_version: &Bound<'_, PyAny>) -> PyResult<u32> {
    let tuple = max_version.as_ptr();
    // SAFETY: a live object, borrowed for the call, with the GIL held.
    let Some(major) = (unsafe { read_major_version(tuple) }) else {
        return Err(PyTypeError::new_err(format!(
            "max_version: expected a (major, minor) tuple of ints, got {}",
            max_version
                .repr()
                .map_or_else(|_| "?".into(), |r| r.to_string())
        )));
    };
    // SAFETY: the GIL is held and the tuple is live; an exact tuple's items never change (a
    // subclass could answer differently in other ways: not kept).
    unsafe {
        if ffi::Py_TYPE(tuple) == &raw mut ffi::PyTuple_Type {
            LAST_MAX_VERSION.keep(tuple, major);
        }
    }
    Ok(major)
}

/// The major version in `max_version`, if it is a tuple of two whose first item is an int that
/// fits a `u32`. The exact types (what every caller passes) are told by their type object's
/// address: under the stable ABI `PyTuple_Check` and `PyLong_Check` are calls that read the
/// type's flags; subclasses take those.
///
/// # Safety
/// `max_version` is a live object and the GIL is held.
unsafe fn read_major_version(max_version: *mut ffi::PyObject) -> Option<u32> {
    // SAFETY: (all) the caller's; an item borrowed from the tuple is used while the tuple lives;
    // an int too large for a C long sets OverflowError, which is cleared (the caller's TypeError
    // replaces it).
    unsafe {
        let is_tuple = ffi::Py_TYPE(max_version) == &raw mut ffi::PyTuple_Type
            || ffi::PyTuple_Check(max_version) != 0;
        if !is_tuple || ffi::PyTuple_Size(max_version) != 2 {
            return None;
        }
        let item = ffi::PyTuple_GetItem(max_version, 0);
        let is_int =
            ffi::Py_TYPE(item) == &raw mut ffi::PyLong_Type || ffi::PyLong_Check(item) != 0;
        if !is_int {
            return None;
        }
        let major = ffi::PyLong_AsLong(item);
        if major == -1 && !ffi::PyErr_Occurred().is_null() {
            ffi::PyErr_Clear();
        }
        u32::try_from(major).ok()
    }
}

const DLPACK_DOC: &CStr =
    c"__dlpack__($self, /, *, max_version=None, dl_device=None, copy=None, stream=None)
--

A DLPack capsule of this array (see the array API's __dlpack__): a versioned capsule when
max_version is at least (1, 0), the legacy one otherwise.";

static DLPACK: Signature<4> = Signature::new(
    "Array.__dlpack__()",
    ["max_version", "dl_device", "copy", "stream"],
    0,
    0,
);

/// An argument that is there and not None.
fn given<'a, 'py>(value: Option<Borrowed<'a, 'py, PyAny>>) -> Option<Borrowed<'a, 'py, PyAny>> {
    value.filter(|value| !value.is_none())
}

/// Sets `__dlpack__` on the `Array` class (and so its subclasses): the hottest call of the
/// exchange protocols, through `vectorcall`'s way in.
pub(crate) fn add_dlpack_method(array_type: &Bound<'_, PyType>) -> PyResult<()> {
    crate::vectorcall::add_method::<Dlpack>(array_type, c"__dlpack__", DLPACK_DOC)
}

/// `Array.__dlpack__`'s body.
struct Dlpack;

impl Body for Dlpack {
    unsafe fn plain(
        py: Python<'_>,
        this: *mut ffi::PyObject,
        args: *const *mut ffi::PyObject,
        nargs: ffi::Py_ssize_t,
        kwnames: *mut ffi::PyObject,
    ) -> Option<PyResult<*mut ffi::PyObject>> {
        // SAFETY: as in `call`.
        let this = unsafe { Borrowed::from_ptr(py, this).cast_unchecked::<PyArray>() };
        // SAFETY: CPython's arguments, live for the call.
        let [max_version, dl_device, copy, stream] =
            match unsafe { DLPACK.parse(py, args, nargs, kwnames) } {
                Ok(arguments) => arguments,
                Err(err) => return Some(Err(err)),
            };
        if given(dl_device).is_some() || given(copy).is_some() || given(stream).is_some() {
            return None;
        }
        let versioned = match given(max_version) {
            Some(version) => match major_version(&version) {
                Ok(major) => major >= 1,
                Err(err) => return Some(Err(err)),
            },
            None => false,
        };
        dlpack_in_place(this.get(), py, versioned).map(|made| made.map(Bound::into_ptr))
    }

    unsafe fn call(
        py: Python<'_>,
        this: *mut ffi::PyObject,
        args: *const *mut ffi::PyObject,
        nargs: ffi::Py_ssize_t,
        kwnames: *mut ffi::PyObject,
    ) -> PyResult<*mut ffi::PyObject> {
        // SAFETY: a live object, which the method descriptor (`add_method`) checked is an
        // instance of the class or a subclass before calling.
        let this = unsafe { Borrowed::from_ptr(py, this).cast_unchecked::<PyArray>() };
        // SAFETY: CPython's arguments, live for the call.
        let [max_version, dl_device, copy, stream] =
            unsafe { DLPACK.parse(py, args, nargs, kwnames)? };
        dlpack_method(
            this.get(),
            py,
            given(max_version).as_deref(),
            given(dl_device).as_deref(),
            given(copy).as_deref(),
            given(stream).as_deref(),
        )
        .map(Bound::into_ptr)
    }
}

/// `__dlpack__(max_version=, dl_device=, copy=, stream=)`, each argument absent or None: the
/// common call (at most `max_version`, what `np.from_dlpack` passes) takes [`dlpack_as_is`],
/// every other [`dlpack_with_arguments`], out of line.
#[inline]
pub(crate) fn dlpack_method<'py>(
    this: &PyArray,
    py: Python<'py>,
    max_version: Option<&Bound<'py, PyAny>>,
    dl_device: Option<&Bound<'py, PyAny>>,
    copy: Option<&Bound<'py, PyAny>>,
    stream: Option<&Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyCapsule>> {
    let versioned = match max_version {
        Some(version) => major_version(version)? >= 1,
        None => false,
    };
    if dl_device.is_none() && copy.is_none() && stream.is_none() {
        return dlpack_as_is(this, py, versioned);
    }
    dlpack_with_arguments(this, py, versioned, dl_device, copy, stream)
}

/// [`dlpack_method`] with a `dl_device`, `copy` or `stream`: each read, the error naming it.
#[cold]
#[inline(never)]
fn dlpack_with_arguments<'py>(
    this: &PyArray,
    py: Python<'py>,
    versioned: bool,
    dl_device: Option<&Bound<'py, PyAny>>,
    copy: Option<&Bound<'py, PyAny>>,
    stream: Option<&Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyCapsule>> {
    let dl_device = dl_device
        .map(|device| {
            device.extract::<(i32, i32)>().map_err(|_| {
                wrong_argument(device, "dl_device", "a (device type, device id) tuple")
            })
        })
        .transpose()?;
    let copy = copy
        .map(|copy| {
            copy.extract::<bool>()
                .map_err(|_| wrong_argument(copy, "copy", "None or a bool"))
        })
        .transpose()?;
    dlpack(this, py, stream, versioned, dl_device, copy)
}

/// A TypeError naming `name`, what it takes and the value it got.
fn wrong_argument(value: &Bound<'_, PyAny>, name: &str, expected: &str) -> PyErr {
    let got = value.repr().map_or_else(|_| "?".into(), |r| r.to_string());
    PyTypeError::new_err(format!("{name}: expected {expected}, got {got}"))
}

/// `__dlpack__` with no `dl_device`, `copy` or `stream` (or each None), what `np.from_dlpack`
/// and most consumers ask: a zero-copy export on the array's own device. The same result as
/// [`dlpack`] with those arguments, which takes every case this does not (and raises its errors).
///
/// Kept apart and small because on every call its code shares the instruction cache with the
/// consumer's and CPython's: within the general function the hot path spread over 21 cache lines
/// of 6 KiB of code (callgrind's cache simulation of `np.from_dlpack`: 26 instruction-cache misses
/// per call where NumPy's own export has none, at the same instruction count); see BENCHMARKS.md.
pub(crate) fn dlpack_as_is<'py>(
    this: &PyArray,
    py: Python<'py>,
    versioned: bool,
) -> PyResult<Bound<'py, PyCapsule>> {
    dlpack_in_place(this, py, versioned)
        .unwrap_or_else(|| dlpack(this, py, None, versioned, None, None))
}

/// [`dlpack_as_is`] where the array's own template serves as it is (no refusal, no backend rule
/// for a streamless export, and writable memory for a legacy capsule); `None`, having changed
/// nothing, where it does not. It makes and drops no `Py` (see `vectorcall::Body::plain`).
#[inline]
fn dlpack_in_place<'py>(
    this: &PyArray,
    py: Python<'py>,
    versioned: bool,
) -> Option<PyResult<Bound<'py, PyCapsule>>> {
    let open = match this.array(py) {
        Ok(open) => open,
        Err(err) => return Some(Err(err)),
    };
    let prepared = this.dlpack(&open);
    let template = match &prepared.template {
        Ok(template)
            if plain_export_is_streamless_zero_copy(
                prepared.refusal.is_some(),
                prepared.streamless_rule,
                versioned,
                open.readonly(),
            ) =>
        {
            template
        }
        _ => return None,
    };
    if let Err(err) = ordering::prepare_streamless_dlpack_export(&open) {
        return Some(Err(err));
    }
    let template = template.clone();
    Some(if versioned {
        export_capsule::<DLManagedTensorVersioned>(py, &open, template, DlpackFlags::empty())
    } else {
        export_capsule::<DLManagedTensor>(py, &open, template, DlpackFlags::empty())
    })
}

/// `__dlpack__`, per the array API and DLPack 1.3: a versioned capsule when the consumer's
/// `max_version` is at least 1.0 (`versioned`), the legacy one otherwise; `dl_device` and `copy`
/// decide between a zero-copy export (also to the CPU for host-accessible memory) and a copy, by
/// core's rule (`devbuf::dlpack::export_plan`).
#[cold]
#[inline(never)]
pub(crate) fn dlpack<'py>(
    this: &PyArray,
    py: Python<'py>,
    stream: Option<&Bound<'py, PyAny>>,
    versioned: bool,
    dl_device: Option<(i32, i32)>,
    copy: Option<bool>,
) -> PyResult<Bound<'py, PyCapsule>> {
    let open = this.array(py)?;
    let prepared = this.dlpack(&open);
    let own = match &prepared.template {
        Ok(template) => template.device(),
        Err(_) => own_dlpack_device(&open),
    };
    let exported = ExportedArray {
        own,
        kind: open.buffer().kind(),
        host_accessible: open.buffer().is_host_accessible(),
        readonly: open.readonly(),
        refusal: prepared.refusal.as_deref(),
        streamless_rule: prepared.streamless_rule,
    };
    let request = ExportRequest {
        versioned,
        dl_device: dl_device.map(|(device_type, device_id)| DLDevice {
            device_type: DLDeviceType(device_type as _),
            device_id,
        }),
        copy,
        stream_given: stream.is_some_and(|s| !s.is_none()),
    };
    let (array, template, flags) = match plan_export(&exported, &request).py()? {
        ExportPlan::ZeroCopy {
            target,
            ordering: order,
        } => {
            match order {
                ExportOrdering::Streamless => ordering::prepare_streamless_dlpack_export(&open)?,
                ExportOrdering::ForConsumer => {
                    ordering::prepare_dlpack_export(&open, target, stream)?
                }
            }
            match &prepared.template {
                Ok(template) => (
                    None,
                    template.clone().on_device(target),
                    DlpackFlags::empty(),
                ),
                Err(reason) => return Err(PyBufferError::new_err(reason.clone())),
            }
        }
        ExportPlan::Copy { target, to } => {
            let array: &Array = &open;
            let copy = match to {
                CopyTo::Host => {
                    let host = Arc::clone(host_memory_queue(py)?.get().queue()?);
                    py.detach(|| array.copy_to(&host, MemKind::Host)).py()?
                }
                CopyTo::OwnDevice => {
                    let (queue, kind) = (array.buffer().queue(), array.buffer().kind());
                    py.detach(|| array.copy_to(queue, kind)).py()?
                }
            };
            let template = DlpackTemplate::new(&copy, target).py()?;
            (Some(copy), template, DlpackFlags::IS_COPIED)
        }
    };
    let array = array.as_ref().unwrap_or(&open);
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
    // SAFETY: CPython calls this with our live capsule and the GIL held; an error already set (a
    // capsule freed while an exception propagates) is saved and restored around the calls, which
    // may only fail by setting one, cleared here. Without one set (the common case) there is
    // nothing to save.
    unsafe {
        let (mut kind, mut value, mut traceback) = (
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
        );
        let saved = !ffi::PyErr_Occurred().is_null();
        if saved {
            ffi::PyErr_Fetch(&mut kind, &mut value, &mut traceback);
        }
        // An unconsumed capsule still carries the very name it was made with (compared by
        // address first: no string compare on the common path); a consumer renames it.
        let name = ffi::PyCapsule_GetName(capsule);
        let consumed = name != T::CAPSULE_NAME.as_ptr() && !names_match(name, T::CAPSULE_NAME);
        if let Some(tensor) = NonNull::new(ffi::PyCapsule_GetPointer(capsule, name).cast::<T>()) {
            // No unwinding into CPython: a panic while releasing (the memory then stays) is
            // reported as any error in a destructor is, to `sys.unraisablehook`.
            if catch_unwind(AssertUnwindSafe(|| {
                dlpack::release_capsule(tensor, consumed)
            }))
            .is_err()
            {
                Python::attach(|py| {
                    let capsule = Borrowed::from_ptr(py, capsule);
                    PanicException::new_err("devbuf: panic releasing a DLPack capsule")
                        .write_unraisable(py, Some(&capsule));
                });
            }
        }
        if !ffi::PyErr_Occurred().is_null() {
            ffi::PyErr_Clear();
        }
        if saved {
            ffi::PyErr_Restore(kind, value, traceback);
        }
    }
}

/// Whether the C string `name` (which may be NULL) is `expected`, compared up to the first byte
/// that differs: a renamed capsule ("used_…") differs at its first, without measuring it first.
///
/// # Safety
/// `name` is NULL or a NUL-terminated string.
unsafe fn names_match(name: *const c_char, expected: &CStr) -> bool {
    !name.is_null()
        && expected
            .to_bytes_with_nul()
            .iter()
            .enumerate()
            // SAFETY: bytes before `name`'s NUL are read only while they matched `expected`'s
            // non-NUL bytes, so the read stops at `name`'s NUL at the latest.
            .all(|(i, &byte)| unsafe { *name.add(i) } as u8 == byte)
}
