//! `devbuf._devbuf`: the Python face of devbuf. It translates only: Python objects and protocol
//! dictionaries in and out, while the model, the backends and the descriptor parsing live in the
//! Rust crates.

mod array;
mod buffer;
mod creation;
mod device;
mod ecosystem;
mod errors;
mod export;
mod gil_as_lock;
mod import;
mod mr;
mod objects;
mod shutdown;
mod stream;
mod stream_allocator;
mod values;
mod vectorcall;

use devbuf::conformance::Outcome;
use pyo3::prelude::*;

/// One check's result for Python: `(check, "pass" | "FAIL" | "skip", reason)`.
type CheckRow = (&'static str, &'static str, String);

/// The Rust conformance matrix: `[(device label, [check rows])]`; only row `device` (a device's
/// selector or an unavailable backend's name) and only check `check` where given.
#[pyfunction]
#[pyo3(signature = (device=None, check=None))]
fn conformance_matrix(
    py: Python<'_>,
    device: Option<&str>,
    check: Option<&str>,
) -> Vec<(String, Vec<CheckRow>)> {
    let selection = devbuf::matrix::Selection { row: device, check };
    py.detach(|| devbuf::matrix::run_selected(selection))
        .into_iter()
        .map(|row| {
            let outcomes = row
                .outcomes
                .into_iter()
                .map(|(check, outcome)| match outcome {
                    Outcome::Pass => (check, "pass", String::new()),
                    Outcome::Fail(why) => (check, "FAIL", why),
                    Outcome::Skip(why) => (check, "skip", why),
                })
                .collect();
            (row.label, outcomes)
        })
        .collect()
}

/// The conformance matrix's checks, its columns, in order.
#[pyfunction]
fn conformance_checks() -> Vec<&'static str> {
    devbuf::matrix::checks()
}

/// Lets other Python threads run while devbuf blocks in a runtime (a wait before releasing
/// memory, from deallocators and capsule destructors; a SYCL submission): docs/architecture.md,
/// "Blocking calls and the GIL".
fn release_gil_while(wait: &mut dyn FnMut()) {
    /// The wait, which `detach` runs on this very thread.
    struct OnThisThread<'a>(&'a mut dyn FnMut());
    // SAFETY: `detach` runs the closure on the calling thread before it returns.
    unsafe impl Send for OnThisThread<'_> {}
    impl OnThisThread<'_> {
        fn run(self) {
            (self.0)()
        }
    }
    if !shutdown::holds_gil() {
        return wait();
    }
    let wait = OnThisThread(wait);
    Python::attach(|py| {
        py.detach(move || {
            wait.run();
            shutdown::wait_for_exit_if_finalizing();
        })
    });
}

// Not free-threaded: `gil_as_lock`'s types take the GIL as their lock.
#[pymodule(gil_used = true)]
fn _devbuf(m: &Bound<'_, PyModule>) -> PyResult<()> {
    gil_as_lock::require_gil(m.py())?;
    devbuf::set_blocking_hook(release_gil_while);
    devbuf::ecosystem::set_ecosystem(Box::new(ecosystem::PythonEcosystem));
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    // The commit built from (build.rs; empty when built outside a git checkout), RMM's name.
    m.add("__git_commit__", env!("DEVBUF_GIT_COMMIT"))?;
    m.add_class::<objects::array::PyArray>()?;
    export::dlpack::add_dlpack_method(&m.py().get_type::<objects::array::PyArray>())?;
    m.add_class::<objects::array::PyBuffer>()?;
    m.add_class::<objects::device::PyDevice>()?;
    m.add_class::<objects::queue::PyQueue>()?;
    m.add_class::<objects::event::PyEvent>()?;
    // The class's earlier name.
    m.add("Queue", m.py().get_type::<objects::queue::PyQueue>())?;
    m.add_class::<objects::device::PyBackendInfo>()?;
    m.add_function(wrap_pyfunction!(objects::device::backends, m)?)?;
    m.add_function(wrap_pyfunction!(objects::device::devices, m)?)?;
    m.add_function(wrap_pyfunction!(
        objects::default_device::default_device,
        m
    )?)?;
    m.add_function(wrap_pyfunction!(device::methods::set_default_device, m)?)?;
    m.add_function(wrap_pyfunction!(
        objects::default_device::_default_device_reason,
        m
    )?)?;
    m.add_function(wrap_pyfunction!(
        objects::default_device::_note_default_device_reason,
        m
    )?)?;
    buffer::methods::add_alloc(m)?;
    creation::register(m)?;
    m.add_function(wrap_pyfunction!(objects::event::get_elapsed_time, m)?)?;
    m.add_function(wrap_pyfunction!(creation::asarray::asarray, m)?)?;
    m.add_function(wrap_pyfunction!(import::from_dlpack, m)?)?;
    m.add_function(wrap_pyfunction!(
        export::ordering::set_cai_export_stream,
        m
    )?)?;
    m.add_function(wrap_pyfunction!(conformance_matrix, m)?)?;
    m.add_function(wrap_pyfunction!(conformance_checks, m)?)?;
    m.add_class::<buffer::ipc::PyIpcHandle>()?;
    m.add_function(wrap_pyfunction!(buffer::ipc::open_ipc, m)?)?;
    m.add_function(wrap_pyfunction!(buffer::ipc::_ipc_handle_from_bytes, m)?)?;
    m.add_function(wrap_pyfunction!(array::pickle::_rebuild, m)?)?;
    mr::resources::register(m)?;
    m.add(
        "DeviceFallbackWarning",
        m.py().get_type::<array::pickle::DeviceFallbackWarning>(),
    )?;
    Ok(())
}
