//! `Device` and `Queue` as Python objects, the shared queue of each device, and the default device
//! (its choice, `set_default_device` and `with devbuf.Device(...)`): what every other
//! module of the crate builds on.

use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::Arc;

use devbuf::dlpark::ffi::DLDevice;
use devbuf::{DeviceInfo, ExportedHandle, Queue};
use parking_lot::Mutex;
use pyo3::exceptions::PyRuntimeError;
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyCapsule;

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
        let queue = match selector {
            None | Some("") => current_default(py)?,
            Some(selector) => shared_queue(py, selector)?,
        };
        Ok(queue.get().device.clone_ref(py))
    }

    /// `with device:` makes this device the default of the current thread until the block ends
    /// (as `with cupy.cuda.Device(n):` does); blocks nest.
    fn __enter__(slf: &Bound<'_, Self>) -> PyResult<Py<PyDevice>> {
        enter_default(slf.py(), slf.get())?;
        Ok(slf.clone().unbind())
    }

    /// Ends the `with` block: the default goes back to what it was before it.
    #[pyo3(signature = (*_exc_info))]
    fn __exit__(&self, _exc_info: &Bound<'_, pyo3::types::PyTuple>) -> PyResult<bool> {
        exit_default(self)?;
        Ok(false)
    }

    /// Backend name: "host", "sycl", "cuda", "opencl".
    #[getter]
    fn backend(&self) -> &'static str {
        self.info.backend
    }

    /// Index within the backend (dpctl's device index, the CUDA ordinal).
    #[getter]
    fn index(&self) -> u32 {
        self.info.index
    }

    /// The device's own name, as its runtime reports it.
    #[getter]
    fn name(&self) -> &str {
        &self.info.name
    }

    /// The vendor's name, as the runtime reports it.
    #[getter]
    fn vendor(&self) -> &str {
        &self.info.vendor
    }

    /// The driver's (or runtime's) version.
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

    pub(crate) fn backend_name(&self) -> &'static str {
        self.queue.device().backend
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

// The default device of `device=None`: the policy's choice (`devbuf::default_device`: the
// `DEVBUF_DEVICE` variable, else the first of cuda, sycl, opencl, host that allocates every kind),
// replaced for the whole process by `set_default_device()` (as `torch.set_default_device`) and for
// one thread inside a `with devbuf.Device(...)` block (as `with cupy.cuda.Device(n)`).

/// A default device's queue and why it is the default.
type Choice = (Py<PyQueue>, String);

/// The policy's choice, once made (an error is not kept: the next call retries).
static CHOSEN: PyOnceLock<Mutex<Option<Choice>>> = PyOnceLock::new();
/// What `set_default_device` set, if anything.
static SET_FOR_PROCESS: PyOnceLock<Mutex<Option<Py<PyQueue>>>> = PyOnceLock::new();

thread_local! {
    /// The devices of this thread's open `with devbuf.Device(...)` blocks, innermost last.
    static ENTERED: RefCell<Vec<Py<PyQueue>>> = const { RefCell::new(Vec::new()) };
}

/// The queue `device=None` means here and now, and why.
pub(crate) fn current_default_with_reason(py: Python<'_>) -> PyResult<Choice> {
    if let Some(queue) = ENTERED.with_borrow(|entered| entered.last().map(|q| q.clone_ref(py))) {
        return Ok((
            queue,
            "entered with `with devbuf.Device(...)` on this thread".into(),
        ));
    }
    let set = SET_FOR_PROCESS.get_or_init(py, Default::default);
    if let Some(queue) = set.lock().as_ref().map(|q| q.clone_ref(py)) {
        return Ok((queue, "set by devbuf.set_default_device()".into()));
    }
    let chosen = CHOSEN.get_or_init(py, Default::default);
    if let Some((queue, reason)) = chosen.lock().as_ref() {
        return Ok((queue.clone_ref(py), reason.clone()));
    }
    let choice = py.detach(devbuf::default_device).py()?;
    let queue = shared_queue(py, &choice.queue.device().selector)?;
    let mut chosen = chosen.lock();
    let (queue, reason) = chosen.get_or_insert((queue, choice.reason));
    Ok((queue.clone_ref(py), reason.clone()))
}

/// The queue `device=None` means here and now.
pub(crate) fn current_default(py: Python<'_>) -> PyResult<Py<PyQueue>> {
    current_default_with_reason(py).map(|(queue, _)| queue)
}

/// Sets (or with `None` clears) the default device of every thread; returns the previous one.
pub(crate) fn set_process_default(
    py: Python<'_>,
    queue: Option<Py<PyQueue>>,
) -> Option<Py<PyQueue>> {
    let set = SET_FOR_PROCESS.get_or_init(py, Default::default);
    std::mem::replace(&mut *set.lock(), queue)
}

/// `with device:` makes `device` this thread's default until the block ends.
fn enter_default(py: Python<'_>, device: &PyDevice) -> PyResult<()> {
    let queue = shared_queue(py, &device.info.selector)?;
    ENTERED.with_borrow_mut(|entered| entered.push(queue));
    Ok(())
}

/// The end of the innermost `with device:` block of this thread.
fn exit_default(device: &PyDevice) -> PyResult<()> {
    let left = ENTERED.with_borrow_mut(|entered| entered.pop());
    match left {
        Some(queue) if queue.get().device.get().info.selector == device.info.selector => {
            drop(queue);
            Ok(())
        }
        Some(queue) => {
            let entered = queue.get().device.get().info.selector.clone();
            ENTERED.with_borrow_mut(|entered| entered.push(queue));
            Err(PyRuntimeError::new_err(format!(
                "leaving a `with devbuf.Device({:?})` block while the innermost block on this \
                 thread is for {entered:?}: blocks must nest",
                device.info.selector
            )))
        }
        None => Err(PyRuntimeError::new_err(format!(
            "leaving a `with devbuf.Device({:?})` block that this thread never entered",
            device.info.selector
        ))),
    }
}
