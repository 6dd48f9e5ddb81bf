//! What a `Stream` (an ordered stream of work on one device and context; `Queue` is its earlier
//! name) holds, the queue each device shares, and the capsules that carry a queue's runtime handle
//! to other libraries. Its Python methods are in `crate::stream`.

use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use devbuf::dlpark::ffi::DLDevice;
use devbuf::{ExportedHandle, Queue};
use parking_lot::Mutex;
use pyo3::exceptions::PyValueError;
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyCapsule;

use crate::errors::IntoPyResult;
use crate::objects::device::PyDevice;

/// An ordered stream of work on one device and context: a CUDA stream, an in-order SYCL queue.
/// `devbuf.Queue` is the same class under its earlier name.
#[pyclass(frozen, module = "devbuf", name = "Stream")]
pub struct PyQueue {
    /// Read through [`PyQueue::queue`], which refuses a closed stream.
    inner: Arc<dyn Queue>,
    /// Set by `Stream.close()`: every later use of the stream is refused.
    closed: AtomicBool,
    pub(crate) device: Py<PyDevice>,
    /// This queue as a `dpctl.SyclQueue` (DLPack's `stream` for kDLOneAPI producers), made on
    /// first use; `None` for queues dpctl cannot wrap.
    pub(crate) dpctl_queue: PyOnceLock<Option<Py<PyAny>>>,
    /// How devbuf made the queue (its own shared queues, users' new streams); `None` for
    /// another library's stream or queue, adopted as it was made.
    pub(crate) made_with: Option<devbuf::StreamOptions>,
    /// Whether this is its device's shared queue ([`shared_queue`]), the work stream DLPack's
    /// exchange table reports for the device.
    pub(crate) shared: bool,
    /// For a bare stream handle adopted without an owner (`Stream.from_handle(handle)`), whether
    /// the caller's promise that the stream lives still holds: it lasts as long as this object,
    /// and devbuf's records of memory handed out on the stream ask it
    /// ([`devbuf::KeepsStream`]).
    pub(crate) promise: Option<Arc<AtomicBool>>,
}

impl Drop for PyQueue {
    fn drop(&mut self) {
        if let Some(promise) = &self.promise {
            promise.store(false, Ordering::Relaxed);
        }
    }
}

impl PyQueue {
    /// A queue devbuf made with `options`.
    pub(crate) fn wrap_made(
        py: Python<'_>,
        queue: Arc<dyn Queue>,
        options: devbuf::StreamOptions,
    ) -> PyResult<Py<PyQueue>> {
        Self::build(py, queue, Some(options), false, None)
    }

    /// Another library's stream or queue, adopted.
    pub(crate) fn wrap(py: Python<'_>, queue: Arc<dyn Queue>) -> PyResult<Py<PyQueue>> {
        Self::build(py, queue, None, false, None)
    }

    /// A bare stream handle adopted on the caller's promise that it lives as long as the object
    /// made here, which `promise` then says.
    pub(crate) fn wrap_promised(
        py: Python<'_>,
        queue: Arc<dyn Queue>,
        promise: Arc<AtomicBool>,
    ) -> PyResult<Py<PyQueue>> {
        Self::build(py, queue, None, false, Some(promise))
    }

    fn build(
        py: Python<'_>,
        queue: Arc<dyn Queue>,
        made_with: Option<devbuf::StreamOptions>,
        shared: bool,
        promise: Option<Arc<AtomicBool>>,
    ) -> PyResult<Py<PyQueue>> {
        let device = Py::new(
            py,
            PyDevice {
                info: queue.device().clone(),
            },
        )?;
        Py::new(
            py,
            PyQueue {
                inner: queue,
                closed: AtomicBool::new(false),
                device,
                dpctl_queue: PyOnceLock::new(),
                made_with,
                shared,
                promise,
            },
        )
    }

    /// The queue, unless `Stream.close()` closed it (ValueError naming the stream).
    pub(crate) fn queue(&self) -> PyResult<&Arc<dyn Queue>> {
        if self.closed.load(Ordering::Relaxed) {
            return Err(PyValueError::new_err(format!(
                "stream: {} was closed (Stream.close()); open a new one",
                self.describe()
            )));
        }
        Ok(&self.inner)
    }

    /// Marks the stream closed (`Stream.close()`); a device's shared stream is refused.
    pub(crate) fn mark_closed(&self) -> PyResult<()> {
        if self.shared {
            return Err(PyValueError::new_err(format!(
                "stream: {} is its device's shared stream, which every allocation without \
                 stream= uses; it cannot be closed (close the streams you made)",
                self.describe()
            )));
        }
        self.closed.store(true, Ordering::Relaxed);
        // A bare handle's promise ends with the Stream's use.
        if let Some(promise) = &self.promise {
            promise.store(false, Ordering::Relaxed);
        }
        Ok(())
    }

    /// The queue whether or not the stream was closed: for memory already on it, which stays
    /// usable (the runtime stream lives while it does), and for identity (`==`, `hash`).
    pub(crate) fn held(&self) -> &Arc<dyn Queue> {
        &self.inner
    }

    pub(crate) fn describe(&self) -> String {
        let device = self.inner.device();
        format!("<devbuf.Stream on {:?} {:?}>", device.selector, device.name)
    }

    pub(crate) fn backend_name(&self) -> &'static str {
        self.inner.device().backend
    }
}

/// Wraps a runtime handle given away by a queue in a capsule whose destructor releases it. The
/// release function rides in the capsule's context. A consumer such as dpctl renames the capsule
/// ("used_SyclQueueRef") and copies the handle; the copy we made is ours to release either way.
pub(crate) fn handle_capsule(
    py: Python<'_>,
    handle: ExportedHandle,
) -> PyResult<Bound<'_, PyCapsule>> {
    unsafe extern "C" fn release(capsule: *mut ffi::PyObject) {
        // SAFETY: called by CPython with a live capsule made below; its name, pointer and context
        // were set by us, and the context is the handle's release function.
        unsafe {
            let name = ffi::PyCapsule_GetName(capsule);
            let ptr = ffi::PyCapsule_GetPointer(capsule, name);
            let context = ffi::PyCapsule_GetContext(capsule);
            if !ptr.is_null() && !context.is_null() {
                let destroy: unsafe extern "C" fn(*mut c_void) = std::mem::transmute(context);
                destroy(ptr);
            }
            ffi::PyErr_Clear();
        }
    }
    let name = handle.name;
    let (ptr, destroy) = handle.into_raw();
    // SAFETY: `name` is a static C string; on failure we release the handle ourselves.
    unsafe {
        let capsule = ffi::PyCapsule_New(ptr.as_ptr(), name.as_ptr(), Some(release));
        if capsule.is_null() {
            destroy(ptr.as_ptr());
            return Err(PyErr::fetch(py));
        }
        if ffi::PyCapsule_SetContext(capsule, destroy as *mut c_void) != 0 {
            // Without its context the destructor would leak the handle; release it now.
            destroy(ptr.as_ptr());
            ffi::PyCapsule_SetPointer(capsule, std::ptr::dangling_mut::<c_void>());
            ffi::Py_DecRef(capsule);
            return Err(PyErr::fetch(py));
        }
        Ok(Bound::from_owned_ptr(py, capsule).cast_into_unchecked())
    }
}

/// One shared queue per device, so that every allocation on a device goes through one queue and
/// `syclobj`s compare equal (like dpctl's queue cache).
static SHARED_QUEUES: PyOnceLock<Mutex<HashMap<String, Py<PyQueue>>>> = PyOnceLock::new();

/// The shared queue for `selector` ("" = default device).
pub(crate) fn shared_queue(py: Python<'_>, selector: &str) -> PyResult<Py<PyQueue>> {
    let cache = SHARED_QUEUES.get_or_init(py, Default::default);
    if let Some(queue) = cache.lock().get(selector) {
        return Ok(queue.clone_ref(py));
    }
    let queue = py.detach(|| devbuf::open(selector)).py()?;
    let canonical = queue.device().selector.clone();
    // Python objects are made and dropped with the map unlocked: either may run Python code
    // (a garbage collection, a finalizer) that asks for a shared queue again.
    let existing = cache.lock().get(&canonical).map(|q| q.clone_ref(py));
    let wrapped = match existing {
        Some(existing) => existing,
        None => PyQueue::build(
            py,
            queue,
            Some(devbuf::StreamOptions::default()),
            true,
            None,
        )?,
    };
    let (shared, displaced) = {
        let mut cache = cache.lock();
        // Another thread may have made it meanwhile: the first one stays.
        let shared = cache
            .entry(canonical)
            .or_insert_with(|| wrapped.clone_ref(py))
            .clone_ref(py);
        let displaced = cache.insert(selector.to_string(), shared.clone_ref(py));
        (shared, displaced)
    };
    drop((wrapped, displaced));
    Ok(shared)
}

/// DLPack's CPU device: host memory of the process.
pub(crate) const CPU: DLDevice = DLDevice {
    device_type: devbuf::dlpark::ffi::DLDeviceType::CPU,
    device_id: 0,
};

/// The shared queue that takes host memory no backend allocated (a buffer-protocol import, an
/// unpickled buffer whose device this process lacks, a copy to the CPU): the one a kDLCPU
/// DLPack import goes to ([`devbuf::queue_for_dlpack_device`]), as the descriptors say.
pub(crate) fn host_memory_queue(py: Python<'_>) -> PyResult<Py<PyQueue>> {
    shared_queue_for_dlpack(py, CPU)
}

/// The shared queue of the device a DLPack producer names, cached by DLPack device.
pub(crate) fn shared_queue_for_dlpack(py: Python<'_>, device: DLDevice) -> PyResult<Py<PyQueue>> {
    type ByDevice = Mutex<HashMap<(u32, i32), Py<PyQueue>>>;
    static BY_DLPACK_DEVICE: PyOnceLock<ByDevice> = PyOnceLock::new();
    let key = (device.device_type.0, device.device_id);
    let cache = BY_DLPACK_DEVICE.get_or_init(py, Default::default);
    if let Some(queue) = cache.lock().get(&key) {
        return Ok(queue.clone_ref(py));
    }
    let queue = py.detach(|| devbuf::queue_for_dlpack_device(device)).py()?;
    let shared = shared_queue(py, &queue.device().selector)?;
    let displaced = cache.lock().insert(key, shared.clone_ref(py));
    drop(displaced);
    Ok(shared)
}
