//! `devbuf._devbuf`: the Python face of devbuf. It translates only: Python objects and protocol
//! dictionaries in and out, while the model, the backends and the descriptor parsing live in the
//! Rust crates.

mod array;
mod backend;
mod device;
mod dlpack_method;
mod errors;
mod exchange;
mod export;
mod import;
mod ipc;
mod pickle;
mod streams;

use devbuf::conformance::Outcome;
use pyo3::prelude::*;

/// One check's result for Python: `(check, "pass" | "FAIL" | "skip", reason)`.
type CheckRow = (&'static str, &'static str, String);

/// The Rust conformance matrix: `[(device label, [check rows])]`.
#[pyfunction]
fn conformance_matrix(py: Python<'_>) -> Vec<(String, Vec<CheckRow>)> {
    py.detach(devbuf::matrix::run)
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

#[pymodule]
fn _devbuf(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_class::<array::PyArray>()?;
    dlpack_method::install(&m.py().get_type::<array::PyArray>())?;
    m.add_class::<array::PyBuffer>()?;
    m.add_class::<device::PyDevice>()?;
    m.add_class::<device::PyQueue>()?;
    m.add_class::<device::PyBackendInfo>()?;
    m.add_function(wrap_pyfunction!(device::backends, m)?)?;
    m.add_function(wrap_pyfunction!(device::devices, m)?)?;
    m.add_function(wrap_pyfunction!(device::default_device, m)?)?;
    m.add_function(wrap_pyfunction!(device::alloc, m)?)?;
    m.add_function(wrap_pyfunction!(import::asarray, m)?)?;
    m.add_function(wrap_pyfunction!(import::from_dlpack, m)?)?;
    m.add_function(wrap_pyfunction!(streams::set_cai_export_stream, m)?)?;
    m.add_function(wrap_pyfunction!(conformance_matrix, m)?)?;
    m.add_class::<ipc::PyIpcHandle>()?;
    m.add_function(wrap_pyfunction!(ipc::open_ipc, m)?)?;
    m.add_function(wrap_pyfunction!(ipc::_ipc_handle_from_bytes, m)?)?;
    m.add_function(wrap_pyfunction!(pickle::_rebuild, m)?)?;
    m.add(
        "DeviceFallbackWarning",
        m.py().get_type::<pickle::DeviceFallbackWarning>(),
    )?;
    Ok(())
}
