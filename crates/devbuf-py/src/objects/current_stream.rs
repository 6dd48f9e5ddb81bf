//! The current stream of a thread: `with stream:` makes `stream` the stream of the calls inside
//! the block that name none (`alloc`, `copy_from`, `fill`, `get`, `to_bytes`), for memory of its
//! device, as `with cupy.cuda.Stream():` does for CuPy's calls. Blocks nest; the innermost wins.

use std::cell::RefCell;

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;

use crate::objects::queue::PyQueue;

thread_local! {
    /// The streams of this thread's open `with stream:` blocks, innermost last.
    static ENTERED: RefCell<Vec<Py<PyQueue>>> = const { RefCell::new(Vec::new()) };
}

/// The start of a `with stream:` block.
pub(crate) fn enter(stream: Py<PyQueue>) {
    ENTERED.with_borrow_mut(|entered| entered.push(stream));
}

/// The end of the innermost `with stream:` block, which must be `stream`'s.
pub(crate) fn exit(stream: &Bound<'_, PyQueue>) -> PyResult<()> {
    let left = ENTERED.with_borrow_mut(|entered| entered.pop());
    match left {
        Some(left) if left.is(stream) => Ok(()),
        Some(left) => {
            // Not this block's: put it back, and say so.
            ENTERED.with_borrow_mut(|entered| entered.push(left));
            Err(PyRuntimeError::new_err(
                "with stream: the blocks of this thread were left out of order",
            ))
        }
        None => Err(PyRuntimeError::new_err(
            "with stream: no block of this thread was entered with this stream",
        )),
    }
}

/// Whether a `with stream:` block is open on this thread (one thread-local read: `alloc`'s fast
/// path asks it on every call).
#[inline]
pub(crate) fn any() -> bool {
    ENTERED.with_borrow(|entered| !entered.is_empty())
}

/// The innermost current stream, when it runs on the device `selector` names (`None`: any).
pub(crate) fn current_on<'py>(
    py: Python<'py>,
    selector: Option<&str>,
) -> Option<Bound<'py, PyQueue>> {
    let stream = ENTERED.with_borrow(|entered| entered.last().map(|s| s.clone_ref(py)))?;
    let stream = stream.into_bound(py);
    match selector {
        Some(selector) if stream.get().held().device().selector != selector => None,
        _ => Some(stream),
    }
}
