//! The dictionary protocols: `__sycl_usm_array_interface__` and `__cuda_array_interface__`.

use devbuf::interface::{self, InterfaceDict};
use devbuf::interop::ProducerStream;
use devbuf::{ForeignObject, Owner};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString, PyTuple};
use pyo3::{ffi, intern};
use smallvec::SmallVec;

use crate::errors::IntoPyResult;
use crate::import::buffer_protocol::import_buffer_protocol;
use crate::import::ordering;
use crate::import::wrap::wrap_foreign;
use crate::objects::array::PyArray;
use crate::objects::foreign_objects;
use crate::objects::queue::shared_queue;

/// A dimension list held on the stack (a heap allocation only past four dimensions).
type Dims = SmallVec<[i64; 4]>;

/// A tuple of ints (what producers write) read item by item; any other sequence through pyo3's
/// generic extraction, which also rejects a str.
fn ints(sequence: &Bound<'_, PyAny>) -> PyResult<Dims> {
    let Ok(tuple) = sequence.cast::<PyTuple>() else {
        return sequence.extract::<Vec<i64>>().map(Dims::from_vec);
    };
    tuple
        .iter_borrowed()
        .map(|item| item.extract::<i64>())
        .collect()
}

/// `data`'s `(pointer, read-only)` tuple read item by item (what producers write); any other
/// sequence through pyo3's generic extraction.
fn pointer_and_readonly(data: &Bound<'_, PyAny>) -> PyResult<(usize, bool)> {
    match data.cast::<PyTuple>() {
        Ok(tuple) if tuple.len() == 2 => Ok((
            tuple.get_borrowed_item(0)?.extract()?,
            tuple.get_borrowed_item(1)?.extract()?,
        )),
        _ => data.extract(),
    }
}

/// The keys CAI and SUAI share, converted from Python: what core's [`InterfaceDict`] borrows (the
/// sequences here, the typestr from the producer's str, which this holds).
struct ReadDict<'py> {
    version: i64,
    data: Option<(usize, bool)>,
    shape: Dims,
    typestr: Bound<'py, PyString>,
    strides: Option<Dims>,
    descr: Option<Vec<(String, String)>>,
}

impl ReadDict<'_> {
    /// Core's view of the keys (`offset` and `has_mask` are the caller's).
    fn interface_dict(&self) -> PyResult<InterfaceDict<'_>> {
        Ok(InterfaceDict {
            version: self.version,
            data: self.data.unwrap_or((0, false)),
            shape: &self.shape,
            typestr: self.typestr.to_str().map_err(typed("typestr", "a str"))?,
            descr: self.descr.as_deref(),
            strides: self.strides.as_deref(),
            offset: 0,
            has_mask: false,
        })
    }
}

/// A TypeError naming `key` and the Python type it should have had.
fn typed(key: &'static str, what: &'static str) -> impl FnOnce(PyErr) -> PyErr {
    move |_| PyTypeError::new_err(format!("{key}: expected {what}"))
}

/// Reads the keys CAI and SUAI share (the type description under `descr_name`: SUAI's
/// `typedescr`, CAI's `descr`); a wrong Python type is a TypeError naming the key.
fn read_interface_dict<'a, 'py>(
    dict: &'a Bound<'py, PyAny>,
    protocol: &str,
    descr_name: &'static str,
) -> PyResult<(ReadDict<'py>, &'a Bound<'py, PyDict>)> {
    let py = dict.py();
    let dict = dict
        .cast::<PyDict>()
        .map_err(|_| PyTypeError::new_err(format!("{protocol} is not a dict")))?;
    let required = |key: &Bound<'py, PyString>| -> PyResult<Bound<'py, PyAny>> {
        dict.get_item(key)?
            .ok_or_else(|| PyValueError::new_err(format!("{}: missing from {protocol}", key)))
    };
    let version = required(intern!(py, "version"))?
        .extract::<i64>()
        .map_err(typed("version", "an int"))?;
    let shape =
        ints(&required(intern!(py, "shape"))?).map_err(typed("shape", "a tuple of ints"))?;
    let typestr = required(intern!(py, "typestr"))?
        .cast_into::<PyString>()
        .map_err(|_| PyTypeError::new_err("typestr: expected a str"))?;
    let data = match dict.get_item(intern!(py, "data"))? {
        None => None,
        Some(data) => Some(
            pointer_and_readonly(&data)
                .map_err(typed("data", "a tuple (int pointer, bool read-only)"))?,
        ),
    };
    let strides = match dict.get_item(intern!(py, "strides"))? {
        Some(strides) if !strides.is_none() => {
            Some(ints(&strides).map_err(typed("strides", "None or a tuple of ints"))?)
        }
        _ => None,
    };
    let descr_key = if descr_name == "typedescr" {
        intern!(py, "typedescr")
    } else {
        intern!(py, "descr")
    };
    let descr = match dict.get_item(descr_key)? {
        Some(descr) if !descr.is_none() => Some(
            descr
                .extract::<Vec<(String, String)>>()
                .map_err(typed(descr_name, "a list of (name, typestr) tuples"))?,
        ),
        _ => None,
    };
    let read = ReadDict {
        version,
        data,
        shape,
        typestr,
        strides,
        descr,
    };
    Ok((read, dict))
}

/// With `sync`, our later work on the memory is ordered after the producer's queue (`syclobj`);
/// without, the caller takes that over (as for DLPack and CAI).
pub(crate) fn import_suai<'py>(
    py: Python<'py>,
    obj: &Bound<'py, PyAny>,
    dict: &Bound<'py, PyAny>,
    sync: bool,
) -> PyResult<Bound<'py, PyArray>> {
    let (read, dict) = read_interface_dict(dict, "__sycl_usm_array_interface__", "typedescr")?;
    if read.data.is_none() {
        // The spec's fallback for host-accessible USM: no `data`, use the buffer protocol. A fault
        // is still SUAI's, naming the key.
        // SAFETY: `obj` is a live object.
        if unsafe { ffi::PyObject_CheckBuffer(obj.as_ptr()) } == 0 {
            return Err(PyValueError::new_err(
                "data: missing from __sycl_usm_array_interface__, and the object has no buffer \
                 protocol to fall back on",
            ));
        }
        return import_buffer_protocol(py, obj);
    }
    let mut parsed = read.interface_dict()?;
    parsed.offset = match dict.get_item(intern!(py, "offset"))? {
        Some(offset) if !offset.is_none() => offset
            .extract()
            .map_err(|_| PyTypeError::new_err("offset: expected an int"))?,
        _ => 0,
    };
    let syclobj = dict.get_item(intern!(py, "syclobj"))?.ok_or_else(|| {
        PyValueError::new_err("syclobj: missing from __sycl_usm_array_interface__")
    })?;
    let foreign = interface::import_suai(&parsed).py()?;
    let resolved = foreign_objects::queue_from_syclobj(py, &syclobj, foreign.base)?;
    let key = if parsed.offset == 0 { "data" } else { "offset" };
    let array = wrap_foreign(
        py,
        foreign,
        resolved.queue,
        Owner::keep_alive(obj.clone().unbind()),
        key,
    )?;
    // The producer may still have work on the memory in its queue: ours is ordered after it.
    if sync && let Some(producer) = resolved.producer {
        array
            .get()
            .array(py)?
            .buffer()
            .record_producer(producer)
            .py()?;
    }
    Ok(array)
}

pub(crate) fn import_cai<'py>(
    py: Python<'py>,
    obj: &Bound<'py, PyAny>,
    dict: &Bound<'py, PyAny>,
    sync: bool,
) -> PyResult<Bound<'py, PyArray>> {
    let (read, dict) = read_interface_dict(dict, "__cuda_array_interface__", "descr")?;
    if read.data.is_none() {
        return Err(PyValueError::new_err(
            "data: missing from __cuda_array_interface__",
        ));
    }
    let mut parsed = read.interface_dict()?;
    parsed.has_mask = dict
        .get_item(intern!(py, "mask"))?
        .is_some_and(|mask| !mask.is_none());
    let stream = match dict.get_item(intern!(py, "stream"))? {
        Some(stream) if !stream.is_none() => Some(
            stream
                .extract::<i64>()
                .map_err(|_| PyTypeError::new_err("stream: expected None or an int"))?,
        ),
        _ => None,
    };
    let foreign = interface::import_cai(&parsed).py()?;
    // An empty array has no memory to classify (the spec makes its `data` 0): any queue of the
    // protocol's backend will do.
    let selector = if foreign.len == 0 {
        devbuf::backend_for(devbuf::Protocol::Cai)
            .map(|backend| backend.name())
            .ok_or_else(|| {
                PyValueError::new_err(
                    "__cuda_array_interface__: no backend compiled into devbuf speaks it",
                )
            })?
            .to_string()
    } else {
        let base = foreign.base;
        let queue = py
            .detach(|| devbuf::queue_for_pointer(devbuf::Protocol::Cai, base))
            .py()?;
        queue.device().selector.clone()
    };
    let queue = shared_queue(py, &selector)?;
    let array = wrap_foreign(
        py,
        foreign,
        queue,
        Owner::keep_alive(obj.clone().unbind()),
        "data",
    )?;
    let stream = match stream {
        Some(value) => ForeignObject::Int(value),
        None => ForeignObject::Nothing,
    };
    ordering::order_after_producer_stream(
        array.get().array(py)?.buffer(),
        ProducerStream::CaiEntry(stream),
        sync,
    )?;
    Ok(array)
}
