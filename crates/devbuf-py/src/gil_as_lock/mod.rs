//! The types that use the GIL as their lock, all here: [`HeldArray`] (what an `Array` object
//! holds of its memory, touched on every use of the object), [`LazyBox`] (its export caches,
//! emptied when a Buffer's `resize` replaces its memory) and [`LastObject`] (the last
//! keyword-name or version tuple a hot path read). Each keeps plain cells that any thread may
//! reach, and is sound only because the GIL lets one thread at a time run Python code: a
//! per-object or per-cache lock would add atomic operations to the hottest calls for an exclusion
//! the GIL already gives (`LastObject` was measured to pay; see BENCHMARKS.md).
//!
//! A free-threaded interpreter (CPython 3.13t and up, PEP 703; the abi3t stable ABI, PEP 803)
//! takes that exclusion away, so the crate refuses to build for one, and the module refuses to
//! load where the GIL is off anyway (a build for the GIL-enabled ABI put on a free-threaded
//! interpreter run with `PYTHON_GIL=0`). Supporting such an interpreter means giving each type
//! here a lock of its own (or per-object critical sections) and measuring what that costs.

#[cfg(Py_GIL_DISABLED)]
compile_error!(
    "devbuf-py uses the GIL as the lock of the types in gil_as_lock/ (HeldArray, LastObject) and \
     cannot be built for a free-threaded interpreter (Py_GIL_DISABLED): give each of them a lock \
     of its own first"
);

mod held;
mod last_object;
mod lazy_box;

pub(crate) use held::{HeldArray, OpenArray, Refusal};
pub(crate) use last_object::LastObject;
pub(crate) use lazy_box::{Empty, LazyBox};
use pyo3::exceptions::PyImportError;
use pyo3::intern;
use pyo3::prelude::*;

/// An ImportError when this interpreter runs without the GIL (`sys._is_gil_enabled()`, 3.13 and
/// up, is False): what the types here need cannot be had there. The module declares that it uses
/// the GIL (`#[pymodule(gil_used = true)]`), so a free-threaded interpreter turns the GIL on when
/// loading it, unless told not to.
pub(crate) fn require_gil(py: Python<'_>) -> PyResult<()> {
    let sys = py.import(intern!(py, "sys"))?;
    let Ok(is_gil_enabled) = sys.getattr(intern!(py, "_is_gil_enabled")) else {
        // Before 3.13 every interpreter has the GIL.
        return Ok(());
    };
    if is_gil_enabled.call0()?.is_truthy()? {
        return Ok(());
    }
    Err(PyImportError::new_err(
        "devbuf needs the GIL, which this interpreter runs without (PYTHON_GIL=0 or -X gil=0): \
         run it with the GIL enabled (PYTHON_GIL=1)",
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_interpreter_without_the_gil_is_refused_and_one_with_it_taken() {
        Python::initialize();
        Python::attach(|py| {
            let sys = py.import("sys").unwrap();
            let real = sys.getattr("_is_gil_enabled").ok();
            let answer = |enabled: bool| {
                let code = if enabled {
                    c"lambda: True"
                } else {
                    c"lambda: False"
                };
                py.eval(code, None, None).unwrap()
            };
            sys.setattr("_is_gil_enabled", answer(false)).unwrap();
            let refused = require_gil(py);
            sys.setattr("_is_gil_enabled", answer(true)).unwrap();
            let taken = require_gil(py);
            match real {
                Some(real) => sys.setattr("_is_gil_enabled", real).unwrap(),
                None => sys.delattr("_is_gil_enabled").unwrap(),
            }
            let err = refused.unwrap_err();
            assert!(err.is_instance_of::<PyImportError>(py));
            assert!(err.to_string().contains("PYTHON_GIL=1"), "{err}");
            assert!(taken.is_ok());
            assert!(require_gil(py).is_ok());
        });
    }
}
