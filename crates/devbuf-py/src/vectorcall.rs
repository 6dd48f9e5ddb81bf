//! The way in for the two hottest calls, `devbuf.alloc` and `Array.__dlpack__`: plain vectorcall
//! functions (`METH_FASTCALL | METH_KEYWORDS`) with this module's argument parser, under the same
//! rules as pyo3's own entry points. Every other call goes through pyo3's.
//!
//! Why not pyo3's: its argument parser (each keyword name converted to UTF-8 and compared as a
//! string, `PyTuple_GetItem` per name) and trampoline cost about 380 instructions a call, which
//! took `__dlpack__` from 0.83× to 1.03× NumPy's by count and past its goal (BENCHMARKS.md). Here a
//! keyword tuple is recognised by identity (a call site passes the same constant tuple every
//! time) and its names placed as they were the first time; a new tuple's names are matched by
//! identity with the interned parameter names, then by text. Every error reads as pyo3's does.
//!
//! The rules are pyo3's, through its public API: the call runs attached (`Python::attach`'s
//! unchecked form, since CPython is calling), so a `Py` dropped in the call is released at once,
//! not deferred to pyo3's pool; and a panic becomes a `PanicException`, never an unwind into
//! CPython. One exception, stated by each body that takes it: a plain case that makes and drops no
//! `Py` ([`Body::plain`]) runs on CPython's attachment without counting it, because counting it
//! from here costs `PyGILState_Ensure` and `_Release`, which pyo3's own trampoline skips since
//! CPython called it. A public pyo3 call that counts an already attached thread would remove the
//! exception (pyo3's trampoline is in its private `impl_` module; using it pinned pyo3 to one
//! exact version).

use std::ffi::CStr;
use std::panic::{AssertUnwindSafe, catch_unwind};

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::ffi;
use pyo3::panic::PanicException;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyString, PyTuple, PyType};

use crate::gil_as_lock::LastObject;

/// A function's parameters: the positional-or-keyword ones first (`required` of them required),
/// then the keyword-only ones (all optional); with what the parser keeps between calls.
pub(crate) struct Signature<const N: usize> {
    /// The name errors give it, with its parentheses: `"alloc()"`.
    pub(crate) name: &'static str,
    pub(crate) parameters: [&'static str; N],
    pub(crate) positional: usize,
    pub(crate) required: usize,
    /// The parameters' names, interned.
    names: PyOnceLock<[Py<PyString>; N]>,
    /// The last keyword-name tuple read whose names were all parameters, each distinct, with
    /// where they go: each name's parameter index in 3 bits from bit 0, the count from bit 24.
    last_keywords: LastObject,
}

/// The arguments of one call, borrowed from it, in `Signature::parameters`' order.
pub(crate) type Arguments<'a, 'py, const N: usize> = [Option<Borrowed<'a, 'py, PyAny>>; N];

/// The most keyword names a kept tuple holds (3 bits each below bit 24).
const KEPT_NAMES: usize = 8;

impl<const N: usize> Signature<N> {
    pub(crate) const fn new(
        name: &'static str,
        parameters: [&'static str; N],
        positional: usize,
        required: usize,
    ) -> Self {
        assert!(N <= KEPT_NAMES && required <= positional && positional <= N);
        Signature {
            name,
            parameters,
            positional,
            required,
            names: PyOnceLock::new(),
            last_keywords: LastObject::new(),
        }
    }

    /// Sorts the call's arguments into their parameters.
    ///
    /// # Safety
    /// `args`, `nargs` and `kwnames` are what CPython passed to a `METH_FASTCALL | METH_KEYWORDS`
    /// function, live for `'a`.
    // Inlined into its caller: returned by value, the arguments' array is written in 8-byte
    // halves and read back in 16-byte ones, a store-forwarding stall on every call.
    #[inline(always)]
    pub(crate) unsafe fn parse<'a, 'py>(
        &self,
        py: Python<'py>,
        args: *const *mut ffi::PyObject,
        nargs: ffi::Py_ssize_t,
        kwnames: *mut ffi::PyObject,
    ) -> PyResult<Arguments<'a, 'py, N>> {
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
            // SAFETY: (both) one live value per keyword name, after the positional ones.
            let value = |index: usize| unsafe { Borrowed::from_ptr(py, *args.add(nargs + index)) };
            match self.last_keywords.answer_for(kwnames) {
                Some(kept) => {
                    for index in 0..(kept >> 24) as usize {
                        let position = (kept >> (3 * index)) as usize & 7;
                        if out[position].replace(value(index)).is_some() {
                            return Err(self.multiple_values(position));
                        }
                    }
                }
                // SAFETY: the caller's: a live tuple of str.
                None => unsafe { self.read_keywords(py, &mut out, value, kwnames)? },
            }
        }
        if out[..self.required].iter().any(Option::is_none) {
            return Err(self.missing(&out[..self.required]));
        }
        Ok(out)
    }

    /// The keyword arguments of a keyword tuple other than the last one kept: each name matched
    /// by identity with the interned parameter names, then by text; the tuple kept when it can be.
    ///
    /// # Safety
    /// `kwnames` is the call's live tuple of str, `value(index)` the value of its name `index`.
    #[cold]
    #[inline(never)]
    unsafe fn read_keywords<'a, 'py>(
        &self,
        py: Python<'py>,
        out: &mut Arguments<'a, 'py, N>,
        value: impl Fn(usize) -> Borrowed<'a, 'py, PyAny>,
        kwnames: *mut ffi::PyObject,
    ) -> PyResult<()> {
        let names = self.names.get_or_init(py, || {
            self.parameters
                .map(|name| PyString::intern(py, name).unbind())
        });
        // SAFETY: kwnames is a tuple of str (the caller's).
        let tuple = unsafe { Borrowed::from_ptr(py, kwnames).cast_unchecked::<PyTuple>() };
        let mut kept = 0u32;
        for (index, name) in tuple.iter_borrowed().enumerate() {
            let position = match names
                .iter()
                .position(|known| known.as_ptr() == name.as_ptr())
            {
                Some(position) => position,
                // A name built at run time (a computed **kwargs key): compare text.
                None => names
                    .iter()
                    .position(|known| known.bind(py).as_any().eq(name).unwrap_or(false))
                    .ok_or_else(|| {
                        PyTypeError::new_err(format!(
                            "{} got an unexpected keyword argument '{}'",
                            self.name, &*name
                        ))
                    })?,
            };
            if out[position].replace(value(index)).is_some() {
                return Err(self.multiple_values(position));
            }
            kept |= (position as u32) << (3 * index);
        }
        // Every name went to a parameter of its own (a repeat is an error above), so there are at
        // most `N` of them, within `KEPT_NAMES`.
        // SAFETY: the thread is attached (`py`) and the tuple is live; a tuple's items never
        // change.
        unsafe {
            self.last_keywords
                .keep(kwnames, kept | (tuple.len() as u32) << 24)
        };
        Ok(())
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

    #[cold]
    fn multiple_values(&self, position: usize) -> PyErr {
        PyTypeError::new_err(format!(
            "{} got multiple values for argument '{}'",
            self.name, self.parameters[position]
        ))
    }

    /// The error for the required parameters among `given` (the required ones' arguments) that
    /// have no argument.
    #[cold]
    fn missing(&self, given: &[Option<Borrowed<'_, '_, PyAny>>]) -> PyErr {
        let names: Vec<&str> = (given.iter().zip(self.parameters))
            .filter(|(argument, _)| argument.is_none())
            .map(|(_, name)| name)
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

/// A vectorcall function's body: what CPython passed (`this` is the module of a function, the
/// object of a method), run attached; a new reference, or the error to raise.
pub(crate) trait Body {
    /// The call's plain case, run on CPython's attachment without counting it (`Python::attach`
    /// from a C function CPython calls costs `PyGILState_Ensure` and `_Release`: 10-20 ns of a
    /// ~90 ns `__dlpack__`, which took `np.from_dlpack` past its goal). Allowed only for work that
    /// makes and drops no `Py` (borrowed objects, `Bound`s, Rust data), so that nothing waits in
    /// pyo3's pool; its error is raised attached. `None`, having changed nothing, sends the call
    /// to [`Body::call`].
    ///
    /// # Safety
    /// As for [`Body::call`].
    unsafe fn plain(
        _py: Python<'_>,
        _this: *mut ffi::PyObject,
        _args: *const *mut ffi::PyObject,
        _nargs: ffi::Py_ssize_t,
        _kwnames: *mut ffi::PyObject,
    ) -> Option<PyResult<*mut ffi::PyObject>> {
        None
    }

    /// # Safety
    /// CPython's arguments to a `METH_FASTCALL | METH_KEYWORDS` function, live for the call.
    unsafe fn call(
        py: Python<'_>,
        this: *mut ffi::PyObject,
        args: *const *mut ffi::PyObject,
        nargs: ffi::Py_ssize_t,
        kwnames: *mut ffi::PyObject,
    ) -> PyResult<*mut ffi::PyObject>;
}

/// What CPython calls: `B::call` attached, its error raised, a panic raised as a
/// `PanicException`.
unsafe extern "C" fn entry<B: Body>(
    this: *mut ffi::PyObject,
    args: *const *mut ffi::PyObject,
    nargs: ffi::Py_ssize_t,
    kwnames: *mut ffi::PyObject,
) -> *mut ffi::PyObject {
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: (all) CPython is calling: this thread holds the GIL; CPython's arguments, live
        // for the call.
        unsafe {
            match B::plain(Python::assume_attached(), this, args, nargs, kwnames) {
                Some(Ok(made)) => made,
                plain => attached::<B>(plain, this, args, nargs, kwnames),
            }
        }
    }));
    outcome.unwrap_or_else(raise_panic)
}

/// [`entry`] past the plain case, attached: out of line, so that a plain case's code stays
/// small (it shares the instruction cache with CPython's and the consumer's on every call).
///
/// # Safety
/// As for [`Body::call`], called by CPython.
#[inline(never)]
unsafe fn attached<B: Body>(
    plain: Option<PyResult<*mut ffi::PyObject>>,
    this: *mut ffi::PyObject,
    args: *const *mut ffi::PyObject,
    nargs: ffi::Py_ssize_t,
    kwnames: *mut ffi::PyObject,
) -> *mut ffi::PyObject {
    // SAFETY: (all) the interpreter is initialised and this thread holds the GIL
    // (`attach_unchecked` counts it as attached without asking whether it may); CPython's
    // arguments, live for the call.
    unsafe {
        Python::attach_unchecked(|py| {
            let made = match plain {
                Some(made) => made,
                None => B::call(py, this, args, nargs, kwnames),
            };
            made.unwrap_or_else(|err| {
                err.restore(py);
                std::ptr::null_mut()
            })
        })
    }
}

/// Raises a caught panic as a `PanicException`, with its message.
#[cold]
#[inline(never)]
fn raise_panic(payload: Box<dyn std::any::Any + Send>) -> *mut ffi::PyObject {
    let message = payload
        .downcast_ref::<&str>()
        .map(|text| text.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "devbuf: panic".into());
    Python::attach(|py| PanicException::new_err(message).restore(py));
    std::ptr::null_mut()
}

/// A method definition for `B` (its docstring `doc`, whose first line is the text signature as
/// pyo3 writes it, for `inspect.signature` and stubtest). CPython keeps a pointer to it for the
/// life of what is made from it: leaked once per module initialisation.
fn definition<B: Body>(name: &'static CStr, doc: &'static CStr) -> &'static mut ffi::PyMethodDef {
    Box::leak(Box::new(ffi::PyMethodDef {
        ml_name: name.as_ptr(),
        ml_meth: ffi::PyMethodDefPointer {
            PyCFunctionFastWithKeywords: entry::<B>,
        },
        ml_flags: ffi::METH_FASTCALL | ffi::METH_KEYWORDS,
        ml_doc: doc.as_ptr(),
    }))
}

/// Adds `B` to `module` as the function `name`.
pub(crate) fn add_function<B: Body>(
    module: &Bound<'_, PyModule>,
    name: &'static CStr,
    doc: &'static CStr,
) -> PyResult<()> {
    let py = module.py();
    let module_name = module.name()?;
    // SAFETY: the definition outlives the function; a new reference or NULL comes back.
    let function = unsafe {
        Bound::from_owned_ptr_or_err(
            py,
            ffi::PyCFunction_NewEx(
                definition::<B>(name, doc),
                std::ptr::null_mut(),
                module_name.as_ptr(),
            ),
        )?
    };
    module.add(text(name)?, function)
}

/// Sets `B` on `class` as the method `name` (subclasses inherit it). The method descriptor
/// checks that the object it is called on is an instance of `class` before `B` runs.
pub(crate) fn add_method<B: Body>(
    class: &Bound<'_, PyType>,
    name: &'static CStr,
    doc: &'static CStr,
) -> PyResult<()> {
    let py = class.py();
    // SAFETY: the type is live, the definition outlives it; a new reference or NULL comes back.
    let method = unsafe {
        Bound::from_owned_ptr_or_err(
            py,
            ffi::PyDescr_NewMethod(class.as_type_ptr(), definition::<B>(name, doc)),
        )?
    };
    class.setattr(text(name)?, method)
}

fn text(name: &'static CStr) -> PyResult<&'static str> {
    name.to_str()
        .map_err(|_| PyValueError::new_err("a function name is not UTF-8"))
}
