//! The Python methods of `Array`: plain attributes here, each protocol's export and import
//! through its own module (what an Array holds is `objects::array`). Nothing in the crate
//! depends on this module.

use devbuf::Layout;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyCapsule, PyDict, PyTuple};

use crate::errors::IntoPyResult;
use crate::objects::array::{PyArray, PyBuffer};
use crate::objects::device::PyDevice;
use crate::objects::queue::PyQueue;

#[pymethods]
impl PyArray {
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
        crate::dtypes::to_python(py, dtype)
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
    fn close(&self, py: Python<'_>, stream: Option<&Bound<'_, PyQueue>>) -> PyResult<()> {
        if self.held().is_closed(py) {
            return Ok(());
        }
        if let Some(stream) = stream {
            let array = self.array(py)?;
            let buffer = array.buffer();
            let queue = &stream.get().queue;
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
        PyBuffer::wrap_readonly(
            py,
            array.buffer().clone(),
            self.queue.clone_ref(py),
            array.readonly(),
        )
    }

    /// Copies `source` (anything `devbuf.asarray` takes: DLPack, SUAI, CAI or buffer-protocol
    /// objects) into this array. An array takes only a source of its own dtype and shape, as
    /// CuPy's `ndarray.set` and NumPy's `copyto(self, source, casting="no")` without broadcasting:
    /// another dtype is a TypeError and another shape a ValueError, each naming both (nothing is
    /// converted, reshaped or broadcast). A Buffer is bytes: it takes the bytes of any source of
    /// its size, a raw copy as CuPy's `MemoryPointer.copy_from` and dpctl.memory's
    /// `copy_from_device` make. Both must be C-contiguous.
    /// With `blocking=False` the copy is only enqueued on this array's queue: it is pending work
    /// that the protocols then report (CAI's `stream`) or wait for. `stream` (a `devbuf.Stream`
    /// that reaches both sides) runs the copy instead: the pending work is then that stream's,
    /// which other streams, host views and exports wait for.
    #[pyo3(signature = (source, *, blocking = true, stream = None))]
    fn copy_from(
        slf: &Bound<'_, Self>,
        source: &Bound<'_, PyAny>,
        blocking: bool,
        stream: Option<&Bound<'_, PyQueue>>,
    ) -> PyResult<()> {
        let py = slf.py();
        let this = slf.get();
        if this.array(py)?.readonly() {
            return Err(PyValueError::new_err("copy_from: this array is read-only"));
        }
        let imported = crate::import::import_object(py, source, false, true)?;
        if !slf.is_instance_of::<PyBuffer>() {
            same_elements(this.array(py)?.layout(), imported.get().array(py)?.layout())?;
        }
        let source = imported.get().contiguous_bytes(py, "copy_from's source")?;
        let destination = this.contiguous_bytes(py, "copy_from")?;
        match (stream, blocking) {
            (None, true) => py.detach(|| destination.copy_from(&source)).py(),
            (None, false) => {
                let queue = destination.queue().clone();
                py.detach(|| destination.enqueue_copy_from(&source, &queue).map(drop))
                    .py()
            }
            (Some(stream), blocking) => {
                let queue = &stream.get().queue;
                py.detach(|| {
                    let copied = destination.enqueue_copy_from(&source, queue)?;
                    if blocking { copied.wait() } else { Ok(()) }
                })
                .py()
            }
        }
    }

    /// The bytes of a C-contiguous array, copied to the host (on `stream`, a `devbuf.Stream` that
    /// reaches the memory, when given).
    #[pyo3(signature = (stream = None))]
    fn to_bytes<'py>(
        &self,
        py: Python<'py>,
        stream: Option<&Bound<'py, PyQueue>>,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let bytes = self.contiguous_bytes(py, "to_bytes")?;
        let data = match stream {
            None => py.detach(|| bytes.to_vec()).py()?,
            Some(stream) => {
                let queue = &stream.get().queue;
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
    /// same shape and dtype to copy into (it is returned); `stream` (a `devbuf.Stream` of the
    /// array's device) runs the copy, by default the array's own queue. Works for every kind of
    /// memory; NumPy's implicit conversion (`np.asarray`) works only for memory the host can read.
    #[pyo3(signature = (stream = None, out = None))]
    fn get<'py>(
        slf: &Bound<'py, Self>,
        stream: Option<&Bound<'py, PyQueue>>,
        out: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        crate::host_transfer::to_numpy(slf, out, stream)
    }

    /// `get()` under Numba's name, with its argument order: `copy_to_host(out=None, stream=None)`.
    #[pyo3(signature = (out = None, stream = None))]
    fn copy_to_host<'py>(
        slf: &Bound<'py, Self>,
        out: Option<&Bound<'py, PyAny>>,
        stream: Option<&Bound<'py, PyQueue>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        crate::host_transfer::to_numpy(slf, out, stream)
    }

    /// NumPy's conversion (`np.asarray(arr)`): a view of host-accessible memory; memory the host
    /// cannot read is a TypeError naming `get()`, as CuPy and PyTorch refuse it.
    #[pyo3(signature = (dtype = None, copy = None))]
    fn __array__<'py>(
        slf: &Bound<'py, Self>,
        dtype: Option<&Bound<'py, PyAny>>,
        copy: Option<bool>,
    ) -> PyResult<Bound<'py, PyAny>> {
        crate::host_transfer::numpy_view(slf, dtype, copy)
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

    // `__dlpack__` is installed on the type by `export::dlpack_vectorcall` (hand-written).

    /// DLPack 1.3's C exchange table ("dlpack_exchange_api" capsule).
    #[classattr]
    fn __dlpack_c_exchange_api__(py: Python<'_>) -> PyResult<Py<PyCapsule>> {
        crate::export::dlpack_exchange_api::capsule(py).map(Bound::unbind)
    }

    /// The exchange table under the name of the proposal it came from.
    #[classattr]
    fn __c_dlpack_exchange_api__(py: Python<'_>) -> PyResult<Py<PyCapsule>> {
        crate::export::dlpack_exchange_api::capsule(py).map(Bound::unbind)
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
        crate::pickle::reduce_ex(slf, protocol)
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
