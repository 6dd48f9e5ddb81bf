//! `Array.__dlpack__` as a plain vectorcall method (`METH_FASTCALL | METH_KEYWORDS`), installed on
//! the type at module initialisation.
//!
//! Written by hand because it is the hottest call of the exchange protocols and pyo3's generic
//! argument parsing (keyword names converted to UTF-8 and compared as strings, then its call
//! trampoline) cost about a tenth of the call: here a keyword is first matched by identity with
//! the interned name, which is what every call site passes. The work itself is
//! [`crate::export::dlpack::dlpack`], as before.

use std::ffi::CStr;
use std::panic::{AssertUnwindSafe, catch_unwind};

use pyo3::exceptions::{PyRuntimeError, PyTypeError};
use pyo3::prelude::*;
use pyo3::types::{PyCapsule, PyString, PyTuple, PyType};
use pyo3::{ffi, intern};

use crate::objects::array::PyArray;

const DOC: &CStr =
    c"__dlpack__($self, /, *, max_version=None, dl_device=None, copy=None, stream=None)
--

A DLPack capsule of this array (see the array API's __dlpack__): a versioned capsule when
max_version is at least (1, 0), the legacy one otherwise.";

/// Replaces the class's `__dlpack__` with the vectorcall method (subclasses inherit it).
pub(crate) fn install(array_type: &Bound<'_, PyType>) -> PyResult<()> {
    let py = array_type.py();
    // CPython keeps a pointer to the definition for the life of the method: leaked once per
    // module initialisation.
    let definition = Box::leak(Box::new(ffi::PyMethodDef {
        ml_name: c"__dlpack__".as_ptr(),
        ml_meth: ffi::PyMethodDefPointer {
            PyCFunctionFastWithKeywords: dlpack_vectorcall,
        },
        ml_flags: ffi::METH_FASTCALL | ffi::METH_KEYWORDS,
        ml_doc: DOC.as_ptr(),
    }));
    // SAFETY: the type is live, the definition outlives it; a new reference or NULL comes back.
    let method = unsafe {
        Bound::from_owned_ptr_or_err(
            py,
            ffi::PyDescr_NewMethod(array_type.as_type_ptr(), definition),
        )?
    };
    array_type.setattr(intern!(py, "__dlpack__"), method)
}

/// The keyword arguments of `__dlpack__`, borrowed from the call.
#[derive(Default)]
struct Arguments<'a, 'py> {
    max_version: Option<Borrowed<'a, 'py, PyAny>>,
    dl_device: Option<Borrowed<'a, 'py, PyAny>>,
    copy: Option<Borrowed<'a, 'py, PyAny>>,
    stream: Option<Borrowed<'a, 'py, PyAny>>,
}

/// The keyword names, interned: what call sites pass (compared by identity first).
type Names<'a, 'py> = [&'a Bound<'py, PyString>; 4];

fn names(py: Python<'_>) -> Names<'_, '_> {
    [
        intern!(py, "max_version"),
        intern!(py, "dl_device"),
        intern!(py, "copy"),
        intern!(py, "stream"),
    ]
}

impl<'a, 'py> Arguments<'a, 'py> {
    fn slot(
        &mut self,
        candidates: &Names<'_, 'py>,
        name: Borrowed<'_, 'py, PyString>,
    ) -> PyResult<&mut Option<Borrowed<'a, 'py, PyAny>>> {
        let position = match candidates.iter().position(|c| c.as_ptr() == name.as_ptr()) {
            Some(position) => Some(position),
            // A name built at run time (e.g. from **kwargs of a computed string): compare text.
            None => candidates
                .iter()
                .position(|c| c.as_any().eq(name).unwrap_or(false)),
        };
        match position {
            Some(0) => Ok(&mut self.max_version),
            Some(1) => Ok(&mut self.dl_device),
            Some(2) => Ok(&mut self.copy),
            Some(_) => Ok(&mut self.stream),
            None => Err(PyTypeError::new_err(format!(
                "__dlpack__() got an unexpected keyword argument {}",
                name.repr()?
            ))),
        }
    }
}

/// `value` unless it is None, extracted as `T`; the error names the argument.
fn optional<'py, T: for<'a> FromPyObject<'a, 'py>>(
    value: Option<Borrowed<'_, 'py, PyAny>>,
    name: &str,
    expected: &str,
) -> PyResult<Option<T>> {
    match value {
        Some(value) if !value.is_none() => value.extract().map(Some).map_err(|_| {
            PyTypeError::new_err(format!("{name}: expected {expected}, got {}", repr(value)))
        }),
        _ => Ok(None),
    }
}

fn repr(value: Borrowed<'_, '_, PyAny>) -> String {
    value.repr().map_or_else(|_| "?".into(), |r| r.to_string())
}

fn call<'py>(
    py: Python<'py>,
    slf: *mut ffi::PyObject,
    args: *const *mut ffi::PyObject,
    nargs: ffi::Py_ssize_t,
    kwnames: *mut ffi::PyObject,
) -> PyResult<Bound<'py, PyCapsule>> {
    // SAFETY: CPython passes the live object the method was looked up on, and the method
    // descriptor (`install`) has checked that it is an instance of the class or a subclass
    // before calling (as for every method descriptor, bound or called through the type).
    let this = unsafe { Borrowed::from_ptr(py, slf).cast_unchecked::<PyArray>() };
    // A METH_FASTCALL method gets the plain count (no PY_VECTORCALL_ARGUMENTS_OFFSET bit).
    if nargs != 0 {
        return Err(PyTypeError::new_err(format!(
            "__dlpack__() takes keyword arguments only ({nargs} positional given)"
        )));
    }
    let mut arguments = Arguments::default();
    if !kwnames.is_null() {
        let candidates = names(py);
        // SAFETY: kwnames is a tuple of str; the values follow the positional ones in `args`.
        let kwnames = unsafe { Borrowed::from_ptr(py, kwnames).cast_unchecked::<PyTuple>() };
        for (index, name) in kwnames.iter_borrowed().enumerate() {
            // SAFETY: CPython guarantees one value per keyword name, each live for the call.
            let value = unsafe { Borrowed::from_ptr(py, *args.add(index)) };
            // SAFETY: keyword names are str (CPython checks).
            let name = unsafe { name.cast_unchecked::<PyString>() };
            *arguments.slot(&candidates, name)? = Some(value);
        }
    }
    let versioned = match arguments.max_version {
        Some(version) if !version.is_none() => crate::export::dlpack::major_version(&version)? >= 1,
        _ => false,
    };
    let dl_device = optional::<(i32, i32)>(
        arguments.dl_device,
        "dl_device",
        "a (device type, device id) tuple",
    )?;
    let copy = optional::<bool>(arguments.copy, "copy", "None or a bool")?;
    let stream = arguments.stream.as_deref();
    crate::export::dlpack::dlpack(this.get(), py, stream, versioned, dl_device, copy)
}

unsafe extern "C" fn dlpack_vectorcall(
    slf: *mut ffi::PyObject,
    args: *const *mut ffi::PyObject,
    nargs: ffi::Py_ssize_t,
    kwnames: *mut ffi::PyObject,
) -> *mut ffi::PyObject {
    // SAFETY: CPython calls methods with the GIL held.
    let py = unsafe { Python::assume_attached() };
    let result = catch_unwind(AssertUnwindSafe(|| call(py, slf, args, nargs, kwnames)));
    let err = match result {
        Ok(Ok(capsule)) => return capsule.into_ptr(),
        Ok(Err(err)) => err,
        // Unwinding must not cross into CPython.
        Err(_) => PyRuntimeError::new_err("devbuf: panic in __dlpack__"),
    };
    crate::errors::restore_attached(err);
    std::ptr::null_mut()
}
