//! Writing into an `Array` as NumPy's and CuPy's users do, without a kernel: `x.fill(value)` and
//! `x[key] = value`. Python values are translated here (a scalar, a nested list, anything
//! `asarray` takes); what they mean (conversion, broadcasting, runs, overlap) is
//! `devbuf::Array`'s, and every write is one of its fills or copies, ordered as they all are.

use std::sync::Arc;

use devbuf::{Array, Event, Queue, Scalar};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;

use crate::errors::IntoPyResult;
use crate::objects::array::PyArray;
use crate::objects::queue::PyQueue;
use crate::objects::streams::StreamArg;

/// What `x[key] = value` writes: one value everywhere, or an array's elements broadcast (an
/// imported one, or the values of a nested list in host memory).
enum Written<'py> {
    Scalar(Scalar),
    Imported(Bound<'py, PyArray>),
    Values(Array),
}

#[pymethods]
impl PyArray {
    /// Sets every element to `value` (a bool, int, float or complex, or a NumPy scalar),
    /// converted to this array's dtype as NumPy converts a Python scalar (one that does not fit,
    /// `fill(256)` into uint8, is a ValueError naming `value`): NumPy's and CuPy's `x.fill`. Any
    /// layout: a strided view is filled run by run. With `blocking=False` the fill is only
    /// enqueued; `stream` (a `devbuf.Stream` that reaches the memory) runs it instead of the
    /// array's own queue, as does the stream of an enclosing `with stream:` block.
    #[pyo3(signature = (value, *, blocking = true, stream = None))]
    fn fill(
        slf: &Bound<'_, Self>,
        value: &Bound<'_, PyAny>,
        blocking: bool,
        stream: Option<StreamArg<'_>>,
    ) -> PyResult<()> {
        let stream = stream.as_deref();
        let py = slf.py();
        let this = slf.get();
        let array = this.writable_array(py, "fill: this array is read-only")?;
        if !(crate::values::literals::is_python_scalar(value)
            || crate::values::literals::is_numpy_scalar(value)?)
        {
            return Err(PyTypeError::new_err(format!(
                "value: fill takes one scalar (bool, int, float or complex), not a {}; to copy \
                 an array's elements in, assign it: x[...] = value",
                value.get_type().name()?
            )));
        }
        let value = crate::values::literals::scalar(value, "value")?;
        let destination: &Array = &array;
        write(
            py,
            destination,
            None,
            stream,
            blocking,
            |queue| match queue {
                None => destination.fill_as(value, "value").map(|()| None),
                Some(queue) => destination.enqueue_fill_as(value, "value", queue).map(Some),
            },
        )
    }

    /// `x[key] = value`: the elements `key` selects (NumPy's basic indexing, as `x[key]` reads
    /// them) take `value`, broadcast to their shape by NumPy's rules. `value` is a scalar (one
    /// fill, converted to this dtype as NumPy converts it), a nested list or tuple of scalars
    /// (converted the same way), or anything `devbuf.asarray` takes (a devbuf array, a NumPy,
    /// dpnp, CuPy or PyTorch array...), whose dtype must be this array's: devbuf converts no
    /// array's element type (TypeError naming `value`). A value sharing memory with the
    /// destination (`x[1:] = x[:-1]`) is copied out first. The write is a copy or fill like
    /// every other: on the stream of an enclosing `with stream:` block if any, waited for.
    fn __setitem__(
        slf: &Bound<'_, Self>,
        key: &Bound<'_, PyAny>,
        value: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let py = slf.py();
        let this = slf.get();
        let array = this.writable_array(py, "assignment destination is read-only")?;
        let index = crate::array::views::basic_index(key)?;
        let layout = array.layout().index(&index).py()?;
        let destination = Array::new(array.buffer().clone(), layout).py()?;
        drop(array);
        let destination = &destination;
        match written(py, value, destination)? {
            Written::Scalar(value) => {
                write(py, destination, None, None, true, |queue| match queue {
                    None => destination.fill_as(value, "value").map(|()| None),
                    Some(queue) => destination.enqueue_fill_as(value, "value", queue).map(Some),
                })
            }
            Written::Imported(source) => assign(py, destination, &*source.get().array(py)?),
            Written::Values(source) => assign(py, destination, &source),
        }
    }

    /// `del x[key]` is refused, as NumPy refuses it: an array's size is fixed.
    fn __delitem__(&self, _key: &Bound<'_, PyAny>) -> PyResult<()> {
        Err(PyValueError::new_err("cannot delete array elements"))
    }
}

/// `value` of `x[...] = value` as what it writes into `destination`.
fn written<'py>(
    py: Python<'py>,
    value: &Bound<'py, PyAny>,
    destination: &Array,
) -> PyResult<Written<'py>> {
    if let Ok(ours) = value.cast::<PyArray>() {
        return Ok(Written::Imported(ours.clone()));
    }
    if crate::values::literals::is_python_scalar(value)
        || crate::values::literals::is_numpy_scalar(value)?
    {
        return crate::values::literals::scalar(value, "value").map(Written::Scalar);
    }
    if crate::values::literals::is_sequence(value) {
        let literal = crate::values::literals::literal(value, "value")?;
        let dtype = destination.layout().dtype();
        let values = py.detach(|| literal.to_host_array(dtype, "value")).py()?;
        return Ok(Written::Values(values));
    }
    crate::import::import_object(py, value, false, true).map(Written::Imported)
}

/// `destination[...] = source` for an array source, waited for.
fn assign(py: Python<'_>, destination: &Array, source: &Array) -> PyResult<()> {
    write(
        py,
        destination,
        Some(source),
        None,
        true,
        |queue| match queue {
            None => destination.assign_from(source).map(|()| None),
            Some(queue) => destination.enqueue_assign_from(source, queue).map(Some),
        },
    )
}

/// Runs `command` for `destination` (reading `source`, if any) with the GIL released: on
/// `stream`, else on the stream of an enclosing `with stream:` block of the destination's device
/// that reaches the source, else on the memory's own queues (`command` is then given no queue
/// and waits itself); without `blocking`, on the destination's own queue. A waited-for write that
/// runs on the host ([`Array::writes_on_the_host`]) is given no queue either. An enqueued command
/// returns its event, waited for when `blocking`.
pub(crate) fn write(
    py: Python<'_>,
    destination: &Array,
    source: Option<&Array>,
    stream: Option<&Bound<'_, PyQueue>>,
    blocking: bool,
    command: impl FnOnce(Option<&Arc<dyn Queue>>) -> devbuf::Result<Option<Event>> + Send,
) -> PyResult<()> {
    let own = &destination.buffer().device().selector;
    let current = match stream {
        None => crate::objects::current_stream::current_on(py, Some(own)).filter(|_| {
            source.is_none_or(|source| {
                source.buffer().is_host_accessible() || &source.buffer().device().selector == own
            })
        }),
        Some(_) => None,
    };
    // A waited-for write on the host, after all the memory's work, needs no stream's command.
    let runner = stream
        .or(current.as_ref())
        .filter(|_| !(blocking && destination.writes_on_the_host(source)));
    let queue = match (runner, blocking) {
        (Some(stream), _) => Some(stream.get().queue()?.clone()),
        (None, true) => None,
        (None, false) => Some(destination.buffer().queue().clone()),
    };
    py.detach(|| match command(queue.as_ref())? {
        Some(event) if blocking => devbuf::ordering::wait_for_event(&event),
        _ => Ok(()),
    })
    .py()
}
