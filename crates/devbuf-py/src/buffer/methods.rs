//! The Python methods of `Buffer` (what it holds is `objects::array`), and `devbuf.alloc`, which
//! makes Buffers. Nothing in the crate depends on this module.

use std::ffi::CStr;

use devbuf::{Array, Buffer, DType, Layout};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyInt, PySlice, PyString};

use crate::errors::{IntoPyResult, wrong_type};
use crate::objects::array::{PyArray, PyBuffer};
use crate::objects::foreign_objects::resolve_queue;
use crate::objects::queue::PyQueue;
use crate::objects::streams::StreamArg;
use crate::values::exact_int::exact_int;
use crate::vectorcall::{Arguments, Body, Signature};

#[pymethods]
impl PyBuffer {
    /// Buffers are made by `devbuf.alloc` (and imports), not by the class: `Buffer(1024)` says so.
    #[new]
    #[pyo3(signature = (*_args, **_kwargs))]
    fn new(
        _args: &Bound<'_, pyo3::types::PyTuple>,
        _kwargs: Option<&Bound<'_, pyo3::types::PyDict>>,
    ) -> PyResult<PyClassInitializer<PyBuffer>> {
        Err(PyTypeError::new_err(
            "Buffer: buffers are not made by the class; allocate with devbuf.alloc(nbytes, \
             kind, device) (cuda.core's Device.allocate, CuPy's cuda.alloc), or wrap existing \
             memory with devbuf.asarray(obj)",
        ))
    }

    /// `nbytes` at address `ptr` on `device` (a selector, Device or Stream; None for the default
    /// device) as a Buffer, cuda.core's `Buffer.from_handle`: the device's runtime classifies the
    /// pointer, and the bytes must lie in one allocation it knows, where it can tell (else a
    /// ValueError names `ptr` or `nbytes`); memory no runtime can vouch for (a host pointer) is
    /// taken as "unknown". `owner` is kept alive while devbuf uses the memory; `deleter`, a
    /// callable, runs once with no arguments when nothing uses it any more; with neither, the
    /// caller keeps the memory alive for as long as the Buffer and its views live.
    #[staticmethod]
    #[pyo3(signature = (ptr, nbytes, device = None, *, owner = None, deleter = None))]
    fn from_handle(
        py: Python<'_>,
        #[pyo3(from_py_with = crate::values::int_args::ptr)] ptr: usize,
        #[pyo3(from_py_with = crate::values::int_args::nbytes)] nbytes: usize,
        device: Option<&Bound<'_, PyAny>>,
        owner: Option<Py<PyAny>>,
        deleter: Option<Py<PyAny>>,
    ) -> PyResult<Py<PyBuffer>> {
        crate::import::handle::from_handle(py, ptr, nbytes, device, owner, deleter)
    }

    /// A new buffer of `kind` memory on `device` holding a copy of `data`, a one-dimensional
    /// contiguous bytes-like object (format "B": `bytes`, `bytearray`, a uint8 NumPy array):
    /// RMM's `DeviceBuffer.to_device(data, stream)`. Another format or layout is a ValueError,
    /// an object without the buffer protocol a TypeError. `stream` runs the copy; `mr` allocates.
    #[staticmethod]
    #[pyo3(signature = (data, kind = "shared", device = None, *, stream = None, mr = None))]
    fn from_host<'py>(
        py: Python<'py>,
        data: &Bound<'py, PyAny>,
        kind: &str,
        device: Option<&Bound<'py, PyAny>>,
        stream: Option<&Bound<'py, PyAny>>,
        mr: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        crate::buffer::rmm::from_host(py, data, kind, device, stream, mr)
    }

    /// Copies `data` (bytes-like, as `from_host` takes) into this buffer's first bytes, RMM's
    /// `DeviceBuffer.copy_from_host`; a longer source is a ValueError.
    #[pyo3(signature = (data, *, stream = None))]
    fn copy_from_host(
        slf: &Bound<'_, Self>,
        data: &Bound<'_, PyAny>,
        stream: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        crate::buffer::rmm::copy_into_start(slf, data, stream, "copy_from_host")
    }

    /// Copies the bytes of `source` (device memory: anything `devbuf.asarray` takes) into this
    /// buffer's first bytes, RMM's `DeviceBuffer.copy_from_device`; a longer source is a ValueError.
    #[pyo3(signature = (source, *, stream = None))]
    fn copy_from_device(
        slf: &Bound<'_, Self>,
        source: &Bound<'_, PyAny>,
        stream: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        crate::buffer::rmm::copy_into_start(slf, source, stream, "copy_from_device")
    }

    /// The bytes this buffer may grow to without new memory (RMM's `DeviceBuffer.capacity()`):
    /// its allocation's, from its start; for memory devbuf did not allocate, its size.
    fn capacity(slf: &Bound<'_, Self>) -> PyResult<usize> {
        crate::buffer::rmm::capacity(slf)
    }

    /// Makes the buffer `new_size` bytes long, keeping its first bytes (RMM's
    /// `DeviceBuffer.resize`): within `capacity()` in place, else in a new allocation from the
    /// resource its memory came from, the bytes copied on `stream` (default: the buffer's queue),
    /// stream-ordered. A BufferError for a buffer whose memory was handed out through a protocol
    /// whose consumers keep the buffer (CAI, SUAI, the buffer protocol), or that is read-only; a
    /// ValueError for memory devbuf did not allocate, which cannot grow.
    #[pyo3(signature = (new_size, stream = None))]
    fn resize(
        slf: &Bound<'_, Self>,
        new_size: usize,
        stream: Option<&Bound<'_, PyQueue>>,
    ) -> PyResult<()> {
        use crate::buffer::rmm::{NewSize, change_size};
        change_size(slf, NewSize::Size(new_size), stream, "resize")
    }

    /// Makes `capacity()` at least `new_capacity` bytes, keeping the size and bytes (RMM's
    /// `DeviceBuffer.reserve`), as `resize` grows.
    #[pyo3(signature = (new_capacity, stream = None))]
    fn reserve(
        slf: &Bound<'_, Self>,
        new_capacity: usize,
        stream: Option<&Bound<'_, PyQueue>>,
    ) -> PyResult<()> {
        use crate::buffer::rmm::{NewSize, change_size};
        change_size(slf, NewSize::Capacity(new_capacity), stream, "reserve")
    }

    /// `to_bytes` under NumPy's and RMM's name.
    #[pyo3(signature = (stream = None))]
    fn tobytes<'py>(
        slf: &Bound<'py, Self>,
        stream: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let kwargs = PyDict::new(slf.py());
        if let Some(stream) = stream {
            kwargs.set_item("stream", stream)?;
        }
        slf.call_method("to_bytes", (), Some(&kwargs))
    }

    /// `bytes(buffer)`: the bytes copied to the host, as `to_bytes()`, for every kind of memory
    /// (RMM's `DeviceBuffer`). Python asks for `__bytes__` before the buffer protocol, which
    /// stays for memory the host can read (CuPy's rule): `memoryview` of device memory is still
    /// a BufferError.
    fn __bytes__<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        slf.call_method0("to_bytes")
    }

    /// Number of bytes.
    #[getter]
    fn nbytes(slf: &Bound<'_, Self>) -> PyResult<usize> {
        Ok(slf.as_super().get().array(slf.py())?.buffer().len())
    }

    /// Address of the first byte; 0 for a 0-byte buffer, which holds no memory, except on SYCL
    /// (dpctl refuses a null pointer).
    #[getter]
    fn ptr(slf: &Bound<'_, Self>) -> PyResult<usize> {
        Ok(slf.as_super().get().array(slf.py())?.buffer().ptr() as usize)
    }

    /// Whether devbuf allocated this memory (False for imported, foreign memory).
    #[getter]
    fn owned(slf: &Bound<'_, Self>) -> PyResult<bool> {
        Ok(is_owned(slf.as_super().get().array(slf.py())?.buffer()))
    }

    /// A handle that opens this buffer's memory in another process on this machine
    /// (`devbuf.open_ipc`). Only buffers allocated with `ipc=True` have one (else BufferError).
    /// With `readonly=True` (or for a read-only buffer) it opens read-only; host memory is then
    /// sealed so that no other process can map it writable again, while this one keeps writing.
    #[pyo3(signature = (*, readonly = false))]
    fn ipc_handle(
        slf: &Bound<'_, Self>,
        readonly: bool,
    ) -> PyResult<crate::buffer::ipc::PyIpcHandle> {
        crate::buffer::ipc::export(slf.as_super().get(), slf.py(), readonly)
    }

    /// A typed view: `dtype` anything `numpy.dtype()` takes (np.float32, "float32", "<f4"),
    /// `shape` (an int or a sequence), `strides` and `offset` in bytes, as in NumPy. Without
    /// `shape` the view holds every element after `offset`, and the bytes there must be a whole
    /// number of elements (as `numpy.frombuffer` requires): a 10-byte buffer viewed as float32 is
    /// a ValueError, while `shape=2` views 8 of its bytes.
    #[pyo3(signature = (dtype, shape = None, strides = None, offset = 0))]
    fn view(
        slf: &Bound<'_, Self>,
        dtype: &Bound<'_, PyAny>,
        shape: Option<&Bound<'_, PyAny>>,
        strides: Option<Vec<isize>>,
        offset: isize,
    ) -> PyResult<Py<PyArray>> {
        let py = slf.py();
        let this = slf.as_super().get();
        let dtype = crate::values::dtypes::from_python(dtype)?;
        let array = this.array(py)?;
        let buffer = array.buffer();
        let offset = usize::try_from(offset).map_err(|_| {
            PyValueError::new_err(format!(
                "offset: {offset} is negative; it counts bytes from the buffer's start"
            ))
        })?;
        let shape = match shape {
            Some(length) if length.is_instance_of::<PyInt>() => {
                vec![length.extract::<usize>().map_err(|_| {
                    PyValueError::new_err(format!("shape: {length} is not a length"))
                })?]
            }
            Some(shape) => {
                let extents: Vec<isize> = shape.extract().map_err(|_| {
                    PyTypeError::new_err(format!(
                        "shape: expected an int or a sequence of ints, got {}",
                        shape
                            .get_type()
                            .name()
                            .map_or_else(|_| "?".into(), |n| n.to_string())
                    ))
                })?;
                extents
                    .iter()
                    .map(|&n| {
                        usize::try_from(n).map_err(|_| {
                            PyValueError::new_err(format!(
                                "shape: {extents:?} has the negative extent {n}"
                            ))
                        })
                    })
                    .collect::<PyResult<_>>()?
            }
            None => vec![whole_elements(buffer.len(), offset, dtype)?],
        };
        let layout =
            Layout::new(dtype, &shape, strides.as_deref(), offset, array.readonly()).py()?;
        let array = Array::new(buffer.clone(), layout).py()?;
        PyArray::wrap(py, array, this.queue.clone_ref(py))
    }

    /// Sets every byte to `value` (an int, 0-255); with `blocking=False` the fill is only
    /// enqueued. `stream` (a `devbuf.Stream` that reaches the memory) runs it instead of the
    /// buffer's own queue.
    #[pyo3(signature = (value, *, blocking = true, stream = None))]
    fn fill(
        slf: &Bound<'_, Self>,
        value: &Bound<'_, PyAny>,
        blocking: bool,
        stream: Option<StreamArg<'_>>,
    ) -> PyResult<()> {
        let stream = stream.as_deref();
        let value = byte_value(value)?;
        let this = slf.as_super().get();
        let array = this.writable_array(slf.py(), "fill: this buffer is read-only")?;
        let buffer = array.buffer();
        let current = match stream {
            None => crate::objects::current_stream::current_on(
                slf.py(),
                Some(&buffer.device().selector),
            ),
            Some(_) => None,
        };
        if let Some(stream) = stream.or(current.as_ref()) {
            let queue = stream.get().queue()?;
            return slf
                .py()
                .detach(|| {
                    let filled = buffer.enqueue_fill_on(value, queue)?;
                    if blocking {
                        devbuf::ordering::wait_for_event(&filled)
                    } else {
                        Ok(())
                    }
                })
                .py();
        }
        if blocking {
            slf.py().detach(|| buffer.fill(value)).py()
        } else {
            slf.py()
                .detach(|| buffer.enqueue_fill(value).map(drop))
                .py()
        }
    }

    /// Enqueues migrating this shared (managed) memory toward `location` ("device" or "host"),
    /// on `stream` (a `devbuf.Stream` that reaches it) or the buffer's own queue; a hint the
    /// runtime acts on in its own time. ValueError where the backend cannot.
    #[pyo3(signature = (location = "device", *, stream = None))]
    fn prefetch(
        slf: &Bound<'_, Self>,
        location: &str,
        stream: Option<StreamArg<'_>>,
    ) -> PyResult<()> {
        let stream = stream.as_deref();
        let array = slf.as_super().get().array(slf.py())?;
        crate::buffer::hints::prefetch(slf.py(), array.buffer(), location, stream)
    }

    /// Tells the runtime how this shared memory will be used: `advice` is CUDA's name of it
    /// ("set_read_mostly", "unset_read_mostly", "set_preferred_location",
    /// "unset_preferred_location", "set_accessed_by", "unset_accessed_by", with `location`
    /// "device" or "host" where it names one) or, for SYCL's `mem_advise`, the backend's number.
    #[pyo3(signature = (advice, location = None))]
    fn advise(
        slf: &Bound<'_, Self>,
        advice: &Bound<'_, PyAny>,
        location: Option<&str>,
    ) -> PyResult<()> {
        let array = slf.as_super().get().array(slf.py())?;
        crate::buffer::hints::advise(slf.py(), array.buffer(), advice, location)
    }

    /// Blocks until all pending work on this memory (from any queue) has completed, and once the
    /// memory was handed out, other libraries' work on the queues devbuf knows of.
    fn synchronize(slf: &Bound<'_, Self>) -> PyResult<()> {
        let array = slf.as_super().get().array(slf.py())?;
        let buffer = array.buffer();
        slf.py().detach(|| buffer.synchronize()).py()
    }

    /// `buffer[start:stop]`: a sub-buffer sharing ownership of the allocation. Any other index
    /// is an Array's (a Buffer is a one-dimensional `uint8` array): `buffer[8]` a 0-d view of
    /// one byte, `buffer[::2]` a strided `uint8` view.
    fn __getitem__(slf: &Bound<'_, Self>, key: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        let py = slf.py();
        let contiguous = key
            .cast::<PySlice>()
            .ok()
            .filter(|slice| slice.getattr("step").is_ok_and(|step| step.is_none()));
        let Some(slice) = contiguous else {
            return crate::array::views::getitem(slf.as_super(), key).map(Py::into_any);
        };
        let this = slf.as_super().get();
        let array = this.array(py)?;
        let buffer = array.buffer();
        let indices = slice.indices(buffer.len() as isize)?;
        let (start, stop) = (
            indices.start as usize,
            indices.stop.max(indices.start) as usize,
        );
        let part = buffer.slice(start..stop).py()?;
        let part = PyBuffer::wrap_readonly(py, part, this.queue.clone_ref(py), array.readonly())?;
        part.bind(py)
            .as_super()
            .get()
            .inherit_readonly_origin(py, this);
        Ok(part.into_any())
    }

    fn __repr__(slf: &Bound<'_, Self>) -> String {
        let Ok(array) = slf.as_super().get().array(slf.py()) else {
            return "<devbuf.Buffer (closed)>".into();
        };
        let buffer = array.buffer();
        format!(
            "<devbuf.Buffer {} bytes of {} memory at {:#x} on {:?}{}{}>",
            buffer.len(),
            buffer.kind(),
            buffer.ptr() as usize,
            buffer.device().selector,
            if is_owned(buffer) { "" } else { " (foreign)" },
            if array.readonly() { " read-only" } else { "" }
        )
    }
}

/// How many `dtype` elements the `nbytes` of a buffer hold after `offset`, when they hold a whole
/// number of them: a view never drops a tail of bytes unasked.
fn whole_elements(nbytes: usize, offset: usize, dtype: DType) -> PyResult<usize> {
    let Some(available) = nbytes.checked_sub(offset) else {
        return Err(PyValueError::new_err(format!(
            "offset: {offset} is past the end of the buffer's {nbytes} bytes"
        )));
    };
    if !available.is_multiple_of(dtype.itemsize()) {
        return Err(PyValueError::new_err(format!(
            "shape: the buffer's {available} bytes after offset {offset} are not a whole number of \
             {dtype} elements ({} bytes each); pass shape= to view fewer",
            dtype.itemsize()
        )));
    }
    Ok(available / dtype.itemsize())
}

/// `fill`'s value as a byte: an int outside 0-255 is a ValueError naming the range, anything
/// else a TypeError.
fn byte_value(value: &Bound<'_, PyAny>) -> PyResult<u8> {
    if let Ok(byte) = value.extract::<u8>() {
        return Ok(byte);
    }
    if value.is_instance_of::<PyInt>() {
        return Err(PyValueError::new_err(format!(
            "value: {value} is out of range: fill sets bytes, 0 to 255"
        )));
    }
    Err(PyTypeError::new_err(format!(
        "value: expected an int from 0 to 255, got {}",
        value.get_type()
    )))
}

/// Whether devbuf allocated the memory: its queue's own allocation, or a shareable one.
fn is_owned(buffer: &Buffer) -> bool {
    buffer.is_owned() || devbuf::ipc::is_shareable(buffer)
}

/// `devbuf.alloc`, its arguments read ([`Alloc`]).
pub(crate) fn alloc(
    py: Python<'_>,
    nbytes: usize,
    kind: &str,
    device: Option<&Bound<'_, PyAny>>,
    ipc: bool,
    mr: Option<&Bound<'_, PyAny>>,
    stream: Option<&Bound<'_, PyQueue>>,
) -> PyResult<Py<PyBuffer>> {
    let current;
    let stream = match stream {
        None if mr.is_none() && !ipc && crate::objects::current_stream::any() => {
            let device = device.map(|d| resolve_queue(py, Some(d))).transpose()?;
            let selector = device
                .as_ref()
                .map(|queue| queue.get().held().device().selector.as_str());
            current = crate::objects::current_stream::current_on(py, selector);
            current.as_ref()
        }
        stream => stream,
    };
    if let Some(stream) = stream {
        let on = &stream.get().queue()?.device().selector;
        if mr.is_some() {
            return Err(PyValueError::new_err(
                "stream: a memory resource allocates on its own queue; leave out mr= or stream=",
            ));
        }
        if let Some(device) = device {
            let asked = resolve_queue(py, Some(device))?;
            let asked = &asked.get().queue()?.device().selector;
            if asked != on {
                return Err(PyValueError::new_err(format!(
                    "device: {asked:?} is not the device of stream, a stream of {on:?}"
                )));
            }
        }
        return PyQueue::alloc(stream, nbytes, kind, ipc);
    }
    if let Some(mr) = mr {
        let mr = crate::mr::memory_resource::resource_arg(mr)?;
        if ipc {
            return Err(PyValueError::new_err(
                "ipc: memory for sharing is allocated by the device itself, not by a memory \
                 resource; leave out mr= or ipc=True",
            ));
        }
        if let Some(device) = device {
            let asked = resolve_queue(py, Some(device))?;
            let asked = &asked.get().queue()?.device().selector;
            let own = crate::mr::memory_resource::PyMemoryResource::selector(&mr)?;
            if *asked != own {
                return Err(PyValueError::new_err(format!(
                    "device: {asked:?} is not the device of mr, a {} on {own:?}; allocate from a \
                     resource of {asked:?}, or leave device out",
                    mr.get_type().name()?
                )));
            }
        }
        return crate::mr::memory_resource::PyMemoryResource::alloc(&mr, nbytes, kind);
    }
    let queue = resolve_queue(py, device)?;
    PyQueue::alloc_on(py, queue, nbytes, kind, ipc)
}

const ALLOC_DOC: &CStr =
    c"alloc(nbytes, kind=\"shared\", device=None, *, ipc=False, mr=None, stream=None)
--

Allocates `nbytes` of `kind` memory (\"host\", \"device\" or \"shared\") on `device` (a selector,
a Device, a Stream, or None for the default device), or on `stream` (a `devbuf.Stream`: a
stream-ordered allocation is then that stream's work, and the memory goes back on that stream
when freed); `ipc=True` makes it shareable with other
processes (see `Queue.alloc`); `mr=` allocates from that memory resource, on its own device:
a `device` other than the resource's is a ValueError naming both, and so is `ipc=True` (memory
for sharing comes from the device, not from a resource).";

static ALLOC: Signature<6> = Signature::new(
    "alloc()",
    ["nbytes", "kind", "device", "ipc", "mr", "stream"],
    3,
    1,
);

/// Adds `devbuf.alloc` to the module: the hottest call of the Python layer, through
/// `vectorcall`'s way in.
pub(crate) fn add_alloc(module: &Bound<'_, PyModule>) -> PyResult<()> {
    crate::vectorcall::add_function::<Alloc>(module, c"alloc", ALLOC_DOC)
}

/// `devbuf.alloc`'s body.
struct Alloc;

impl Body for Alloc {
    unsafe fn call(
        py: Python<'_>,
        _module: *mut ffi::PyObject,
        args: *const *mut ffi::PyObject,
        nargs: ffi::Py_ssize_t,
        kwnames: *mut ffi::PyObject,
    ) -> PyResult<*mut ffi::PyObject> {
        // SAFETY: CPython's arguments, live for the call.
        let [nbytes, kind, device, ipc, mr, stream] =
            unsafe { ALLOC.parse(py, args, nargs, kwnames)? };
        let Some(nbytes) = nbytes else {
            // `parse` checked the required one.
            return Err(PyTypeError::new_err("alloc() missing nbytes"));
        };
        let kinds = KindNames::get(py);
        // The common call (a plain int, a literal kind, no ipc, mr or stream): straight to the
        // queue. Every other call takes `alloc_general`, out of line: this call's hot code shares
        // the instruction cache with CPython's on every call (see BENCHMARKS.md).
        if ipc.is_none()
            && mr.is_none()
            && stream.is_none()
            && !crate::objects::current_stream::any()
            && let Some(nbytes) = exact_int(nbytes)
            && let Some(kind) = kind.map_or(Some("shared"), |kind| kinds.kind(kind))
        {
            let queue = resolve_queue(py, device.filter(|device| !device.is_none()).as_deref())?;
            return Ok(PyQueue::alloc_on(py, queue, nbytes, kind, false)?.into_ptr());
        }
        alloc_general(py, kinds, nbytes, [kind, device, ipc, mr, stream])
    }
}

/// [`Alloc`] for every call but the common one: each argument extracted in turn, the error
/// naming it.
#[cold]
#[inline(never)]
fn alloc_general<'py>(
    py: Python<'py>,
    kinds: &KindNames,
    nbytes: Borrowed<'_, 'py, PyAny>,
    [kind, device, ipc, mr, stream]: Arguments<'_, 'py, 5>,
) -> PyResult<*mut ffi::PyObject> {
    let nbytes: usize = match exact_int(nbytes) {
        Some(nbytes) => nbytes,
        None => byte_count(&nbytes)?,
    };
    let kind: &str = match &kind {
        Some(kind) => match kinds.kind(*kind) {
            Some(kind) => kind,
            None => kind
                .extract()
                .map_err(|_| wrong_type(kind, "kind", "\"host\", \"device\" or \"shared\""))?,
        },
        None => "shared",
    };
    let device = device.filter(|device| !device.is_none());
    let ipc = match &ipc {
        Some(ipc) => ipc
            .extract()
            .map_err(|_| wrong_type(ipc, "ipc", "True or False"))?,
        None => false,
    };
    let mr = mr.filter(|mr| !mr.is_none());
    let stream = match &stream {
        Some(stream) if !stream.is_none() => {
            Some(crate::objects::streams::stream_argument(stream)?)
        }
        _ => None,
    };
    let made = alloc(
        py,
        nbytes,
        kind,
        device.as_deref(),
        ipc,
        mr.as_deref(),
        stream.as_ref(),
    )?;
    Ok(made.into_ptr())
}

/// `alloc`'s `nbytes` when it is not a plain non-negative int: an int index (NumPy's) is taken;
/// a negative or huge one is a ValueError and anything else a TypeError, each naming `nbytes`.
fn byte_count(nbytes: &Bound<'_, PyAny>) -> PyResult<usize> {
    if let Ok(n) = nbytes.extract::<usize>() {
        return Ok(n);
    }
    match nbytes.extract::<i128>() {
        Ok(n) if n < 0 => Err(PyValueError::new_err(format!(
            "nbytes: {n} is negative; alloc takes a number of bytes, 0 or more"
        ))),
        Ok(n) => Err(PyValueError::new_err(format!(
            "nbytes: {n} bytes is more than any device's address space"
        ))),
        Err(_) => Err(wrong_type(nbytes, "nbytes", "an int number of bytes")),
    }
}

/// The memory kinds' names, interned, that `devbuf.alloc` compares its `kind` with, made once.
struct KindNames([(Py<PyString>, &'static str); 3]);

impl KindNames {
    fn get(py: Python<'_>) -> &'static KindNames {
        static NAMES: PyOnceLock<KindNames> = PyOnceLock::new();
        NAMES.get_or_init(py, || {
            KindNames(
                ["host", "device", "shared"]
                    .map(|kind| (PyString::intern(py, kind).unbind(), kind)),
            )
        })
    }

    /// The memory kind's text when `kind` is the very object of one of its interned names, as a
    /// literal `"host"` at a call site is (CPython interns identifier-like string constants): no
    /// UTF-8 conversion; any other str is extracted and goes through the kind's own
    /// parsing.
    fn kind(&self, kind: Borrowed<'_, '_, PyAny>) -> Option<&'static str> {
        self.0
            .iter()
            .find(|(name, _)| name.as_ptr() == kind.as_ptr())
            .map(|(_, text)| *text)
    }
}
