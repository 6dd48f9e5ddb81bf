//! devbuf's debug log (`devbuf::debug_log`) for `devbuf.mr`'s RMM-named switches
//! (`set_logging_level` and kin, in `devbuf/mr/_debug_log.py`): levels cross as their index in
//! RMM's numbering (trace 0 to off 6).

use devbuf::debug_log::{self, LogLevel};
use pyo3::exceptions::PyOSError;
use pyo3::prelude::*;

use crate::errors::IntoPyResult;

fn level(index: u8) -> PyResult<LogLevel> {
    LogLevel::from_index(index).py()
}

/// The least severe level the debug log keeps.
#[pyfunction]
fn _debug_log_level() -> u8 {
    debug_log::level() as u8
}

#[pyfunction]
fn _set_debug_log_level(index: u8) -> PyResult<()> {
    debug_log::set_level(level(index)?);
    Ok(())
}

/// The least severe level the debug log writes out at once.
#[pyfunction]
fn _debug_log_flush_level() -> u8 {
    debug_log::flush_level() as u8
}

#[pyfunction]
fn _set_debug_log_flush_level(index: u8) -> PyResult<()> {
    debug_log::set_flush_level(level(index)?);
    Ok(())
}

#[pyfunction]
fn _debug_log_should_log(index: u8) -> PyResult<bool> {
    Ok(debug_log::should_log(level(index)?))
}

#[pyfunction]
fn _flush_debug_log() -> PyResult<()> {
    debug_log::flush().map_err(|err| PyOSError::new_err(format!("the debug log: {err}")))
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(_debug_log_level, m)?)?;
    m.add_function(wrap_pyfunction!(_set_debug_log_level, m)?)?;
    m.add_function(wrap_pyfunction!(_debug_log_flush_level, m)?)?;
    m.add_function(wrap_pyfunction!(_set_debug_log_flush_level, m)?)?;
    m.add_function(wrap_pyfunction!(_debug_log_should_log, m)?)?;
    m.add_function(wrap_pyfunction!(_flush_debug_log, m)?)?;
    Ok(())
}
