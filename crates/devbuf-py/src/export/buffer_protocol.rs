//! The buffer protocol of an `Array` (and so a `Buffer`), for host-accessible memory.

use std::ffi::{c_char, c_int};

use pyo3::exceptions::PyBufferError;
use pyo3::ffi;
use pyo3::prelude::*;

use crate::errors::IntoPyResult;
use crate::gil_as_lock::OpenArray;
use crate::objects::array::PyArray;
use devbuf::{Array, Layout, MemKind};

/// The flag bits that ask for a contiguity (C, Fortran or either), beyond `PyBUF_STRIDES`.
const CONTIGUITY_BITS: c_int =
    (ffi::PyBUF_C_CONTIGUOUS | ffi::PyBUF_F_CONTIGUOUS | ffi::PyBUF_ANY_CONTIGUOUS)
        & !ffi::PyBUF_STRIDES;

/// The buffer protocol, for host-accessible memory.
///
/// # Safety
/// `view` is a writable `Py_buffer` from CPython's `PyObject_GetBuffer`.
pub(crate) unsafe fn get_buffer(
    slf: &Bound<'_, PyArray>,
    view: *mut ffi::Py_buffer,
    flags: c_int,
) -> PyResult<()> {
    let array = slf.get().array(slf.py())?;
    let buffer = array.buffer();
    // What NumPy and memoryview ask (strides, no contiguity) of host memory with nothing to wait
    // for: one test of each, then the view. Anything else takes the checks one by one, out of
    // line: this call's hot code shares the instruction cache with NumPy's and CPython's on every
    // call (see BENCHMARKS.md).
    if buffer.kind() == MemKind::Host
        && (flags & ffi::PyBUF_WRITABLE == 0 || !array.readonly())
        && flags & (CONTIGUITY_BITS | ffi::PyBUF_STRIDES) == ffi::PyBUF_STRIDES
        && let Some(format) = array.layout().dtype().buffer_format()
        && !buffer.needs_synchronize()
        && buffer.check_alive().is_ok()
    {
        let format = if flags & ffi::PyBUF_FORMAT != 0 {
            format.as_ptr()
        } else {
            std::ptr::null()
        };
        // SAFETY: the caller's.
        unsafe { fill(slf, &array, view, flags, format) };
        return Ok(());
    }
    // SAFETY: the caller's.
    unsafe { get_buffer_checked(slf, &array, view, flags) }
}

/// [`get_buffer`] for every other request or memory: each check in turn, with its refusal.
///
/// # Safety
/// As for [`get_buffer`].
#[cold]
#[inline(never)]
unsafe fn get_buffer_checked(
    slf: &Bound<'_, PyArray>,
    array: &OpenArray<'_>,
    view: *mut ffi::Py_buffer,
    flags: c_int,
) -> PyResult<()> {
    let buffer = array.buffer();
    let layout = array.layout();
    if !buffer.is_host_accessible() {
        return Err(not_host_accessible(array));
    }
    // Memory that died with its context (another library reset it) is not handed out again.
    buffer.check_alive().py()?;
    if flags & ffi::PyBUF_WRITABLE != 0 && array.readonly() {
        return Err(read_only());
    }
    // Contiguity is computed only where the consumer asks for it (NumPy asks for strides).
    if (flags & CONTIGUITY_BITS != 0 || flags & ffi::PyBUF_STRIDES != ffi::PyBUF_STRIDES)
        && !contiguity_holds(layout, flags)
    {
        return Err(not_contiguous(layout));
    }
    let format = if flags & ffi::PyBUF_FORMAT != 0 {
        match layout.dtype().buffer_format() {
            Some(format) => format.as_ptr(),
            None => return Err(no_format(layout)),
        }
    } else {
        std::ptr::null()
    };
    // Device work still running on the memory must finish before the host reads it: devbuf's,
    // and once the memory was handed out, other libraries' on the queues devbuf knows of.
    if buffer.needs_synchronize() {
        slf.py().detach(|| buffer.synchronize()).py()?;
    }
    // SAFETY: the caller's.
    unsafe { fill(slf, array, view, flags, format) };
    Ok(())
}

/// Fills `view` with `array` (of `slf`), as `flags` ask, once every check has passed.
///
/// # Safety
/// As for [`get_buffer`].
#[inline(always)]
unsafe fn fill(
    slf: &Bound<'_, PyArray>,
    array: &OpenArray<'_>,
    view: *mut ffi::Py_buffer,
    flags: c_int,
    format: *const c_char,
) {
    let layout = array.layout();
    // A consumer may keep this object and the pointer past the view (NumPy's `frombuffer`
    // releases the view at once): `close()` leaves the array to the object from now on.
    array.anchor();
    // SAFETY: `view` is valid (caller), and shape/strides point into the layout, which stays in
    // place (anchored, above) as long as `view.obj` (a new reference to this array) keeps the
    // array alive; usize and isize have the same layout as Py_ssize_t.
    unsafe {
        (*view).buf = array.data_ptr() as *mut _;
        (*view).obj = slf.clone().into_any().into_ptr();
        (*view).len = layout.nbytes() as ffi::Py_ssize_t;
        (*view).readonly = array.readonly() as c_int;
        (*view).itemsize = layout.dtype().itemsize() as ffi::Py_ssize_t;
        (*view).format = format.cast_mut();
        (*view).ndim = layout.ndim() as c_int;
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
}

/// Whether `layout` has the contiguity `flags` ask for (none without strides means C order).
#[inline(never)]
fn contiguity_holds(layout: &Layout, flags: c_int) -> bool {
    let (c, f) = (|| layout.is_c_contiguous(), || layout.is_f_contiguous());
    if flags & ffi::PyBUF_ANY_CONTIGUOUS == ffi::PyBUF_ANY_CONTIGUOUS {
        c() || f()
    } else if flags & ffi::PyBUF_C_CONTIGUOUS == ffi::PyBUF_C_CONTIGUOUS {
        c()
    } else if flags & ffi::PyBUF_F_CONTIGUOUS == ffi::PyBUF_F_CONTIGUOUS {
        f()
    } else {
        flags & ffi::PyBUF_STRIDES == ffi::PyBUF_STRIDES || c()
    }
}

#[cold]
#[inline(never)]
fn not_host_accessible(array: &Array) -> PyErr {
    let buffer = array.buffer();
    PyBufferError::new_err(format!(
        "{} memory on {:?} is not host-accessible: use to_bytes(), or DLPack with a device-aware consumer",
        buffer.kind(),
        buffer.device().selector
    ))
}

#[cold]
#[inline(never)]
fn read_only() -> PyErr {
    PyBufferError::new_err("the array is read-only")
}

#[cold]
#[inline(never)]
fn not_contiguous(layout: &Layout) -> PyErr {
    PyBufferError::new_err(format!(
        "the requested contiguity does not hold for byte strides {:?}",
        layout.strides()
    ))
}

#[cold]
#[inline(never)]
fn no_format(layout: &Layout) -> PyErr {
    PyBufferError::new_err(format!("{} has no buffer-protocol format", layout.dtype()))
}
