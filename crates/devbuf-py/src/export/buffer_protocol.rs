//! The buffer protocol of an `Array` (and so a `Buffer`), for host-accessible memory.

use std::ffi::c_int;

use pyo3::exceptions::PyBufferError;
use pyo3::ffi;
use pyo3::prelude::*;

use crate::errors::IntoPyResult;
use crate::objects::array::PyArray;

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
    let array = this.array(slf.py())?;
    let buffer = array.buffer();
    let layout = array.layout();
    if !buffer.is_host_accessible() {
        return Err(PyBufferError::new_err(format!(
            "{} memory on {:?} is not host-accessible: use to_bytes(), or DLPack with a device-aware consumer",
            buffer.kind(),
            buffer.device().selector
        )));
    }
    if flags & ffi::PyBUF_WRITABLE != 0 && array.readonly() {
        return Err(PyBufferError::new_err("the array is read-only"));
    }
    // Contiguity is computed only where the consumer asks for it (NumPy asks for strides).
    let (c, f) = (|| layout.is_c_contiguous(), || layout.is_f_contiguous());
    let contiguity_ok = if flags & ffi::PyBUF_ANY_CONTIGUOUS == ffi::PyBUF_ANY_CONTIGUOUS {
        c() || f()
    } else if flags & ffi::PyBUF_C_CONTIGUOUS == ffi::PyBUF_C_CONTIGUOUS {
        c()
    } else if flags & ffi::PyBUF_F_CONTIGUOUS == ffi::PyBUF_F_CONTIGUOUS {
        f()
    } else {
        flags & ffi::PyBUF_STRIDES == ffi::PyBUF_STRIDES || c()
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
