//! `Array` (a typed, strided view) and `Buffer` (its byte-array subclass): the objects every
//! protocol exports. This file holds what they hold; their Python methods are in
//! `crate::array` and `crate::buffer`, each protocol's export in `export`.

use std::sync::OnceLock;

use devbuf::dlpack::DlpackTemplate;
use devbuf::{Array, Buffer};
use pyo3::exceptions::{PyBufferError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyTuple, PyType};

use crate::errors::IntoPyResult;
use crate::gil_as_lock::{Empty, HeldArray, LazyBox, OpenArray, Refusal};
use crate::objects::queue::PyQueue;

/// What the protocol getters build once and hand out copies of.
pub(crate) struct ExportCache {
    pub(crate) suai: PyOnceLock<Py<PyDict>>,
    pub(crate) cai: PyOnceLock<Py<PyDict>>,
    pub(crate) dlpack_device: PyOnceLock<Py<PyTuple>>,
    pub(crate) shape: PyOnceLock<Py<PyTuple>>,
    /// What exporting through DLPack needs (see `PyArray::dlpack`).
    dlpack: OnceLock<DlpackExport>,
}

impl Empty for ExportCache {
    fn empty() -> ExportCache {
        ExportCache {
            suai: PyOnceLock::new(),
            cai: PyOnceLock::new(),
            dlpack_device: PyOnceLock::new(),
            shape: PyOnceLock::new(),
            dlpack: OnceLock::new(),
        }
    }
}

impl<T> Empty for PyOnceLock<T> {
    fn empty() -> PyOnceLock<T> {
        PyOnceLock::new()
    }
}

/// What a DLPack export of an array needs, prepared once per array.
pub(crate) struct DlpackExport {
    /// The array on its own device, or why DLPack cannot describe it (a stride that is not a
    /// whole number of elements, a byte-swapped dtype).
    pub(crate) template: Result<DlpackTemplate, String>,
    /// Why a zero-copy export to its own device is refused, if it is.
    pub(crate) refusal: Option<String>,
    /// Whether the memory's backend orders a zero-copy export to its own device for a consumer
    /// that passes no stream (`Interop::dlpack_orders_streamless_export`); where not, such an
    /// export takes the generic rule without asking the backend.
    pub(crate) streamless_rule: bool,
}

impl DlpackExport {
    /// The template of a zero-copy export to the array's own device, or why there is none (a
    /// plain `&str`: the exchange table's fill is a hot path, and builds a BufferError only when
    /// it fails).
    pub(crate) fn own_device_template(&self) -> Result<&DlpackTemplate, &str> {
        match (&self.refusal, &self.template) {
            (None, Ok(template)) => Ok(template),
            (Some(refusal), _) => Err(refusal),
            (None, Err(reason)) => Err(reason),
        }
    }
}

/// An array as dpctl memory, and how to make dpnp.tensor arrays of it (see `export::dpctl_attrs`).
pub(crate) struct DpctlView {
    pub(crate) memory: Py<PyAny>,
    /// `usm_ndarray`, its positional and keyword arguments: made on the first `__usm_ndarray__`
    /// (dpnp.tensor asks twice per import, and the constructor's arguments never change).
    pub(crate) usm_ndarray: PyOnceLock<(Py<PyAny>, Py<PyTuple>, Py<PyDict>)>,
}

/// A typed, strided view of host, device or shared memory: a `Buffer` seen through a dtype, shape,
/// strides and offset (in bytes, as NumPy's). Made by `Buffer.view`, `devbuf.asarray` and
/// `devbuf.from_dlpack`; exported through every protocol its memory supports
/// (`__dlpack__`, `__cuda_array_interface__`, `__sycl_usm_array_interface__`, the buffer
/// protocol), and a missing attribute where the memory cannot honour one.
#[pyclass(frozen, subclass, module = "devbuf", name = "Array")]
pub struct PyArray {
    /// Its memory and layout, until `close()` lets go of them (see `crate::gil_as_lock::HeldArray`).
    held: HeldArray,
    pub(crate) queue: Py<PyQueue>,
    /// What exports build once, DLPack's preparation included.
    pub(crate) cache: LazyBox<ExportCache>,
    /// This array as dpctl memory, behind its dpctl attributes (see `export::dpctl_attrs`); `None`
    /// where dpctl cannot view it.
    pub(crate) dpctl_view: LazyBox<PyOnceLock<Option<Box<DpctlView>>>>,
    /// Who made an imported array read-only, for the errors of writes through it; views of it
    /// inherit it. Held inline, not boxed: dpctl marks every SUAI export read-only, so most
    /// foreign SUAI imports set it, and a box cost each of them an allocation and a free.
    readonly_origin: OnceLock<ReadonlyOrigin>,
}

/// The producer whose flag made an imported array read-only, and the protocol that carried it:
/// kept as is and put into words only when a write is refused (dpctl's memory says read-only on
/// every SUAI export, and imports are hot paths).
pub(crate) struct ReadonlyOrigin {
    pub(crate) producer: Py<PyType>,
    pub(crate) through: &'static str,
}

impl PyArray {
    pub(crate) fn new(array: Array, queue: Py<PyQueue>) -> PyArray {
        PyArray {
            held: HeldArray::new(array),
            queue,
            cache: LazyBox::new(),
            dpctl_view: LazyBox::new(),
            readonly_origin: OnceLock::new(),
        }
    }

    /// Says who made this array read-only (the first word stays).
    pub(crate) fn set_readonly_origin(&self, origin: ReadonlyOrigin) {
        let _ = self.readonly_origin.set(origin);
    }

    /// This array with `parent`'s read-only origin, for a view of it.
    pub(crate) fn inherit_readonly_origin(&self, py: Python<'_>, parent: &PyArray) {
        if let Some(origin) = parent.readonly_origin.get() {
            self.set_readonly_origin(ReadonlyOrigin {
                producer: origin.producer.clone_ref(py),
                through: origin.through,
            });
        }
    }

    /// This object's array, open for a write; a read-only one is a ValueError that starts with
    /// `refusal` ("fill: this array is read-only") and says why.
    pub(crate) fn writable_array<'a>(
        &'a self,
        py: Python<'a>,
        refusal: &str,
    ) -> PyResult<OpenArray<'a>> {
        let array = self.array(py)?;
        if array.readonly() {
            return Err(PyValueError::new_err(format!(
                "{refusal}: {}",
                self.readonly_reason(py, &array)
            )));
        }
        Ok(array)
    }

    /// Why writes through `array` (this object's, open and read-only) are refused.
    fn readonly_reason(&self, py: Python<'_>, array: &Array) -> String {
        if array.buffer().is_read_only() {
            return "its memory is mapped for reading only (an IPC handle opened read-only)".into();
        }
        let Some(origin) = self.readonly_origin.get() else {
            return "it is a read-only view".into();
        };
        let producer = origin.producer.bind(py).fully_qualified_name();
        format!(
            "{} marked it read-only through {}; devbuf keeps the producer's flag (import with \
             copy=True for a writable copy)",
            producer.map_or_else(|_| "its producer".into(), |name| name.to_string()),
            origin.through
        )
    }

    pub(crate) fn wrap(py: Python<'_>, array: Array, queue: Py<PyQueue>) -> PyResult<Py<PyArray>> {
        let owned = array.buffer().is_owned();
        let object = Py::new(py, PyArray::new(array, queue))?;
        if owned {
            untrack(object.as_any());
        }
        Ok(object)
    }

    /// The array, for one use: a ValueError once the object is closed. Every use of the memory
    /// goes through here (one flag read and a count; the count keeps `close()` from letting go of
    /// the array under a use in progress).
    #[inline]
    pub(crate) fn array<'a>(&'a self, py: Python<'a>) -> PyResult<OpenArray<'a>> {
        self.held.open(py)
    }

    pub(crate) fn held(&self) -> &HeldArray {
        &self.held
    }

    /// Puts `array` in place of this object's array (a Buffer's `resize`) and returns the old one
    /// (drop it after leaving every borrow of the object): see [`HeldArray::replace`] for when it
    /// is refused. What the exports built of the old array goes with it.
    pub(crate) fn replace_array(&self, py: Python<'_>, array: Array) -> Result<Array, Refusal> {
        let old = self.held.replace(py, array)?;
        // SAFETY: the GIL is held, and nothing uses the array, so nothing borrows its caches
        // (every borrow is made under a use). The dpctl view is not reset: it is made only for a
        // consumer that keeps this object, which `replace` refused.
        unsafe { self.cache.reset() };
        Ok(old)
    }

    /// What exporting `array` (this object's, open) through DLPack needs (prepared once: exports
    /// are hot paths).
    pub(crate) fn dlpack(&self, array: &Array) -> &DlpackExport {
        self.cache.dlpack.get_or_init(|| {
            let buffer = array.buffer();
            let device = buffer.queue().interop().dlpack_device(buffer.kind());
            DlpackExport {
                template: DlpackTemplate::new(array, device).map_err(|err| err.to_string()),
                refusal: devbuf::dlpack::pointer_refusal(device)
                    .map(String::from)
                    .or_else(|| buffer.queue().interop().dlpack_export_refusal()),
                streamless_rule: buffer
                    .queue()
                    .interop()
                    .dlpack_orders_streamless_export(device),
            }
        })
    }

    /// The bytes the elements occupy, when they are C-contiguous.
    pub(crate) fn contiguous_bytes(&self, py: Python<'_>, what: &str) -> PyResult<Buffer> {
        let array = self.array(py)?;
        let layout = array.layout();
        if !layout.is_c_contiguous() {
            return Err(PyBufferError::new_err(format!(
                "{what} needs a C-contiguous array; this one has byte strides {:?}",
                layout.strides()
            )));
        }
        array
            .buffer()
            .slice(layout.offset()..layout.offset() + layout.nbytes())
            .py()
    }
}

/// Bytes on a device with an owner: devbuf's allocation, or foreign memory kept alive for as long
/// as any view of it. A Buffer is also a one-dimensional `uint8` Array, so it exports every
/// protocol its memory supports.
#[pyclass(frozen, extends = PyArray, module = "devbuf", name = "Buffer")]
pub struct PyBuffer {}

impl PyBuffer {
    /// The buffer as a writable Buffer object: the bytes view as `Array::bytes` makes it, with
    /// no further copy of it on the way into the object (the path of every allocation).
    pub(crate) fn wrap(
        py: Python<'_>,
        buffer: Buffer,
        queue: Py<PyQueue>,
    ) -> PyResult<Py<PyBuffer>> {
        Self::create(py, Array::bytes(buffer), queue)
    }

    pub(crate) fn wrap_readonly(
        py: Python<'_>,
        buffer: Buffer,
        queue: Py<PyQueue>,
        readonly: bool,
    ) -> PyResult<Py<PyBuffer>> {
        Self::create(py, Array::bytes(buffer).into_readonly(readonly), queue)
    }

    fn create(py: Python<'_>, bytes: Array, queue: Py<PyQueue>) -> PyResult<Py<PyBuffer>> {
        let owned = bytes.buffer().is_owned();
        let object = Py::new(
            py,
            PyClassInitializer::from(PyArray::new(bytes, queue)).add_subclass(PyBuffer {}),
        )?;
        if owned {
            untrack(object.as_any());
        }
        Ok(object)
    }
}

/// Takes a new array of devbuf's own memory off the garbage collector's list: it holds no Python
/// object that could close a cycle (only imports do: `python_owner`), so collections need not
/// visit it, as CPython leaves tuples of atoms untracked.
fn untrack(object: &Py<PyAny>) {
    // SAFETY: a live object of a GC type (Array's `__traverse__`), untracked once, before any
    // other code saw it; its deallocation untracks only what is still tracked.
    unsafe { pyo3::ffi::PyObject_GC_UnTrack(object.as_ptr().cast()) };
}
