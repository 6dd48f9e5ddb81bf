//! Calls from Rust into Python that interpreter shutdown cannot unwind.
//!
//! CPython 3.11 to 3.13 end a daemon thread that takes the GIL once finalization began with
//! `pthread_exit`, a forced unwind (CPython gh-87135; 3.14 leaves the thread waiting instead).
//! glibc aborts the process when that unwind meets a Rust frame that cannot unwind: a daemon
//! thread inside a failure callback, a log stream's `write` or a Python memory resource's method
//! (all Python code devbuf calls from Rust) when the program ends took the whole process down
//! with SIGABRT. pyo3 turns the unwind into a wait where it takes the GIL itself; this module does
//! the same for the Python code devbuf calls:
//!
//! - [`attach`] asks whether the interpreter is finalizing before a thread attaches to call into
//!   Python, and then does not call: devbuf's call returns at once, as when Python is gone
//!   (a Python resource refuses the allocation; a free leaves the memory to the process's end).
//! - [`call`], [`call_method`] and [`is_true`] run the Python code in a frame that turns the
//!   forced unwind into a thread that waits for the process to end (nothing of devbuf's is locked
//!   while Python code runs, so nothing else waits for it).
//! - [`wait_for_exit_if_finalizing`] does the same for a thread about to take back the GIL it
//!   released while devbuf blocked in a runtime (`release_gil_while`).

use std::ffi::c_int;
use std::ptr;
use std::sync::OnceLock;

use pyo3::IntoPyObjectExt;
use pyo3::exceptions::PySystemError;
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString, PyTuple};

type Call = unsafe extern "C-unwind" fn(
    *mut ffi::PyObject,
    *mut ffi::PyObject,
    *mut ffi::PyObject,
) -> *mut ffi::PyObject;
type GetAttr =
    unsafe extern "C-unwind" fn(*mut ffi::PyObject, *mut ffi::PyObject) -> *mut ffi::PyObject;
type IsTrue = unsafe extern "C-unwind" fn(*mut ffi::PyObject) -> c_int;

/// The entry points devbuf calls Python code through, typed as able to unwind: a forced unwind
/// out of them reaches [`WaitForExit`] instead of aborting at a call site Rust compiled as unable
/// to unwind. Called through pointers looked up by name: a declaration would be merged, under
/// whole-program optimisation, with pyo3's declaration of the same function as unable to unwind,
/// and the guard's cleanup optimised away (seen: the process still aborted).
struct Entries {
    call: Call,
    get_attr: GetAttr,
    is_true: IsTrue,
}

fn entries() -> &'static Entries {
    static ENTRIES: OnceLock<Entries> = OnceLock::new();
    ENTRIES.get_or_init(|| {
        // SAFETY: CPython's function of this name has this signature, and pyo3 declares it; the
        // ABI's unwinding aside, which CPython's C does not care about.
        let call = unsafe { lookup::<Call>(c"PyObject_Call", ffi::PyObject_Call as *const ()) };
        // SAFETY: as above.
        let get_attr =
            unsafe { lookup::<GetAttr>(c"PyObject_GetAttr", ffi::PyObject_GetAttr as *const ()) };
        // SAFETY: as above.
        let is_true =
            unsafe { lookup::<IsTrue>(c"PyObject_IsTrue", ffi::PyObject_IsTrue as *const ()) };
        Entries {
            call,
            get_attr,
            is_true,
        }
    })
}

/// CPython's function `name` as `F`, or `declared` (pyo3's declaration of it) hidden from the
/// optimiser, should the process not export it by name (CPython exports its stable ABI to
/// extension modules, so it does).
///
/// # Safety
/// `F` is a function pointer type with the signature of CPython's `name`, and `declared` is it.
unsafe fn lookup<F: Copy>(name: &std::ffi::CStr, declared: *const ()) -> F {
    // SAFETY: a NUL-terminated name looked up among the process's global symbols.
    let symbol = unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) }
        .cast_const()
        .cast::<()>();
    let address = if symbol.is_null() {
        std::hint::black_box(declared)
    } else {
        symbol
    };
    // SAFETY: the caller's contract: `F` is a function pointer of that function's signature.
    unsafe { std::mem::transmute_copy::<*const (), F>(&address) }
}

/// Dropped only by a forced unwind out of Python (the normal path forgets it): the thread then
/// waits for the process to end, as CPython 3.14 makes such a thread wait.
struct WaitForExit;

impl Drop for WaitForExit {
    fn drop(&mut self) {
        loop {
            std::thread::park();
        }
    }
}

/// Runs `body`, one call of CPython's, so that a forced unwind out of it waits instead of
/// unwinding through devbuf's frames.
#[inline]
fn guarded<R>(body: impl FnOnce() -> R) -> R {
    let guard = WaitForExit;
    let result = body();
    std::mem::forget(guard);
    result
}

/// Called with the GIL released, before this thread takes it back: once finalization began,
/// CPython ends a thread other than the main one as it takes the GIL back (the forced unwind
/// above), which meets pyo3's and devbuf's frames (the process aborted with "exception not
/// rethrown": `test_untrusted_numbers.py`, daemon threads blocked in the SYCL runtime). Such a
/// thread waits for the process to end instead, as CPython 3.14 makes it. A finalization that
/// begins between this check and the GIL's return is not covered: CPython offers no way to take
/// the GIL back that cannot end the thread.
pub(crate) fn wait_for_exit_if_finalizing() {
    // SAFETY: neither takes arguments or fails.
    let on_the_main_thread = unsafe { libc::gettid() == libc::getpid() };
    if !on_the_main_thread && is_finalizing() {
        loop {
            std::thread::park();
        }
    }
}

/// Whether the interpreter is finalizing (CPython's `Py_IsFinalizing`, `_Py_IsFinalizing` before
/// 3.13: looked up by name, as neither is in the limited API devbuf builds against).
pub(crate) fn is_finalizing() -> bool {
    type IsFinalizing = unsafe extern "C" fn() -> c_int;
    static FUNCTION: OnceLock<Option<IsFinalizing>> = OnceLock::new();
    let function = FUNCTION.get_or_init(|| {
        [c"Py_IsFinalizing", c"_Py_IsFinalizing"]
            .into_iter()
            .find_map(|name| {
                // SAFETY: a NUL-terminated name looked up among the process's global symbols.
                let symbol = unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) };
                // SAFETY: both CPython functions take nothing and return an int.
                (!symbol.is_null()).then(|| unsafe {
                    std::mem::transmute::<*mut libc::c_void, IsFinalizing>(symbol)
                })
            })
    });
    // SAFETY: CPython documents both as callable from any thread, with or without the GIL.
    function.is_some_and(|is_finalizing| unsafe { is_finalizing() } != 0)
}

unsafe extern "C" {
    /// Whether this thread holds the GIL. Outside the limited API's list (pyo3's abi3 build does
    /// not declare it) but exported by every CPython since 3.4, with this signature.
    fn PyGILState_Check() -> c_int;
}

/// Whether this thread holds the GIL of an initialized interpreter.
pub(crate) fn holds_gil() -> bool {
    // SAFETY: both may be called at any time, attached or not.
    unsafe { ffi::Py_IsInitialized() != 0 && PyGILState_Check() == 1 }
}

/// Runs `body` attached to the interpreter, unless it is gone or finalizing: then `None`, and
/// devbuf's call goes on without calling into Python. A thread that holds the GIL already (the
/// main thread, finalizing) runs it as before.
pub(crate) fn attach<R>(body: impl for<'py> FnOnce(Python<'py>) -> R) -> Option<R> {
    if is_finalizing() && !holds_gil() {
        return None;
    }
    Python::try_attach(body)
}

/// `callable(*args, **kwargs)`, shutdown-safe (see the module's page).
pub(crate) fn call<'py>(
    callable: &Bound<'py, PyAny>,
    args: impl IntoPyObject<'py, Target = PyTuple>,
    kwargs: Option<&Bound<'py, PyDict>>,
) -> PyResult<Bound<'py, PyAny>> {
    let py = callable.py();
    let args = args.into_bound_py_any(py)?;
    let kwargs = kwargs.map_or(ptr::null_mut(), |kwargs| kwargs.as_ptr());
    // SAFETY: live objects of this interpreter, attached; a new reference or NULL with an error.
    let result = guarded(|| unsafe { (entries().call)(callable.as_ptr(), args.as_ptr(), kwargs) });
    // SAFETY: as just said.
    unsafe { Bound::from_owned_ptr_or_err(py, result) }
}

/// `object.name(*args)`, shutdown-safe: the lookup may run Python code too (a property).
pub(crate) fn call_method<'py>(
    object: &Bound<'py, PyAny>,
    name: &Bound<'py, PyString>,
    args: impl IntoPyObject<'py, Target = PyTuple>,
) -> PyResult<Bound<'py, PyAny>> {
    let py = object.py();
    // SAFETY: live objects of this interpreter, attached; a new reference or NULL with an error.
    let method = guarded(|| unsafe { (entries().get_attr)(object.as_ptr(), name.as_ptr()) });
    // SAFETY: as just said.
    let method = unsafe { Bound::from_owned_ptr_or_err(py, method) }?;
    call(&method, args, None)
}

/// `bool(object)`, shutdown-safe (`__bool__` and `__len__` may be Python code).
pub(crate) fn is_true(object: &Bound<'_, PyAny>) -> PyResult<bool> {
    // SAFETY: a live object of this interpreter, attached.
    match guarded(|| unsafe { (entries().is_true)(object.as_ptr()) }) {
        -1 => Err(PyErr::take(object.py())
            .unwrap_or_else(|| PySystemError::new_err("bool() failed without an exception"))),
        truth => Ok(truth != 0),
    }
}
