//! The dictionary protocols: `__sycl_usm_array_interface__` and `__cuda_array_interface__`.

use devbuf::interface::{self, InterfaceDict};
use devbuf::interop::ProducerStream;
use devbuf::{ForeignObject, Owner};
use pyo3::Borrowed;
use pyo3::conversion::FromPyObjectOwned;
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
use crate::values::exact_int::exact_int;

/// A dimension list held on the stack (a heap allocation only past four dimensions).
type Dims = SmallVec<[i64; 4]>;

/// `value` as an `i64` when it is a plain int in range (what producers write), read without
/// pyo3's generic conversion; anything else goes through pyo3's extraction, which reads it or
/// makes the error.
fn int(value: Borrowed<'_, '_, PyAny>) -> PyResult<i64> {
    // SAFETY: a live object, with the thread attached (`value`'s token).
    if unsafe { ffi::PyLong_CheckExact(value.as_ptr()) } != 0 {
        // SAFETY: as above; an int.
        let read = unsafe { ffi::PyLong_AsLongLong(value.as_ptr()) };
        if read != -1 || !PyErr::occurred(value.py()) {
            return Ok(read);
        }
        // Out of range: the generic path makes the error again.
        drop(PyErr::take(value.py()));
    }
    extract_slowly(value)
}

/// pyo3's generic extraction: what `int`, `ints` and `pointer_and_readonly` fall back on for what
/// producers rarely write (and for every error), kept out of the hot path's code.
#[cold]
#[inline(never)]
fn extract_slowly<'py, T: FromPyObjectOwned<'py>>(value: Borrowed<'_, 'py, PyAny>) -> PyResult<T> {
    value.extract().map_err(Into::into)
}

/// A tuple of ints (what producers write) read item by item; any other sequence through pyo3's
/// generic extraction, which also rejects a str.
fn ints(sequence: &Bound<'_, PyAny>) -> PyResult<Dims> {
    let Ok(tuple) = sequence.cast::<PyTuple>() else {
        return extract_slowly::<Vec<i64>>(sequence.as_borrowed()).map(Dims::from_vec);
    };
    let mut dims = Dims::new();
    for item in tuple.iter_borrowed() {
        dims.push(int(item)?);
    }
    Ok(dims)
}

/// `data`'s `(pointer, read-only)` tuple read item by item (what producers write); any other
/// sequence through pyo3's generic extraction.
fn pointer_and_readonly(data: &Bound<'_, PyAny>) -> PyResult<(usize, bool)> {
    match data.cast::<PyTuple>() {
        Ok(tuple) if tuple.len() == 2 => {
            let pointer = tuple.get_borrowed_item(0)?;
            let pointer = match exact_int(pointer) {
                Some(pointer) => pointer,
                None => extract_slowly(pointer)?,
            };
            let readonly = tuple.get_borrowed_item(1)?;
            // SAFETY: comparing addresses with the interpreter's two bools reads nothing.
            let readonly = if readonly.as_ptr() == unsafe { ffi::Py_True() } {
                true
            } else if readonly.as_ptr() == unsafe { ffi::Py_False() } {
                false
            } else {
                extract_slowly(readonly)?
            };
            Ok((pointer, readonly))
        }
        _ => extract_slowly(data.as_borrowed()),
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
    move |_| type_error(key, what)
}

#[cold]
#[inline(never)]
fn type_error(key: &'static str, what: &'static str) -> PyErr {
    PyTypeError::new_err(format!("{key}: expected {what}"))
}

/// A ValueError: `key` is missing from the `protocol`'s dict.
#[cold]
#[inline(never)]
fn missing(key: &str, protocol: &str) -> PyErr {
    PyValueError::new_err(format!("{key}: missing from {protocol}"))
}

/// The type description's pairs (rare: producers of plain dtypes leave it out or `None`).
#[cold]
#[inline(never)]
fn descr_pairs(
    descr: &Bound<'_, PyAny>,
    descr_name: &'static str,
) -> PyResult<Vec<(String, String)>> {
    descr
        .extract::<Vec<(String, String)>>()
        .map_err(typed(descr_name, "a list of (name, typestr) tuples"))
}

#[cold]
#[inline(never)]
fn not_a_dict(protocol: &str) -> PyErr {
    PyTypeError::new_err(format!("{protocol} is not a dict"))
}

/// The values of `names` in `dict`, read in one pass over its items instead of one lookup per name
/// (each hashes and probes again). A producer's keys are, as a rule, the very interned strs
/// `names` holds and match by identity; any other str key matches by its text.
fn items<'py, const N: usize>(
    dict: &Bound<'py, PyDict>,
    names: [&Bound<'py, PyString>; N],
) -> [Option<Bound<'py, PyAny>>; N] {
    let py = dict.py();
    let mut found = [const { None }; N];
    let mut at: ffi::Py_ssize_t = 0;
    let (mut key, mut value) = (std::ptr::null_mut(), std::ptr::null_mut());
    // SAFETY: `dict` is a live dict, and nothing in the loop runs Python code (no key's `__eq__`
    // is called), so it cannot change under the walk, and each borrowed value is alive when it is
    // taken as a strong reference.
    while unsafe { ffi::PyDict_Next(dict.as_ptr(), &mut at, &mut key, &mut value) } != 0 {
        let slot = names
            .iter()
            .position(|name| name.as_ptr() == key)
            .or_else(|| {
                // SAFETY: a key of the live dict, borrowed for this comparison only.
                let key = unsafe { Borrowed::from_ptr(py, key) };
                let key = key.cast::<PyString>().ok()?;
                let text = key.to_str().ok()?;
                names
                    .iter()
                    .position(|name| name.to_str().is_ok_and(|name| name == text))
            });
        // The first key of a name wins (a str subclass may hash apart from an equal str), so no
        // reference is dropped, and no finalizer run, during the walk.
        if let Some(slot) = slot
            && found[slot].is_none()
        {
            // SAFETY: a value of the live dict, taken as a strong reference at once.
            found[slot] = Some(unsafe { Borrowed::from_ptr(py, value) }.to_owned());
        }
    }
    found
}

/// Reads the keys CAI and SUAI share and the protocol's own three, `keys`: its type description
/// (SUAI's `typedescr`, CAI's `descr`, named `descr_name`) and two more, whose values come back
/// unconverted. A wrong Python type is a TypeError naming the key.
fn read_interface_dict<'py>(
    dict: &Bound<'py, PyAny>,
    protocol: &str,
    descr_name: &'static str,
    keys: [&Bound<'py, PyString>; 3],
) -> PyResult<(ReadDict<'py>, [Option<Bound<'py, PyAny>>; 2])> {
    let py = dict.py();
    let dict = dict.cast::<PyDict>().map_err(|_| not_a_dict(protocol))?;
    let [descr_key, first, second] = keys;
    let [version, shape, typestr, data, strides, descr, first, second] = items(
        dict,
        [
            intern!(py, "version"),
            intern!(py, "shape"),
            intern!(py, "typestr"),
            intern!(py, "data"),
            intern!(py, "strides"),
            descr_key,
            first,
            second,
        ],
    );
    let required =
        |value: Option<Bound<'py, PyAny>>, key: &str| value.ok_or_else(|| missing(key, protocol));
    let version =
        int(required(version, "version")?.as_borrowed()).map_err(typed("version", "an int"))?;
    let shape = ints(&required(shape, "shape")?).map_err(typed("shape", "a tuple of ints"))?;
    let typestr = required(typestr, "typestr")?
        .cast_into::<PyString>()
        .map_err(|_| type_error("typestr", "a str"))?;
    let data = match data {
        None => None,
        Some(data) => Some(
            pointer_and_readonly(&data)
                .map_err(typed("data", "a tuple (int pointer, bool read-only)"))?,
        ),
    };
    let strides = match strides {
        Some(strides) if !strides.is_none() => {
            Some(ints(&strides).map_err(typed("strides", "None or a tuple of ints"))?)
        }
        _ => None,
    };
    let descr = match descr {
        Some(descr) if !descr.is_none() => Some(descr_pairs(&descr, descr_name)?),
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
    Ok((read, [first, second]))
}

/// The spec's fallback for host-accessible USM: no `data`, use the buffer protocol (rare: out of
/// the import's hot code). A fault is still SUAI's, naming the key.
#[cold]
#[inline(never)]
fn suai_without_data<'py>(
    py: Python<'py>,
    obj: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyArray>> {
    // SAFETY: `obj` is a live object.
    if unsafe { ffi::PyObject_CheckBuffer(obj.as_ptr()) } == 0 {
        return Err(PyValueError::new_err(
            "data: missing from __sycl_usm_array_interface__, and the object has no buffer \
             protocol to fall back on",
        ));
    }
    import_buffer_protocol(py, obj)
}

/// With `sync`, our later work on the memory is ordered after the producer's queue (`syclobj`);
/// without, the caller takes that over (as for DLPack and CAI).
pub(crate) fn import_suai<'py>(
    py: Python<'py>,
    obj: &Bound<'py, PyAny>,
    dict: &Bound<'py, PyAny>,
    sync: bool,
) -> PyResult<Bound<'py, PyArray>> {
    let (read, [offset, syclobj]) = read_interface_dict(
        dict,
        "__sycl_usm_array_interface__",
        "typedescr",
        [
            intern!(py, "typedescr"),
            intern!(py, "offset"),
            intern!(py, "syclobj"),
        ],
    )?;
    if read.data.is_none() {
        return suai_without_data(py, obj);
    }
    let mut parsed = read.interface_dict()?;
    parsed.offset = match offset {
        Some(offset) if !offset.is_none() => {
            int(offset.as_borrowed()).map_err(typed("offset", "an int"))?
        }
        _ => 0,
    };
    let syclobj = syclobj.ok_or_else(|| missing("syclobj", "__sycl_usm_array_interface__"))?;
    let foreign = interface::import_suai(&parsed).py()?;
    let resolved = foreign_objects::queue_from_syclobj(py, &syclobj, foreign.base())?;
    let key = if parsed.offset == 0 { "data" } else { "offset" };
    // The producer may still have work on the memory in its queue: ours is ordered after it.
    let producer = if sync { resolved.producer } else { None };
    wrap_foreign(
        py,
        foreign,
        resolved.queue,
        Owner::keep_alive(obj.clone().unbind()),
        key,
        producer,
    )
}

pub(crate) fn import_cai<'py>(
    py: Python<'py>,
    obj: &Bound<'py, PyAny>,
    dict: &Bound<'py, PyAny>,
    sync: bool,
) -> PyResult<Bound<'py, PyArray>> {
    let (read, [mask, stream]) = read_interface_dict(
        dict,
        "__cuda_array_interface__",
        "descr",
        [
            intern!(py, "descr"),
            intern!(py, "mask"),
            intern!(py, "stream"),
        ],
    )?;
    if read.data.is_none() {
        return Err(PyValueError::new_err(
            "data: missing from __cuda_array_interface__",
        ));
    }
    let mut parsed = read.interface_dict()?;
    parsed.has_mask = mask.is_some_and(|mask| !mask.is_none());
    let stream = match stream {
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
    let selector = if foreign.byte_len() == 0 {
        devbuf::backend_for(devbuf::Protocol::Cai)
            .map(|backend| backend.name())
            .ok_or_else(|| {
                PyValueError::new_err(
                    "__cuda_array_interface__: no backend compiled into devbuf speaks it",
                )
            })?
            .to_string()
    } else {
        let base = foreign.base();
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
        None,
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
