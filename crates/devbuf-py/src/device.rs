//! `Device`, `Queue`, `BackendInfo`, `backends()` and `devices()`, and how a `device=` argument
//! becomes a queue.

use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::Arc;

use devbuf::dlpark::ffi::DLDevice;
use devbuf::{Availability, Buffer, DeviceInfo, ExportedHandle, MemKind, Queue};
use parking_lot::Mutex;
use pyo3::exceptions::{PyAttributeError, PyTypeError};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyCapsule, PyString};

use crate::array::PyBuffer;
use crate::errors::IntoPyResult;

/// A device of one backend, usable or not.
#[pyclass(frozen, module = "devbuf", name = "Device")]
pub struct PyDevice {
    pub(crate) info: DeviceInfo,
}

#[pymethods]
impl PyDevice {
    /// The device a selector names: "host", "sycl", "sycl:<filter string>", "cuda", "cuda:N",
    /// "opencl", "opencl:P:D", or nothing for the default device.
    #[new]
    #[pyo3(signature = (selector = None))]
    fn new(py: Python<'_>, selector: Option<&str>) -> PyResult<Py<PyDevice>> {
        let queue = shared_queue(py, selector.unwrap_or(""))?;
        Ok(queue.get().device.clone_ref(py))
    }

    /// Backend name: "host", "sycl", "cuda".
    #[getter]
    fn backend(&self) -> &'static str {
        self.info.backend
    }

    /// Index within the backend (dpctl's device index, the CUDA ordinal).
    #[getter]
    fn index(&self) -> u32 {
        self.info.index
    }

    #[getter]
    fn name(&self) -> &str {
        &self.info.name
    }

    #[getter]
    fn vendor(&self) -> &str {
        &self.info.vendor
    }

    #[getter]
    fn driver(&self) -> &str {
        &self.info.driver
    }

    /// What stands in for the hardware when a test double of its runtime does (the CUDA driver
    /// double); `None` for real hardware.
    #[getter]
    fn test_double(&self) -> Option<&str> {
        self.info.test_double.as_deref()
    }

    /// The selector that opens this device.
    #[getter]
    fn selector(&self) -> &str {
        &self.info.selector
    }

    /// Global memory in bytes (0 when unknown).
    #[getter]
    fn global_mem_size(&self) -> u64 {
        self.info.global_mem_bytes
    }

    /// The kinds of memory devbuf can allocate here.
    #[getter]
    fn kinds(&self) -> Vec<&'static str> {
        self.info.kinds.iter().map(|k| k.as_str()).collect()
    }

    /// Whether devbuf can allocate memory on this device.
    #[getter]
    fn usable(&self) -> bool {
        self.info.unusable_reason.is_none()
    }

    /// Why devbuf cannot use this device, or None.
    #[getter]
    fn reason(&self) -> Option<&str> {
        self.info.unusable_reason.as_deref()
    }

    /// The shared queue of this device (what `alloc(device=...)` uses).
    #[getter]
    fn queue(&self, py: Python<'_>) -> PyResult<Py<PyQueue>> {
        shared_queue(py, &self.info.selector)
    }

    fn __eq__(&self, other: &Bound<'_, PyAny>) -> bool {
        other
            .cast::<PyDevice>()
            .is_ok_and(|other| other.get().info.selector == self.info.selector)
    }

    fn __hash__(&self) -> u64 {
        use std::hash::{Hash, Hasher};
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        self.info.selector.hash(&mut hasher);
        hasher.finish()
    }

    fn __repr__(&self) -> String {
        let mut repr = format!(
            "<devbuf.Device {:?} {:?}",
            self.info.selector, self.info.name
        );
        match &self.info.unusable_reason {
            Some(reason) => repr += &format!(" unusable: {reason}"),
            None => repr += &format!(" kinds={:?}", self.kinds()),
        }
        repr + ">"
    }
}

/// An ordered stream of work on one device and context.
#[pyclass(frozen, module = "devbuf", name = "Queue")]
pub struct PyQueue {
    pub(crate) queue: Arc<dyn Queue>,
    pub(crate) device: Py<PyDevice>,
    /// This queue as a `dpctl.SyclQueue` (DLPack's `stream` for kDLOneAPI producers), made on
    /// first use; `None` for queues dpctl cannot wrap.
    pub(crate) dpctl_queue: PyOnceLock<Option<Py<PyAny>>>,
}

impl PyQueue {
    pub(crate) fn wrap(py: Python<'_>, queue: Arc<dyn Queue>) -> PyResult<Py<PyQueue>> {
        let device = Py::new(
            py,
            PyDevice {
                info: queue.device().clone(),
            },
        )?;
        Py::new(
            py,
            PyQueue {
                queue,
                device,
                dpctl_queue: PyOnceLock::new(),
            },
        )
    }

    fn backend_name(&self) -> &'static str {
        self.queue.device().backend
    }
}

#[pymethods]
impl PyQueue {
    /// A new queue on `device` (a selector string, a Device, or None for the default device), or
    /// the queue of a `dpctl.SyclQueue` (the same `sycl::queue` when it is in order).
    #[new]
    #[pyo3(signature = (device = None))]
    fn new(py: Python<'_>, device: Option<&Bound<'_, PyAny>>) -> PyResult<Py<PyQueue>> {
        if let Some(device) = device
            && let Some(queue) = sycl_queue_object(py, device)?
        {
            return Ok(queue);
        }
        let selector = match device {
            None => String::new(),
            Some(device) => selector_of(device)?,
        };
        let queue = py.detach(|| devbuf::open(&selector)).py()?;
        PyQueue::wrap(py, queue)
    }

    #[getter]
    fn device(&self, py: Python<'_>) -> Py<PyDevice> {
        self.device.clone_ref(py)
    }

    #[getter]
    fn backend(&self) -> &'static str {
        self.backend_name()
    }

    /// This SYCL queue as a `dpctl.SyclQueue` (the same `sycl::queue`), where dpctl imports.
    #[getter]
    fn sycl_queue(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        crate::backend::dpctl_queue(py, self)?.ok_or_else(|| {
            PyAttributeError::new_err(format!(
                "sycl_queue: a {} queue has no dpctl queue (not SYCL, or dpctl cannot be imported)",
                self.backend_name()
            ))
        })
    }

    /// The native stream handle (a CUstream as an int) for backends that have one, else None.
    #[getter]
    fn stream(&self) -> Option<usize> {
        self.queue.native_stream()
    }

    /// Blocks until all work enqueued on this queue has completed.
    fn wait(&self, py: Python<'_>) -> PyResult<()> {
        py.detach(|| self.queue.wait()).py()
    }

    /// Allocates `nbytes` of `kind` memory ("host", "device" or "shared") on this queue. With
    /// `ipc=True` the memory can be opened by other processes (`Buffer.ipc_handle()`), where the
    /// backend can share memory (host, CUDA device memory); else ValueError says why not.
    #[pyo3(signature = (nbytes, kind = "shared", *, ipc = false))]
    fn alloc(
        slf: &Bound<'_, Self>,
        nbytes: usize,
        kind: &str,
        ipc: bool,
    ) -> PyResult<Py<PyBuffer>> {
        let kind: MemKind = kind.parse().py()?;
        let queue = &slf.get().queue;
        let buffer = if ipc {
            slf.py()
                .detach(|| devbuf::ipc::alloc_shareable(queue, kind, nbytes))
        // Host allocations take tens of nanoseconds: releasing the GIL would cost more.
        } else if queue.device().backend == devbuf::host::HOST {
            Buffer::alloc(queue, kind, nbytes)
        } else {
            slf.py().detach(|| Buffer::alloc(queue, kind, nbytes))
        }
        .py()?;
        PyBuffer::wrap(slf.py(), buffer, slf.clone().unbind())
    }

    /// A new "SyclQueueRef" capsule holding a copy of this SYCL queue (what dpctl expects of a
    /// `syclobj`). Only SYCL queues have one.
    fn _get_capsule<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyCapsule>> {
        match self.queue.export_handle() {
            Some(handle) => handle_capsule(py, handle),
            None => Err(PyAttributeError::new_err(format!(
                "{} queues have no SYCL queue capsule",
                self.backend_name()
            ))),
        }
    }

    /// The CUDA stream protocol (cuda.core, CuPy): `(0, stream handle)`.
    fn __cuda_stream__(&self) -> PyResult<(u32, usize)> {
        match (self.backend_name(), self.queue.native_stream()) {
            ("cuda", Some(stream)) => Ok((0, stream)),
            _ => Err(PyAttributeError::new_err(format!(
                "{} queues have no CUDA stream",
                self.backend_name()
            ))),
        }
    }

    fn __eq__(&self, other: &Bound<'_, PyAny>) -> bool {
        other
            .cast::<PyQueue>()
            .is_ok_and(|other| Arc::ptr_eq(&other.get().queue, &self.queue))
    }

    fn __hash__(&self) -> usize {
        Arc::as_ptr(&self.queue).cast::<u8>() as usize
    }

    fn __repr__(&self) -> String {
        let device = self.queue.device();
        format!("<devbuf.Queue on {:?} {:?}>", device.selector, device.name)
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
        None => PyQueue::wrap(py, queue)?,
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

/// The selector a `device=` argument names.
fn selector_of(device: &Bound<'_, PyAny>) -> PyResult<String> {
    if let Ok(selector) = device.cast::<PyString>() {
        return Ok(selector.to_str()?.to_string());
    }
    if let Ok(device) = device.cast::<PyDevice>() {
        return Ok(device.get().info.selector.clone());
    }
    if let Ok(queue) = device.cast::<PyQueue>() {
        return Ok(queue.get().queue.device().selector.clone());
    }
    Err(PyTypeError::new_err(format!(
        "device: expected None, a selector string, a devbuf.Device, a devbuf.Queue or a \
         dpctl.SyclQueue, got {}",
        device.get_type().name()?
    )))
}

/// The devbuf queue of another library's SYCL queue given as `device=`; `None` for selectors,
/// Devices, devbuf Queues and anything else (strings first: the common case, with no capsule).
fn sycl_queue_object(py: Python<'_>, device: &Bound<'_, PyAny>) -> PyResult<Option<Py<PyQueue>>> {
    if device.is_instance_of::<PyString>()
        || device.cast::<PyDevice>().is_ok()
        || device.cast::<PyQueue>().is_ok()
    {
        return Ok(None);
    }
    crate::backend::queue_from_sycl_queue_object(py, device)
}

/// The queue a `device=` argument names: a Queue itself, a `dpctl.SyclQueue`'s queue, else the
/// shared queue of the device.
pub(crate) fn resolve_queue(
    py: Python<'_>,
    device: Option<&Bound<'_, PyAny>>,
) -> PyResult<Py<PyQueue>> {
    match device {
        None => shared_queue(py, ""),
        Some(device) => {
            if let Ok(queue) = device.cast::<PyQueue>() {
                return Ok(queue.clone().unbind());
            }
            if let Some(queue) = sycl_queue_object(py, device)? {
                return Ok(queue);
            }
            shared_queue(py, &selector_of(device)?)
        }
    }
}

/// What `devbuf.backends()` returns for each backend compiled in.
#[pyclass(frozen, module = "devbuf", name = "BackendInfo")]
pub struct PyBackendInfo {
    #[pyo3(get)]
    name: &'static str,
    #[pyo3(get)]
    available: bool,
    /// Why the backend is unavailable, or None.
    #[pyo3(get)]
    reason: Option<String>,
    #[pyo3(get)]
    devices: Vec<Py<PyDevice>>,
}

#[pymethods]
impl PyBackendInfo {
    fn __repr__(&self) -> String {
        match &self.reason {
            None => format!(
                "BackendInfo(name={:?}, available=True, devices={})",
                self.name,
                self.devices.len()
            ),
            Some(reason) => format!(
                "BackendInfo(name={:?}, available=False, reason={reason:?})",
                self.name
            ),
        }
    }
}

/// Every backend compiled into devbuf, whether its runtime is usable, why not, and its devices.
#[pyfunction]
pub fn backends(py: Python<'_>) -> PyResult<Vec<PyBackendInfo>> {
    devbuf::backends()
        .iter()
        .map(|backend| {
            let availability = py.detach(|| backend.availability());
            let (devices, reason) = match availability {
                Availability::Available => match py.detach(|| backend.devices()) {
                    Ok(devices) => (devices, None),
                    Err(err) => (Vec::new(), Some(err.to_string())),
                },
                Availability::Unavailable(reason) => (Vec::new(), Some(reason)),
            };
            Ok(PyBackendInfo {
                name: backend.name(),
                available: reason.is_none(),
                reason,
                devices: devices
                    .into_iter()
                    .map(|info| Py::new(py, PyDevice { info }))
                    .collect::<PyResult<_>>()?,
            })
        })
        .collect()
}

/// The devices of one backend (or of all available backends), usable or not.
#[pyfunction]
#[pyo3(signature = (backend = None))]
pub fn devices(py: Python<'_>, backend: Option<&str>) -> PyResult<Vec<Py<PyDevice>>> {
    let mut all = Vec::new();
    for info in backends(py)? {
        if backend.is_none_or(|name| name == info.name) {
            all.extend(info.devices);
        }
    }
    if let Some(name) = backend {
        devbuf::backend(name).py()?;
    }
    Ok(all)
}

/// Allocates `nbytes` of `kind` memory ("host", "device" or "shared") on `device` (a selector,
/// a Device, a Queue, or None for the default device); `ipc=True` makes it shareable with other
/// processes (see `Queue.alloc`); `mr=` allocates from that memory resource (on its device).
#[pyfunction]
#[pyo3(signature = (nbytes, kind = "shared", device = None, *, ipc = false, mr = None))]
pub fn alloc(
    py: Python<'_>,
    nbytes: usize,
    kind: &str,
    device: Option<&Bound<'_, PyAny>>,
    ipc: bool,
    mr: Option<&Bound<'_, PyAny>>,
) -> PyResult<Py<PyBuffer>> {
    if let Some(mr) = mr {
        return crate::mr::resource_arg(mr)?.get().alloc(py, nbytes, kind);
    }
    let queue = resolve_queue(py, device)?;
    PyQueue::alloc(queue.bind(py), nbytes, kind, ipc)
}

/// The default device.
#[pyfunction]
pub fn default_device(py: Python<'_>) -> PyResult<Py<PyDevice>> {
    Ok(shared_queue(py, "")?.get().device.clone_ref(py))
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
