//! The Python methods of `Array`: plain attributes here, each protocol's export and import
//! through its own module (what an Array holds is `objects::array`). Nothing in the crate
//! depends on this module.

use devbuf::{Array, Layout};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyCapsule, PyDict, PyTuple};
use pyo3::{PyTraverseError, PyVisit};

use crate::errors::IntoPyResult;
use crate::objects::array::{PyArray, PyBuffer};
use crate::objects::device::PyDevice;
use crate::objects::python_owner::visit_owner;
use crate::objects::queue::PyQueue;
use crate::objects::streams::StreamArg;

#[pymethods]
impl PyArray {
    /// The Python object that keeps imported memory alive, for the garbage collector: a cycle
    /// through an import's owner is collected (see `objects::python_owner`).
    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        match self.held().for_traversal() {
            Some(array) => visit_owner(array.buffer(), &visit),
            None => Ok(()),
        }
    }

    /// Breaks a cycle the collector found: lets go of the memory as `close()` does (once no use
    /// is in progress, and never under a consumer that keeps this object).
    fn __clear__(&self) {
        Python::attach(|py| self.held().close(py));
    }

    /// The extent of each dimension.
    #[getter]
    fn shape<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        let array = self.array(py)?;
        let shape = self.cache.shape.get_or_try_init(py, || {
            PyTuple::new(py, array.layout().shape()).map(Bound::unbind)
        })?;
        Ok(shape.bind(py).clone())
    }

    /// The element type, as a `numpy.dtype`: it compares equal to NumPy's dtypes, scalar types
    /// and names (`arr.dtype == np.float32`, `arr.dtype == "float32"`). bfloat16 is
    /// `ml_dtypes.bfloat16`'s dtype where ml_dtypes imports; without it (or without NumPy) the
    /// type's name, "bfloat16".
    #[getter]
    fn dtype(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let dtype = self.array(py)?.layout().dtype();
        crate::values::dtypes::to_python(py, dtype)
    }

    /// The NumPy typestr of the element type ("<f4"...); bfloat16 has none.
    #[getter]
    fn typestr(&self, py: Python<'_>) -> PyResult<&'static str> {
        self.array(py)?.layout().dtype().typestr().py()
    }

    /// The step in bytes between neighbouring elements of each dimension, as NumPy's `strides`.
    #[getter]
    fn strides<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, self.array(py)?.layout().strides())
    }

    /// Byte offset of element 0 from the start of `buffer`.
    #[getter]
    fn offset(&self, py: Python<'_>) -> PyResult<usize> {
        Ok(self.array(py)?.layout().offset())
    }

    /// The number of dimensions.
    #[getter]
    fn ndim(&self, py: Python<'_>) -> PyResult<usize> {
        Ok(self.array(py)?.layout().ndim())
    }

    /// Number of elements.
    #[getter]
    fn size(&self, py: Python<'_>) -> PyResult<usize> {
        Ok(self.array(py)?.layout().size())
    }

    /// Bytes per element.
    #[getter]
    fn itemsize(&self, py: Python<'_>) -> PyResult<usize> {
        Ok(self.array(py)?.layout().dtype().itemsize())
    }

    /// Bytes of the elements (size × itemsize).
    #[getter]
    fn nbytes(&self, py: Python<'_>) -> PyResult<usize> {
        Ok(self.array(py)?.layout().nbytes())
    }

    /// Whether writes through this array are refused (an import of read-only memory).
    #[getter]
    fn readonly(&self, py: Python<'_>) -> PyResult<bool> {
        Ok(self.array(py)?.readonly())
    }

    /// Address of element 0.
    #[getter]
    fn ptr(&self, py: Python<'_>) -> PyResult<usize> {
        Ok(self.array(py)?.data_ptr())
    }

    /// "host", "device", "shared", or "unknown" (foreign memory the runtime cannot classify).
    #[getter]
    fn kind(&self, py: Python<'_>) -> PyResult<&'static str> {
        Ok(self.array(py)?.buffer().kind().as_str())
    }

    /// The device the memory belongs to.
    #[getter]
    fn device(&self, py: Python<'_>) -> Py<PyDevice> {
        self.queue.get().device.clone_ref(py)
    }

    /// The queue that orders work on the memory (its copies, fills and exports).
    #[getter]
    fn queue(&self, py: Python<'_>) -> Py<PyQueue> {
        self.queue.clone_ref(py)
    }

    /// Whether the elements are contiguous in row-major (C) order.
    #[getter]
    fn c_contiguous(&self, py: Python<'_>) -> PyResult<bool> {
        Ok(self.array(py)?.layout().is_c_contiguous())
    }

    /// Whether the elements are contiguous in column-major (Fortran) order.
    #[getter]
    fn f_contiguous(&self, py: Python<'_>) -> PyResult<bool> {
        Ok(self.array(py)?.layout().is_f_contiguous())
    }

    /// Lets go of the memory this object holds, as a file's `close()`: from now on every use of
    /// the object is a ValueError (`closed` says so), and `close()` again does nothing. The
    /// memory itself goes when its last user lets go, never earlier: other arrays and buffers
    /// viewing it, DLPack capsules, pickles in flight. A library that took the memory through the
    /// buffer protocol (NumPy), `__cuda_array_interface__` or `__sycl_usm_array_interface__` (or
    /// the dpctl attributes) keeps this object itself, so there the memory goes with the object. With `stream` (a `devbuf.Stream` of the memory's
    /// device), the free, whenever it comes, waits for the work enqueued on that stream so far,
    /// as `MemoryResource.deallocate(..., stream=)` orders it; without it, for devbuf's recorded
    /// work on the memory, on every stream.
    #[pyo3(signature = (stream = None))]
    fn close(&self, py: Python<'_>, stream: Option<StreamArg<'_>>) -> PyResult<()> {
        let stream = stream.as_deref();
        if self.held().is_closed(py) {
            return Ok(());
        }
        if let Some(stream) = stream {
            let array = self.array(py)?;
            let buffer = array.buffer();
            let queue = stream.get().queue()?;
            let (on, own) = (&queue.device().selector, &buffer.device().selector);
            if on != own {
                return Err(PyValueError::new_err(format!(
                    "stream: a stream of {on:?} cannot order the free of memory on {own:?}"
                )));
            }
            py.detach(|| buffer.release_after_stream(queue)).py()?;
        }
        self.held().close(py);
        Ok(())
    }

    /// Whether `close()` was called.
    #[getter]
    fn closed(&self, py: Python<'_>) -> bool {
        self.held().is_closed(py)
    }

    /// `with devbuf.alloc(...) as buffer:` closes the buffer (or array) at the end of the block.
    fn __enter__<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, Self>> {
        slf.get().array(slf.py())?;
        Ok(slf.clone())
    }

    /// Closes the object (see `close()`); exceptions propagate.
    #[pyo3(signature = (*_exc_info))]
    fn __exit__(&self, py: Python<'_>, _exc_info: &Bound<'_, PyTuple>) -> PyResult<bool> {
        self.close(py, None)?;
        Ok(false)
    }

    /// The memory this array views (the whole buffer, not only the bytes its elements span).
    #[getter]
    fn buffer(&self, py: Python<'_>) -> PyResult<Py<PyBuffer>> {
        let array = self.array(py)?;
        let buffer = PyBuffer::wrap_readonly(
            py,
            array.buffer().clone(),
            self.queue.clone_ref(py),
            array.readonly(),
        )?;
        buffer
            .bind(py)
            .as_super()
            .get()
            .inherit_readonly_origin(py, self);
        Ok(buffer)
    }

    /// Copies `source` (anything `devbuf.asarray` takes: DLPack, SUAI, CAI or buffer-protocol
    /// objects) into this array. An array takes only a source of its own dtype and shape, as
    /// CuPy's `ndarray.set` and NumPy's `copyto(self, source, casting="no")` without broadcasting:
    /// another dtype is a TypeError and another shape a ValueError, each naming both (nothing is
    /// converted, reshaped or broadcast). A Buffer is bytes: it takes the elements of any source
    /// of its size, in C order, a raw copy as CuPy's `MemoryPointer.copy_from` and dpctl.memory's
    /// `copy_from_device` make. Either side may have any layout (a transpose, a strided slice):
    /// only the bytes the elements occupy move, one copy per contiguous run (a memory copy on the
    /// host where both sides are the host's own memory, as host memory and a CPU device's shared
    /// memory are, and the copy is waited for).
    /// With `blocking=False` the copy is only enqueued on this array's queue: it is pending work
    /// that the protocols then report (CAI's `stream`) or wait for. `stream` (a `devbuf.Stream`
    /// that reaches both sides) runs the copy instead: the pending work is then that stream's,
    /// which other streams, host views and exports wait for.
    #[pyo3(signature = (source, *, blocking = true, stream = None))]
    fn copy_from(
        slf: &Bound<'_, Self>,
        source: &Bound<'_, PyAny>,
        blocking: bool,
        stream: Option<StreamArg<'_>>,
    ) -> PyResult<()> {
        let stream = stream.as_deref();
        let py = slf.py();
        let this = slf.get();
        let destination = this.writable_array(py, "copy_from: this array is read-only")?;
        let imported = crate::import::import_object(py, source, false, true)?;
        let source = imported.get().array(py)?;
        let destination = if slf.is_instance_of::<PyBuffer>() {
            bytes_as(&destination, source.layout())?
        } else {
            same_elements(destination.layout(), source.layout())?;
            destination.clone()
        };
        let source: &Array = &source;
        let destination = &destination;
        super::writes::write(
            py,
            destination,
            Some(source),
            stream,
            blocking,
            |queue| match queue {
                None => destination.copy_elements_from(source).map(|()| None),
                Some(queue) => destination
                    .enqueue_copy_elements_from(source, queue)
                    .map(Some),
            },
        )
    }

    /// A view of the elements selected by `key`, NumPy's basic indexing: ints (a dimension goes;
    /// a 0-d array for one element, as CuPy returns), slices with any step, `...` and `None`.
    /// Nothing is copied; there is no fancy or boolean indexing.
    fn __getitem__(slf: &Bound<'_, Self>, key: &Bound<'_, PyAny>) -> PyResult<Py<PyArray>> {
        crate::array::views::getitem(slf, key)
    }

    /// The same elements in `shape` (ints or one sequence; one may be -1): a view where the
    /// strides allow, as NumPy's `reshape`. Where they do not, `copy=None` returns a C-contiguous
    /// copy, `copy=False` is a ValueError; `copy=True` always copies.
    #[pyo3(signature = (*shape, copy = None))]
    fn reshape(
        slf: &Bound<'_, Self>,
        shape: &Bound<'_, PyTuple>,
        copy: Option<bool>,
    ) -> PyResult<Py<PyArray>> {
        crate::array::views::reshape(slf, shape, copy)
    }

    /// The view with the dimensions reversed (`x.transpose()`).
    #[getter(T)]
    fn transposed(slf: &Bound<'_, Self>) -> PyResult<Py<PyArray>> {
        crate::array::views::transpose(slf, &PyTuple::empty(slf.py()))
    }

    /// The view with the dimensions permuted: `axes` (ints or one sequence) names, for each
    /// dimension of the result, the dimension it was; none reverses them.
    #[pyo3(signature = (*axes))]
    fn transpose(slf: &Bound<'_, Self>, axes: &Bound<'_, PyTuple>) -> PyResult<Py<PyArray>> {
        crate::array::views::transpose(slf, axes)
    }

    /// A C-contiguous, writable copy on the same device and of the same kind of memory, as
    /// NumPy's and CuPy's `x.copy()`: only the elements' bytes are copied.
    fn copy(slf: &Bound<'_, Self>) -> PyResult<Py<PyArray>> {
        crate::array::views::compact_copy(slf)
    }

    /// The array on `device` (a selector, a Device or a Stream), the array API's `to_device`:
    /// this very array when it is already there, else a copy in device memory (what
    /// `devbuf.asarray(x, device=device)` returns).
    #[pyo3(signature = (device, /))]
    fn to_device<'py>(
        slf: &Bound<'py, Self>,
        device: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyArray>> {
        crate::import::asarray(slf.py(), slf.as_any(), None, Some(device), true, None)
    }

    /// The bytes of a C-contiguous array, copied to the host (on `stream`, a `devbuf.Stream` that
    /// reaches the memory, when given).
    #[pyo3(signature = (stream = None))]
    fn to_bytes<'py>(
        &self,
        py: Python<'py>,
        stream: Option<StreamArg<'py>>,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let stream = stream.as_deref();
        let bytes = self.contiguous_bytes(py, "to_bytes")?;
        let current = match stream {
            None => crate::objects::current_stream::current_on(py, Some(&bytes.device().selector)),
            Some(_) => None,
        };
        let data = match stream.or(current.as_ref()) {
            None => py.detach(|| bytes.to_vec()).py()?,
            Some(stream) => {
                let queue = stream.get().queue()?;
                let mut data = vec![0; bytes.len()];
                if let Err(err) = py.detach(|| bytes.copy_to_host_on(&mut data, queue)) {
                    // The copy may still be writing into the vector.
                    std::mem::forget(data);
                    return Err(crate::errors::to_py(err));
                }
                data
            }
        };
        Ok(PyBytes::new(py, &data))
    }

    /// The elements copied to the host as a NumPy array, once the copy is done: CuPy's
    /// `ndarray.get(stream=None, out=None)`. `out` is a writable C-contiguous NumPy array of the
    /// same shape and dtype to copy into (it is returned), or another writable bytes-like object
    /// of the same size in bytes (a `bytearray`, as RMM's `copy_to_host` takes); `stream` (a `devbuf.Stream` of the
    /// array's device) runs the copy, by default the array's own queue. Works for every kind of
    /// memory; NumPy's implicit conversion (`np.asarray`) works only for memory the host can read.
    #[pyo3(signature = (stream = None, out = None))]
    fn get<'py>(
        slf: &Bound<'py, Self>,
        stream: Option<StreamArg<'py>>,
        out: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let stream = stream.as_deref();
        crate::array::host_transfer::to_numpy(slf, out, stream)
    }

    /// `get()` under Numba's name, with its argument order: `copy_to_host(out=None, stream=None)`.
    #[pyo3(signature = (out = None, stream = None))]
    fn copy_to_host<'py>(
        slf: &Bound<'py, Self>,
        out: Option<&Bound<'py, PyAny>>,
        stream: Option<StreamArg<'py>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let stream = stream.as_deref();
        crate::array::host_transfer::to_numpy(slf, out, stream)
    }

    /// NumPy's conversion (`np.asarray(arr)`): a view of host-accessible memory; memory the host
    /// cannot read is a TypeError naming `get()`, as CuPy and PyTorch refuse it.
    #[pyo3(signature = (dtype = None, copy = None))]
    fn __array__<'py>(
        slf: &Bound<'py, Self>,
        dtype: Option<&Bound<'py, PyAny>>,
        copy: Option<bool>,
    ) -> PyResult<Bound<'py, PyAny>> {
        crate::array::host_transfer::numpy_view(slf, dtype, copy)
    }

    /// The SYCL USM array interface (version 1), for SYCL memory.
    #[getter]
    fn __sycl_usm_array_interface__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        crate::export::interface_dicts::suai(self, py)
    }

    /// The CUDA array interface (version 3), for CUDA memory.
    #[getter]
    fn __cuda_array_interface__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        crate::export::interface_dicts::cai(self, py)
    }

    /// The `dpctl.SyclQueue` of SYCL memory (dpnp and dpnp.tensor compute on it), where dpctl
    /// imports.
    #[getter]
    fn sycl_queue(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        crate::export::dpctl_attrs::sycl_queue(self, py)
    }

    /// The `dpctl.SyclDevice` of SYCL memory, where dpctl imports.
    #[getter]
    fn sycl_device(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        crate::export::dpctl_attrs::sycl_device(self, py)
    }

    /// The `dpctl.SyclContext` SYCL memory is bound to, where dpctl imports.
    #[getter]
    fn sycl_context(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        crate::export::dpctl_attrs::sycl_context(self, py)
    }

    /// "device", "shared" or "host" for SYCL USM, where dpctl imports.
    #[getter]
    fn usm_type(&self, py: Python<'_>) -> PyResult<&'static str> {
        crate::export::dpctl_attrs::usm_type(self, py)
    }

    /// A `dpnp.tensor.usm_ndarray` viewing SYCL memory, where dpnp is imported.
    #[getter]
    fn __usm_ndarray__(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        crate::export::dpctl_attrs::usm_ndarray(self, py)
    }

    /// `(device type, device id)` of the memory, in DLPack's codes.
    fn __dlpack_device__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        crate::export::dlpack::dlpack_device(self, py)
    }

    // `__dlpack__` is set on the type by `export::dlpack::add_dlpack_method` (a hot path:
    // `vectorcall`'s way in).

    /// DLPack 1.3's C exchange table ("dlpack_exchange_api" capsule).
    #[classattr]
    fn __dlpack_c_exchange_api__(py: Python<'_>) -> PyResult<Py<PyCapsule>> {
        crate::export::dlpack::exchange_api::capsule(py).map(Bound::unbind)
    }

    /// The exchange table under the name of the proposal it came from.
    #[classattr]
    fn __c_dlpack_exchange_api__(py: Python<'_>) -> PyResult<Py<PyCapsule>> {
        crate::export::dlpack::exchange_api::capsule(py).map(Bound::unbind)
    }

    unsafe fn __getbuffer__(
        slf: Bound<'_, Self>,
        view: *mut pyo3::ffi::Py_buffer,
        flags: std::ffi::c_int,
    ) -> PyResult<()> {
        // SAFETY: CPython passes a writable view.
        unsafe { crate::export::buffer_protocol::get_buffer(&slf, view, flags) }
    }

    // No `__releasebuffer__`: there is nothing to free (shape and strides point into the array,
    // which the view keeps alive, anchored), and CPython skips a release slot that is not there.

    /// Pickling (protocol 5: host-accessible memory out-of-band, zero-copy); see `pickle.rs`.
    fn __reduce_ex__<'py>(slf: &Bound<'py, Self>, protocol: i64) -> PyResult<Bound<'py, PyTuple>> {
        crate::array::pickle::reduce_ex(slf, protocol)
    }

    fn __len__(&self, py: Python<'_>) -> PyResult<usize> {
        self.array(py)?
            .layout()
            .shape()
            .first()
            .copied()
            .ok_or_else(|| PyTypeError::new_err("len() of a 0-d array"))
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        let Ok(array) = self.array(py) else {
            return "<devbuf.Array (closed)>".into();
        };
        let device = array.buffer().device();
        format!(
            "<devbuf.Array shape={} dtype={} kind={} device={:?}{}>",
            python_tuple(array.layout().shape()),
            array.layout().dtype(),
            array.buffer().kind(),
            device.selector,
            if array.readonly() { " read-only" } else { "" }
        )
    }
}

/// Refuses a copy between arrays of different dtypes (TypeError) or shapes (ValueError).
fn same_elements(destination: &Layout, source: &Layout) -> PyResult<()> {
    if source.dtype() != destination.dtype() {
        return Err(PyTypeError::new_err(format!(
            "source: cannot copy {} elements into a {} array: copy_from converts no types \
             (convert the source first)",
            source.dtype(),
            destination.dtype()
        )));
    }
    if source.shape() != destination.shape() {
        return Err(PyValueError::new_err(format!(
            "source: shape {} does not match this array's shape {}: copy_from neither reshapes \
             nor broadcasts",
            python_tuple(source.shape()),
            python_tuple(destination.shape())
        )));
    }
    Ok(())
}

/// A Buffer's bytes seen as `source`'s elements in C order, for a raw copy of them: the byte
/// counts must agree.
fn bytes_as(bytes: &Array, source: &Layout) -> PyResult<Array> {
    let buffer = bytes.buffer();
    if buffer.len() != source.nbytes() {
        return Err(PyValueError::new_err(format!(
            "source: {} bytes cannot be copied into this buffer of nbytes={}",
            source.nbytes(),
            buffer.len()
        )));
    }
    let layout = Layout::contiguous(source.dtype(), source.shape(), 0).py()?;
    Array::new(buffer.clone(), layout).py()
}

/// `(2, 3)`, `(5,)`, `()`: a shape as Python prints it.
fn python_tuple(values: &[usize]) -> String {
    match values {
        [one] => format!("({one},)"),
        _ => format!(
            "({})",
            values
                .iter()
                .map(usize::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}
