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

use crate::export::last_object::LastObject;
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
    /// The argument of keyword `position` in [`Names`].
    fn slot(&mut self, position: usize) -> &mut Option<Borrowed<'a, 'py, PyAny>> {
        match position {
            0 => &mut self.max_version,
            1 => &mut self.dl_device,
            2 => &mut self.copy,
            _ => &mut self.stream,
        }
    }
}

/// The position in [`Names`] of keyword `name`, or the TypeError naming it.
fn position(candidates: &Names<'_, '_>, name: Borrowed<'_, '_, PyString>) -> PyResult<usize> {
    match candidates.iter().position(|c| c.as_ptr() == name.as_ptr()) {
        Some(position) => Ok(position),
        // A name built at run time (e.g. from **kwargs of a computed string): compare text.
        None => candidates
            .iter()
            .position(|c| c.as_any().eq(name).unwrap_or(false))
            .ok_or_else(|| match name.repr() {
                Ok(repr) => PyTypeError::new_err(format!(
                    "__dlpack__() got an unexpected keyword argument {repr}"
                )),
                Err(err) => err,
            }),
    }
}

/// The keyword-name tuple of the last call whose names were all `__dlpack__`'s, with the
/// position in [`Names`] of each of its names (the tuple's length in bits 8 and up, each name's
/// position in two bits from bit 0): a call site passes the same tuple on every call (a constant
/// of its code object; NumPy's `from_dlpack` keeps one), so a call with that tuple takes its
/// arguments without a `PyTuple_GetItem` call per keyword (a function under the stable ABI) and
/// a name search.
static LAST_KEYWORDS: LastObject = LastObject::new();

/// Fills `arguments` from the keyword values (after the `nargs` positional ones in `args`).
///
/// # Safety
/// `kwnames` is the call's live tuple of str and `args` holds one live value per name; the GIL
/// is held.
unsafe fn take_keywords<'a, 'py>(
    py: Python<'py>,
    arguments: &mut Arguments<'a, 'py>,
    args: *const *mut ffi::PyObject,
    kwnames: *mut ffi::PyObject,
) -> PyResult<()> {
    // SAFETY: (all) the caller's: one live value per keyword name, each live for the call.
    let value = |index: usize| unsafe { Borrowed::from_ptr(py, *args.add(index)) };
    let Some(positions) = LAST_KEYWORDS.answer_for(kwnames) else {
        // SAFETY: the caller's.
        return unsafe { read_and_keep_keywords(py, arguments, value, kwnames) };
    };
    for index in 0..(positions >> 8) as usize {
        *arguments.slot((positions >> (2 * index)) as usize & 3) = Some(value(index));
    }
    Ok(())
}

/// [`take_keywords`] for a keyword tuple other than the last one: the names are read, and the
/// tuple kept in [`LAST_KEYWORDS`] (out of line: the call's hot code stays small, see
/// [`crate::export::dlpack::dlpack_as_is`]).
///
/// # Safety
/// `kwnames` is the call's live tuple of str, `value(index)` the value of its name `index`;
/// the GIL is held.
#[cold]
#[inline(never)]
unsafe fn read_and_keep_keywords<'a, 'py>(
    py: Python<'py>,
    arguments: &mut Arguments<'a, 'py>,
    value: impl Fn(usize) -> Borrowed<'a, 'py, PyAny>,
    kwnames: *mut ffi::PyObject,
) -> PyResult<()> {
    let candidates = names(py);
    // SAFETY: kwnames is a tuple of str (the caller's).
    let tuple = unsafe { Borrowed::from_ptr(py, kwnames).cast_unchecked::<PyTuple>() };
    let mut positions = 0u32;
    for (index, name) in tuple.iter_borrowed().enumerate() {
        // SAFETY: keyword names are str (CPython checks).
        let position = position(&candidates, unsafe { name.cast_unchecked::<PyString>() })?;
        *arguments.slot(position) = Some(value(index));
        if index < candidates.len() {
            positions |= (position as u32) << (2 * index);
        }
    }
    // More names than `__dlpack__` has means a repeated one: not worth keeping.
    if tuple.len() <= candidates.len() {
        // SAFETY: the GIL is held (the caller's) and the tuple is live; a tuple's names never
        // change.
        unsafe { LAST_KEYWORDS.keep(kwnames, positions | (tuple.len() as u32) << 8) };
    }
    Ok(())
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
        return Err(positional_arguments(nargs));
    }
    let mut arguments = Arguments::default();
    if !kwnames.is_null() {
        // SAFETY: CPython passes a tuple of str and one value per name after the positional ones
        // (none), with the GIL held.
        unsafe { take_keywords(py, &mut arguments, args, kwnames)? };
    }
    let versioned = match arguments.max_version {
        Some(version) if !version.is_none() => crate::export::dlpack::major_version(&version)? >= 1,
        _ => false,
    };
    let given = |value: Option<Borrowed<'_, '_, PyAny>>| value.is_some_and(|v| !v.is_none());
    if !given(arguments.dl_device) && !given(arguments.copy) && !given(arguments.stream) {
        return crate::export::dlpack::dlpack_as_is(this.get(), py, versioned);
    }
    general(py, this, arguments, versioned)
}

/// Every call with a `dl_device`, `copy` or `stream` (kept out of [`call`]'s code, see
/// [`crate::export::dlpack::dlpack_as_is`]).
#[cold]
#[inline(never)]
fn general<'py>(
    py: Python<'py>,
    this: Borrowed<'_, 'py, PyArray>,
    arguments: Arguments<'_, 'py>,
    versioned: bool,
) -> PyResult<Bound<'py, PyCapsule>> {
    let dl_device = optional::<(i32, i32)>(
        arguments.dl_device,
        "dl_device",
        "a (device type, device id) tuple",
    )?;
    let copy = optional::<bool>(arguments.copy, "copy", "None or a bool")?;
    let stream = arguments.stream.as_deref();
    crate::export::dlpack::dlpack(this.get(), py, stream, versioned, dl_device, copy)
}

#[cold]
fn positional_arguments(nargs: ffi::Py_ssize_t) -> PyErr {
    PyTypeError::new_err(format!(
        "__dlpack__() takes keyword arguments only ({nargs} positional given)"
    ))
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
