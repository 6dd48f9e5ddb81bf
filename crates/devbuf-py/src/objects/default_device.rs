//! The default device of `device=None`: the policy's choice (`devbuf::default_device`: the
//! `DEVBUF_DEVICE` variable, else the first backend in the default order that allocates every kind),
//! replaced for the whole process by `set_default_device()` (as `torch.set_default_device`) and for
//! one thread inside a `with devbuf.Device(...)` block (as `with cupy.cuda.Device(n)`); and
//! `default_device()`, `set_default_device()` and the reason `info` prints, as Python sees them.

use std::cell::RefCell;

use parking_lot::Mutex;
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;

use crate::errors::IntoPyResult;
use crate::objects::device::PyDevice;
use crate::objects::queue::{PyQueue, shared_queue};

/// A default device's queue and why it is the default.
type Choice = (Py<PyQueue>, String);

/// The policy's choice, once made (an error is not kept: the next call retries).
static CHOSEN: PyOnceLock<Mutex<Option<Choice>>> = PyOnceLock::new();
/// What `set_default_device` set, if anything.
static SET_FOR_PROCESS: PyOnceLock<Mutex<Option<Py<PyQueue>>>> = PyOnceLock::new();
/// What the Python package found at import that bears on devbuf's choice (a runtime it came too
/// late to register): said with the choice's reason.
static IMPORT_NOTE: std::sync::OnceLock<String> = std::sync::OnceLock::new();

thread_local! {
    /// The devices of this thread's open `with devbuf.Device(...)` blocks, innermost last.
    static ENTERED: RefCell<Vec<Py<PyQueue>>> = const { RefCell::new(Vec::new()) };
}

/// The queue `device=None` means here and now, and why.
pub(crate) fn current_default_with_reason(py: Python<'_>) -> PyResult<Choice> {
    if let Some(queue) = ENTERED.with_borrow(|entered| entered.last().map(|q| q.clone_ref(py))) {
        return Ok((
            queue,
            "entered with `with devbuf.Device(...)` on this thread".into(),
        ));
    }
    let set = SET_FOR_PROCESS.get_or_init(py, Default::default);
    if let Some(queue) = set.lock().as_ref().map(|q| q.clone_ref(py)) {
        return Ok((queue, "set by devbuf.set_default_device()".into()));
    }
    let chosen = CHOSEN.get_or_init(py, Default::default);
    if let Some((queue, reason)) = chosen.lock().as_ref() {
        return Ok((queue.clone_ref(py), reason.clone()));
    }
    let choice = py.detach(devbuf::default_device).py()?;
    let queue = shared_queue(py, &choice.queue.device().selector)?;
    let reason = match IMPORT_NOTE.get() {
        Some(note) => format!("{}; {note}", choice.reason),
        None => choice.reason,
    };
    let mut chosen = chosen.lock();
    let (queue, reason) = chosen.get_or_insert((queue, reason));
    Ok((queue.clone_ref(py), reason.clone()))
}

/// The queue `device=None` means here and now.
pub(crate) fn current_default(py: Python<'_>) -> PyResult<Py<PyQueue>> {
    current_default_with_reason(py).map(|(queue, _)| queue)
}

/// Sets (or with `None` clears) the default device of every thread; returns the previous one.
pub(crate) fn set_process_default(
    py: Python<'_>,
    queue: Option<Py<PyQueue>>,
) -> Option<Py<PyQueue>> {
    let set = SET_FOR_PROCESS.get_or_init(py, Default::default);
    std::mem::replace(&mut *set.lock(), queue)
}

/// `with device:` makes `device` this thread's default until the block ends.
pub(crate) fn enter_default(py: Python<'_>, device: &PyDevice) -> PyResult<()> {
    let queue = shared_queue(py, &device.info.selector)?;
    ENTERED.with_borrow_mut(|entered| entered.push(queue));
    Ok(())
}

/// The end of the innermost `with device:` block of this thread.
pub(crate) fn exit_default(device: &PyDevice) -> PyResult<()> {
    let left = ENTERED.with_borrow_mut(|entered| entered.pop());
    match left {
        Some(queue) if queue.get().device.get().info.selector == device.info.selector => {
            drop(queue);
            Ok(())
        }
        Some(queue) => {
            let entered = queue.get().device.get().info.selector.clone();
            ENTERED.with_borrow_mut(|entered| entered.push(queue));
            Err(PyRuntimeError::new_err(format!(
                "leaving a `with devbuf.Device({:?})` block while the innermost block on this \
                 thread is for {entered:?}: blocks must nest",
                device.info.selector
            )))
        }
        None => Err(PyRuntimeError::new_err(format!(
            "leaving a `with devbuf.Device({:?})` block that this thread never entered",
            device.info.selector
        ))),
    }
}

/// The default device: the device of the innermost `with devbuf.Device(...)` block on this
/// thread, else the one `set_default_device()` set, else devbuf's choice: the device
/// `DEVBUF_DEVICE` names, else the first backend, in the order `devbuf.backends()` lists them,
/// whose default device allocates host, device and shared memory.
#[pyfunction]
pub fn default_device(py: Python<'_>) -> PyResult<Py<PyDevice>> {
    Ok(current_default(py)?.get().device.clone_ref(py))
}

/// Records what the Python package found at import that bears on the default device (devbuf
/// imported too late to register a runtime), for `_default_device_reason` to say; the first
/// note stays.
#[pyfunction]
pub fn _note_default_device_reason(note: String) {
    let _ = IMPORT_NOTE.set(note);
}

/// Why the default device is the one it is (what `python -m devbuf info` prints).
#[pyfunction]
pub fn _default_device_reason(py: Python<'_>) -> PyResult<String> {
    current_default_with_reason(py).map(|(_, reason)| reason)
}
