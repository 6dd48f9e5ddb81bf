//! Module functions as plain vectorcall functions (`METH_FASTCALL | METH_KEYWORDS`), for the
//! hottest calls: pyo3's generic argument parsing (each keyword name converted to UTF-8 and
//! compared as a string, its trampoline) costs several hundred instructions per call. Here a
//! keyword is matched first by identity with the interned name, which is what every call site
//! passes, then by text; every error reads as pyo3's did, so the functions behave as before.
//! CPython calls them through pyo3's own trampoline (what `#[pyfunction]` expands to: it tells
//! pyo3 the thread is attached and turns a panic into a `PanicException`), so that a `Py` dropped
//! in the call is released at once instead of waiting in pyo3's pool for a later attach.

use std::ffi::CStr;

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyString, PyTuple};

/// A function's parameters: the positional-or-keyword ones first (`required` of them required),
/// then the keyword-only ones (all optional).
pub(crate) struct Signature {
    /// The name errors give it, with its parentheses: `"alloc()"`.
    pub(crate) name: &'static str,
    pub(crate) parameters: &'static [&'static str],
    pub(crate) positional: usize,
    pub(crate) required: usize,
}

/// The arguments of one call, borrowed from it, in `Signature::parameters`' order.
pub(crate) type Arguments<'a, 'py, const N: usize> = [Option<Borrowed<'a, 'py, PyAny>>; N];

impl Signature {
    /// Sorts the call's arguments into their parameters; `names` are the parameters' names,
    /// interned, in the same order.
    ///
    /// # Safety
    /// `args`, `nargs` and `kwnames` are what CPython passed to a `METH_FASTCALL | METH_KEYWORDS`
    /// function, live for `'a`.
    // Inlined into its caller: returned by value, the arguments' array is written in 8-byte
    // halves and read back in 16-byte ones, a store-forwarding stall on every call.
    #[inline(always)]
    pub(crate) unsafe fn parse<'a, 'py, const N: usize>(
        &self,
        py: Python<'py>,
        names: [&Bound<'py, PyString>; N],
        args: *const *mut ffi::PyObject,
        nargs: ffi::Py_ssize_t,
        kwnames: *mut ffi::PyObject,
    ) -> PyResult<Arguments<'a, 'py, N>> {
        debug_assert_eq!(N, self.parameters.len());
        let mut out: Arguments<'a, 'py, N> = [None; N];
        let nargs = nargs as usize;
        if nargs > self.positional {
            return Err(self.too_many_positional(nargs));
        }
        for (index, slot) in out.iter_mut().enumerate().take(nargs) {
            // SAFETY: CPython passes `nargs` live positional arguments first.
            *slot = Some(unsafe { Borrowed::from_ptr(py, *args.add(index)) });
        }
        if !kwnames.is_null() {
            // SAFETY: kwnames is a tuple of str; the values follow the positional ones in `args`.
            let kwnames = unsafe { Borrowed::from_ptr(py, kwnames).cast_unchecked::<PyTuple>() };
            for (index, name) in kwnames.iter_borrowed().enumerate() {
                // SAFETY: one live value per keyword name, after the positional ones.
                let value = unsafe { Borrowed::from_ptr(py, *args.add(nargs + index)) };
                let position = match names.iter().position(|c| c.as_ptr() == name.as_ptr()) {
                    Some(position) => position,
                    // A name built at run time (a computed **kwargs key): compare text.
                    None => names
                        .iter()
                        .position(|c| c.as_any().eq(name).unwrap_or(false))
                        .ok_or_else(|| {
                            PyTypeError::new_err(format!(
                                "{} got an unexpected keyword argument '{}'",
                                self.name, &*name
                            ))
                        })?,
                };
                if out[position].is_some() {
                    return Err(PyTypeError::new_err(format!(
                        "{} got multiple values for argument '{}'",
                        self.name, self.parameters[position]
                    )));
                }
                out[position] = Some(value);
            }
        }
        if out[..self.required].iter().any(Option::is_none) {
            return Err(self.missing(&out[..self.required]));
        }
        Ok(out)
    }

    #[cold]
    fn too_many_positional(&self, given: usize) -> PyErr {
        let was = if given == 1 { "was" } else { "were" };
        PyTypeError::new_err(if self.required == self.positional {
            format!(
                "{} takes {} positional arguments but {given} {was} given",
                self.name, self.positional
            )
        } else {
            format!(
                "{} takes from {} to {} positional arguments but {given} {was} given",
                self.name, self.required, self.positional
            )
        })
    }

    /// The error for the required parameters among `given` (the required ones' arguments) that
    /// have no argument.
    #[cold]
    fn missing(&self, given: &[Option<Borrowed<'_, '_, PyAny>>]) -> PyErr {
        let names: Vec<&str> = (given.iter().zip(self.parameters))
            .filter(|(argument, _)| argument.is_none())
            .map(|(_, name)| *name)
            .collect();
        let quoted: Vec<String> = names.iter().map(|name| format!("'{name}'")).collect();
        let list = match quoted.as_slice() {
            [one] => one.clone(),
            [first, second] => format!("{first} and {second}"),
            [rest @ .., last] => format!("{}, and {last}", rest.join(", ")),
            [] => String::new(),
        };
        PyTypeError::new_err(format!(
            "{} missing {} required positional argument{}: {list}",
            self.name,
            names.len(),
            if names.len() == 1 { "" } else { "s" }
        ))
    }
}

/// Adds `function` to `module` as `name`, with `doc` (its first line the text signature, as
/// pyo3 writes it, for `inspect.signature` and stubtest).
pub(crate) fn add(
    module: &Bound<'_, PyModule>,
    name: &'static CStr,
    function: ffi::PyCFunctionFastWithKeywords,
    doc: &'static CStr,
) -> PyResult<()> {
    let py = module.py();
    // CPython keeps a pointer to the definition for the life of the function: leaked once per
    // module initialisation.
    let definition = Box::leak(Box::new(ffi::PyMethodDef {
        ml_name: name.as_ptr(),
        ml_meth: ffi::PyMethodDefPointer {
            PyCFunctionFastWithKeywords: function,
        },
        ml_flags: ffi::METH_FASTCALL | ffi::METH_KEYWORDS,
        ml_doc: doc.as_ptr(),
    }));
    let module_name = module.name()?;
    // SAFETY: the definition outlives the function; a new reference or NULL comes back.
    let made = unsafe {
        Bound::from_owned_ptr_or_err(
            py,
            ffi::PyCFunction_NewEx(definition, std::ptr::null_mut(), module_name.as_ptr()),
        )?
    };
    let name = name
        .to_str()
        .map_err(|_| PyValueError::new_err("a function name is not UTF-8"))?;
    module.add(name, made)
}

/// `value` as a `usize` when it is a plain int in range: what every call site passes, read
/// without pyo3's generic conversion (a type check, a method lookup for `__index__`); anything
/// else is `None`, and goes through the caller's general conversion (the same value, or its error).
pub(crate) fn exact_int(value: Borrowed<'_, '_, PyAny>) -> Option<usize> {
    // SAFETY: a live object, with the thread attached (`value`'s token).
    if unsafe { ffi::PyLong_CheckExact(value.as_ptr()) } == 0 {
        return None;
    }
    // SAFETY: as above; an int. `PyLong_AsSize_t` reads an int of several digits (a pointer) in
    // a loop over them, where `PyLong_AsUnsignedLongLong` goes through the generic
    // `_PyLong_AsByteArray` (CPython 3.11: ~16 ns of a SUAI import's ~750).
    let read = unsafe { ffi::PyLong_AsSize_t(value.as_ptr()) };
    if read == usize::MAX {
        // Negative or too large (the error is set), or exactly the largest value: leave the
        // value, and the error's text, to the generic path.
        drop(PyErr::take(value.py()));
        return None;
    }
    Some(read)
}
