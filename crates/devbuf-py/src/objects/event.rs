//! `Event`: a point in a stream's work (cuda.core's `Stream.record()`, CuPy's `Event`), which the
//! host can wait for and other streams can be made to wait for.

use devbuf::Event;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::errors::IntoPyResult;
use crate::objects::queue::PyQueue;

/// A point in a stream's work: it completes once all work enqueued on that stream before
/// `Stream.record()` has. `synchronize()` waits for it on the host, `Stream.wait(event)` makes
/// another stream's later work wait for it on the device, `done` asks without waiting.
#[pyclass(frozen, module = "devbuf", name = "Event")]
pub struct PyEvent {
    pub(crate) event: Event,
    pub(crate) stream: Py<PyQueue>,
}

#[pymethods]
impl PyEvent {
    /// Blocks until the event has completed (CuPy's `Event.synchronize`, cuda.core's `sync`).
    fn synchronize(&self, py: Python<'_>) -> PyResult<()> {
        py.detach(|| devbuf::ordering::wait_for_event(&self.event))
            .py()
    }

    /// Blocks until the event has completed: `synchronize()` under dpctl's name.
    fn wait(&self, py: Python<'_>) -> PyResult<()> {
        self.synchronize(py)
    }

    /// Whether the event has completed, without waiting (CuPy's `Event.done`).
    #[getter]
    fn done(&self) -> PyResult<bool> {
        self.event.is_complete().py()
    }

    /// Whether the event has completed, without waiting: `done` as a call (cuda.core's
    /// `Event.is_done`, CUDA's cuEventQuery).
    fn query(&self) -> PyResult<bool> {
        self.done()
    }

    /// `end - start`: milliseconds from `start` to this event (cuda.core's form), once both have
    /// completed (this waits for them). Both must come from `Stream.record(timing=True)` on one
    /// backend (CUDA, host), and for CUDA on one device; else a ValueError says why.
    fn __sub__(&self, py: Python<'_>, start: &Bound<'_, PyEvent>) -> PyResult<f32> {
        elapsed_time(py, start.get(), self)
    }

    /// The stream the event was recorded on.
    #[getter]
    fn stream(&self, py: Python<'_>) -> Py<PyQueue> {
        self.stream.clone_ref(py)
    }

    fn __repr__(&self) -> String {
        let state = match self.event.is_complete() {
            Ok(true) => "done",
            Ok(false) => "pending",
            Err(_) => "failed",
        };
        let device = self.stream.get().held().device();
        format!(
            "<devbuf.Event {state} on a stream of {:?}>",
            device.selector
        )
    }
}

/// Milliseconds from `start` to `end`, waiting for both first.
fn elapsed_time(py: Python<'_>, start: &PyEvent, end: &PyEvent) -> PyResult<f32> {
    let measured = py.detach(|| {
        devbuf::ordering::wait_for_event(&start.event)?;
        devbuf::ordering::wait_for_event(&end.event)?;
        Ok(end.event.elapsed_ms_since(&start.event))
    });
    measured.py()?.map_or_else(
        || {
            Err(PyValueError::new_err(
                "start, end: the events carry no timing: record both with \
                 Stream.record(timing=True), on one backend",
            ))
        },
        IntoPyResult::py,
    )
}

/// `devbuf.get_elapsed_time(start, end)`: milliseconds from `start` to `end` (CuPy's form of
/// `end - start`).
#[pyfunction]
pub fn get_elapsed_time(
    py: Python<'_>,
    start: &Bound<'_, PyEvent>,
    end: &Bound<'_, PyEvent>,
) -> PyResult<f32> {
    elapsed_time(py, start.get(), end.get())
}
