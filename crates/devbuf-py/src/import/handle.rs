//! `Buffer.from_handle(ptr, nbytes, device=None, *, owner=None, deleter=None)`: a raw pointer
//! wrapped as cuda.core's `Buffer.from_handle` wraps one, but checked as every import is: the
//! device's runtime classifies the pointer, and the `nbytes` from it must lie in one allocation
//! it knows (where it can tell), else a ValueError names `ptr` or `nbytes`.

use devbuf::{DType, Owner, interface};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;

use crate::errors::IntoPyResult;
use crate::import::wrap::wrap_foreign;
use crate::objects::array::PyBuffer;
use crate::objects::foreign_objects::resolve_queue;
use crate::shutdown;

/// Runs a Python deleter once, when devbuf lets go of the memory (from any thread).
struct Deleter(Py<PyAny>);

impl Deleter {
    fn run(self) {
        // During or past the interpreter's end the deleter cannot run: the memory goes with the
        // process (and the reference with the interpreter).
        shutdown::attach(|py| {
            let deleter = self.0.bind(py);
            if let Err(err) = shutdown::call(deleter, (), None) {
                err.write_unraisable(py, Some(deleter));
            }
        });
    }
}

pub(crate) fn from_handle(
    py: Python<'_>,
    ptr: usize,
    nbytes: usize,
    device: Option<&Bound<'_, PyAny>>,
    owner: Option<Py<PyAny>>,
    deleter: Option<Py<PyAny>>,
) -> PyResult<Py<PyBuffer>> {
    let owner = match (owner, deleter) {
        (Some(_), Some(_)) => {
            return Err(PyValueError::new_err(
                "owner, deleter: pass one: an owner keeps the memory alive, a deleter frees it",
            ));
        }
        (Some(owner), None) => Owner::keep_alive(owner),
        (None, Some(deleter)) => {
            if !deleter.bind(py).is_callable() {
                return Err(PyTypeError::new_err(
                    "deleter: expected a callable, run once with no arguments when the memory \
                     is no longer used",
                ));
            }
            let deleter = Deleter(deleter);
            Owner::deleter(move || deleter.run())
        }
        // The caller keeps the memory alive for as long as devbuf may use it (cuda.core's
        // owner=None).
        (None, None) => Owner::keep_alive(()),
    };
    if ptr == 0 && nbytes > 0 {
        return Err(PyValueError::new_err("ptr: a null pointer holds no bytes"));
    }
    let extent = i64::try_from(nbytes).map_err(|_| {
        PyValueError::new_err(format!("nbytes: {nbytes} is past any address space"))
    })?;
    // The span is `nbytes` bytes: errors say so, not the descriptor word the checks use.
    let named = |err: PyErr| {
        let message = err.value(py).to_string();
        match message.strip_prefix("shape: ") {
            Some(rest) if err.is_instance_of::<PyValueError>(py) => {
                PyValueError::new_err(format!("nbytes: {rest}"))
            }
            _ => err,
        }
    };
    let foreign = interface::import_strided(DType::UINT8, &[extent], None, ptr, false, "ptr")
        .py()
        .map_err(named)?;
    let queue = resolve_queue(py, device)?;
    let imported = wrap_foreign(py, foreign, queue, owner, "ptr", None).map_err(named)?;
    let this = imported.get();
    let buffer = this.array(py)?.buffer().clone();
    PyBuffer::wrap(py, buffer, this.queue.clone_ref(py))
}
