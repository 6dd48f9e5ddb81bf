//! `Buffer.prefetch` and `Buffer.advise`: Python's arguments to `devbuf::Buffer`'s hints about
//! shared memory.

use devbuf::{Advice, Buffer, Location};
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyInt, PyString};

use crate::errors::IntoPyResult;
use crate::objects::queue::PyQueue;

/// Enqueues migrating `buffer` toward `location`, on `stream` or the buffer's queue.
pub(crate) fn prefetch(
    py: Python<'_>,
    buffer: &Buffer,
    location: &str,
    stream: Option<&Bound<'_, PyQueue>>,
) -> PyResult<()> {
    let location: Location = location.parse().py()?;
    let queue = stream
        .map(|stream| stream.get().queue().cloned())
        .transpose()?;
    py.detach(|| match &queue {
        Some(queue) => buffer.prefetch_on(location, queue),
        None => buffer.prefetch(location),
    })
    .map(drop)
    .py()
}

/// Advises the runtime about `buffer`: `advice` is CUDA's name of it or a backend's number.
pub(crate) fn advise(
    py: Python<'_>,
    buffer: &Buffer,
    advice: &Bound<'_, PyAny>,
    location: Option<&str>,
) -> PyResult<()> {
    let location = location.map(str::parse::<Location>).transpose().py()?;
    let advice = if let Ok(name) = advice.cast::<PyString>() {
        Advice::named(name.to_str()?, location).py()?
    } else if let Ok(number) = advice.cast::<PyInt>() {
        Advice::Native(number.extract()?)
    } else {
        return Err(PyTypeError::new_err(format!(
            "advice: expected a name (e.g. \"set_read_mostly\") or a backend's advice number, got {}",
            advice.get_type()
        )));
    };
    py.detach(|| buffer.advise(advice)).py()
}
