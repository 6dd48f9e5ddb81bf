//! `devbuf.mr`: memory resources with RMM's names. The resources themselves are
//! `devbuf::mr`'s; these classes hold one each, with the Python queue their buffers report.

use std::collections::HashMap;
use std::sync::Arc;

use devbuf::mr::{
    LimitingResource, MemoryResource, PoolOptions, PoolResource, QueueResource, StatisticsResource,
    TrackingResource,
};
use devbuf::{Buffer, DEFAULT_ALIGNMENT, MemKind};
use parking_lot::Mutex;
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyDict;

use crate::array::PyBuffer;
use crate::errors::IntoPyResult;
use crate::foreign::resolve_queue;
use crate::queues::PyQueue;

/// A memory resource: allocates and frees memory of any kind on one queue.
#[pyclass(frozen, subclass, module = "devbuf.mr", name = "MemoryResource")]
pub struct PyMemoryResource {
    resource: Arc<dyn MemoryResource>,
    queue: Py<PyQueue>,
}

impl PyMemoryResource {
    fn over(
        upstream: &PyMemoryResource,
        resource: Arc<dyn MemoryResource>,
        py: Python<'_>,
    ) -> Self {
        PyMemoryResource {
            resource,
            queue: upstream.queue.clone_ref(py),
        }
    }

    fn adaptor<T: 'static>(&self) -> &T {
        self.resource
            .as_any()
            .downcast_ref()
            .expect("each class holds the resource it is named after")
    }

    /// Allocates a buffer of `nbytes` of `kind` from this resource.
    pub(crate) fn alloc(
        &self,
        py: Python<'_>,
        nbytes: usize,
        kind: &str,
    ) -> PyResult<Py<PyBuffer>> {
        let kind: MemKind = kind.parse().py()?;
        let resource = &self.resource;
        // Kept attached: a pooled allocation takes tens of nanoseconds, less than detaching, and
        // the one wait a pool may do (for freed blocks' work, when full) runs through the
        // blocking hook, which releases the GIL.
        let buffer = Buffer::alloc_from(resource, kind, nbytes, DEFAULT_ALIGNMENT).py()?;
        PyBuffer::wrap(py, buffer, self.queue.clone_ref(py))
    }
}

#[pymethods]
impl PyMemoryResource {
    /// The queue the memory belongs to.
    #[getter]
    fn queue(&self, py: Python<'_>) -> Py<PyQueue> {
        self.queue.clone_ref(py)
    }

    /// Allocates `nbytes` of `kind` memory from this resource.
    #[pyo3(signature = (nbytes, kind = "shared"))]
    fn allocate(&self, py: Python<'_>, nbytes: usize, kind: &str) -> PyResult<Py<PyBuffer>> {
        self.alloc(py, nbytes, kind)
    }

    fn __repr__(&self) -> String {
        format!("<{:?}>", self.resource)
    }
}

/// The bottom resource: the queue's own allocator (RMM's `CudaMemoryResource` and kin).
#[pyclass(frozen, extends = PyMemoryResource, module = "devbuf.mr", name = "QueueMemoryResource")]
pub struct PyQueueResource;

#[pymethods]
impl PyQueueResource {
    #[new]
    #[pyo3(signature = (device = None))]
    fn new(
        py: Python<'_>,
        device: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyClassInitializer<Self>> {
        let queue = resolve_queue(py, device)?;
        let resource = QueueResource::new(Arc::clone(&queue.get().queue));
        Ok(
            PyClassInitializer::from(PyMemoryResource { resource, queue })
                .add_subclass(PyQueueResource),
        )
    }
}

/// Sub-allocates from large blocks of `upstream`; grows on demand up to `maximum_pool_size`.
#[pyclass(frozen, extends = PyMemoryResource, module = "devbuf.mr", name = "PoolMemoryResource")]
pub struct PyPoolResource;

#[pymethods]
impl PyPoolResource {
    #[new]
    #[pyo3(signature = (upstream, initial_pool_size = None, maximum_pool_size = None))]
    fn new(
        py: Python<'_>,
        upstream: PyRef<'_, PyMemoryResource>,
        initial_pool_size: Option<usize>,
        maximum_pool_size: Option<usize>,
    ) -> PyClassInitializer<Self> {
        let options = PoolOptions {
            initial_size: initial_pool_size.unwrap_or(0),
            maximum_size: maximum_pool_size,
        };
        let pool = PoolResource::new(Arc::clone(&upstream.resource), options);
        PyClassInitializer::from(PyMemoryResource::over(&upstream, pool, py))
            .add_subclass(PyPoolResource)
    }

    /// Returns every block with nothing allocated from it to upstream.
    fn release(slf: PyRef<'_, Self>, py: Python<'_>) {
        let pool: &PoolResource = slf.as_super().adaptor();
        py.detach(|| pool.release());
    }

    /// Bytes the pool holds from upstream.
    fn pool_size(slf: PyRef<'_, Self>) -> usize {
        slf.as_super().adaptor::<PoolResource>().pool_size()
    }
}

/// Refuses allocations past `allocation_limit` bytes (MemoryError naming the limit).
#[pyclass(frozen, extends = PyMemoryResource, module = "devbuf.mr", name = "LimitingResourceAdaptor")]
pub struct PyLimitingResource;

#[pymethods]
impl PyLimitingResource {
    #[new]
    fn new(
        py: Python<'_>,
        upstream: PyRef<'_, PyMemoryResource>,
        allocation_limit: usize,
    ) -> PyClassInitializer<Self> {
        let limited = LimitingResource::new(Arc::clone(&upstream.resource), allocation_limit);
        PyClassInitializer::from(PyMemoryResource::over(&upstream, limited, py))
            .add_subclass(PyLimitingResource)
    }

    fn get_allocation_limit(slf: PyRef<'_, Self>) -> usize {
        slf.as_super().adaptor::<LimitingResource>().limit()
    }

    fn get_allocated_bytes(slf: PyRef<'_, Self>) -> usize {
        slf.as_super().adaptor::<LimitingResource>().in_use()
    }
}

/// Counts bytes and allocations: `allocation_counts`, and regions (`push_statistics`,
/// `pop_statistics`, or the `devbuf.mr.statistics()` context manager).
#[pyclass(frozen, extends = PyMemoryResource, module = "devbuf.mr", name = "StatisticsResourceAdaptor")]
pub struct PyStatisticsResource;

fn counts(py: Python<'_>, stats: devbuf::mr::Statistics) -> PyResult<Bound<'_, PyDict>> {
    let dict = PyDict::new(py);
    dict.set_item("current_bytes", stats.current_bytes)?;
    dict.set_item("current_count", stats.current_count)?;
    dict.set_item("peak_bytes", stats.peak_bytes)?;
    dict.set_item("peak_count", stats.peak_count)?;
    dict.set_item("total_bytes", stats.total_bytes)?;
    dict.set_item("total_count", stats.total_count)?;
    Ok(dict)
}

#[pymethods]
impl PyStatisticsResource {
    #[new]
    fn new(py: Python<'_>, upstream: PyRef<'_, PyMemoryResource>) -> PyClassInitializer<Self> {
        let stats = StatisticsResource::new(Arc::clone(&upstream.resource));
        PyClassInitializer::from(PyMemoryResource::over(&upstream, stats, py))
            .add_subclass(PyStatisticsResource)
    }

    /// The counters since the adaptor was made.
    #[getter]
    fn allocation_counts<'py>(slf: PyRef<'py, Self>) -> PyResult<Bound<'py, PyDict>> {
        let stats = slf.as_super().adaptor::<StatisticsResource>().statistics();
        counts(slf.py(), stats)
    }

    /// Opens a region that counts from now on.
    fn push_statistics(slf: PyRef<'_, Self>) {
        slf.as_super().adaptor::<StatisticsResource>().push_region();
    }

    /// Closes the innermost region and returns its counters (None when none is open).
    fn pop_statistics<'py>(slf: PyRef<'py, Self>) -> PyResult<Option<Bound<'py, PyDict>>> {
        let region = slf.as_super().adaptor::<StatisticsResource>().pop_region();
        region.map(|stats| counts(slf.py(), stats)).transpose()
    }
}

/// Remembers every live allocation (and, with `capture_stacks`, where it was made).
#[pyclass(frozen, extends = PyMemoryResource, module = "devbuf.mr", name = "TrackingResourceAdaptor")]
pub struct PyTrackingResource;

#[pymethods]
impl PyTrackingResource {
    #[new]
    #[pyo3(signature = (upstream, capture_stacks = false))]
    fn new(
        py: Python<'_>,
        upstream: PyRef<'_, PyMemoryResource>,
        capture_stacks: bool,
    ) -> PyClassInitializer<Self> {
        let tracking = TrackingResource::new(Arc::clone(&upstream.resource), capture_stacks);
        PyClassInitializer::from(PyMemoryResource::over(&upstream, tracking, py))
            .add_subclass(PyTrackingResource)
    }

    fn get_allocated_bytes(slf: PyRef<'_, Self>) -> usize {
        slf.as_super()
            .adaptor::<TrackingResource>()
            .outstanding_bytes()
    }

    /// A leak report: one line per allocation not yet freed (with its Rust backtrace when
    /// `capture_stacks` was set).
    fn get_outstanding_allocations_str(slf: PyRef<'_, Self>) -> String {
        slf.as_super()
            .adaptor::<TrackingResource>()
            .outstanding_report()
    }
}

/// The Python objects of the current resources, by device selector and kind (the resources
/// themselves are in `devbuf::mr`'s registry).
type CurrentObjects = Mutex<HashMap<(String, MemKind), Py<PyMemoryResource>>>;

fn current_objects(py: Python<'_>) -> &CurrentObjects {
    static CURRENT: PyOnceLock<CurrentObjects> = PyOnceLock::new();
    CURRENT.get_or_init(py, Default::default)
}

/// Makes `mr` the current resource of its device for `kind`, or for every kind the device
/// supports: `devbuf.alloc` and the copies `asarray` makes on that device allocate from it.
#[pyfunction]
#[pyo3(signature = (mr, kind = None))]
pub fn set_current_device_resource(
    py: Python<'_>,
    mr: &Bound<'_, PyMemoryResource>,
    kind: Option<&str>,
) -> PyResult<()> {
    let resource = &mr.get().resource;
    let kinds = match kind {
        Some(kind) => vec![kind.parse().py()?],
        None => MemKind::ALLOCATABLE
            .into_iter()
            .filter(|&kind| resource.queue().supports(kind))
            .collect(),
    };
    let selector = resource.queue().device().selector.clone();
    for kind in kinds {
        devbuf::mr::set_current(kind, Arc::clone(resource)).py()?;
        let previous = current_objects(py)
            .lock()
            .insert((selector.clone(), kind), mr.clone().unbind());
        drop(previous);
    }
    Ok(())
}

/// The current resource of `device` for `kind`: the one set, else the queue's own.
#[pyfunction]
#[pyo3(signature = (device = None, kind = "shared"))]
pub fn get_current_device_resource(
    py: Python<'_>,
    device: Option<&Bound<'_, PyAny>>,
    kind: &str,
) -> PyResult<Py<PyMemoryResource>> {
    let kind: MemKind = kind.parse().py()?;
    let queue = resolve_queue(py, device)?;
    let selector = queue.get().queue.device().selector.clone();
    let set = devbuf::mr::current(&selector, kind);
    if let Some(set) = set
        && let Some(object) = current_objects(py).lock().get(&(selector, kind))
        && Arc::ptr_eq(&object.get().resource, &set)
    {
        return Ok(object.clone_ref(py));
    }
    let resource = QueueResource::new(Arc::clone(&queue.get().queue));
    let init = PyClassInitializer::from(PyMemoryResource { resource, queue })
        .add_subclass(PyQueueResource);
    Ok(Bound::new(py, init)?.into_super().unbind())
}

/// The `mr=` argument of `devbuf.alloc`.
pub(crate) fn resource_arg<'py>(mr: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyMemoryResource>> {
    mr.cast::<PyMemoryResource>().cloned().map_err(|_| {
        PyTypeError::new_err(format!(
            "mr: expected a devbuf.mr.MemoryResource, got {}",
            mr.get_type()
        ))
    })
}

/// Adds the classes and functions to the `_devbuf` module (re-exported by `devbuf.mr`).
pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyMemoryResource>()?;
    m.add_class::<PyQueueResource>()?;
    m.add_class::<PyPoolResource>()?;
    m.add_class::<PyLimitingResource>()?;
    m.add_class::<PyStatisticsResource>()?;
    m.add_class::<PyTrackingResource>()?;
    m.add_function(wrap_pyfunction!(set_current_device_resource, m)?)?;
    m.add_function(wrap_pyfunction!(get_current_device_resource, m)?)?;
    Ok(())
}
