//! devbuf's own memory resources with RMM's names (`QueueMemoryResource`, `PoolMemoryResource`
//! and the adaptors), each holding one of `devbuf::mr`'s, and the current resource of each device
//! and kind.

use std::collections::HashMap;
use std::sync::Arc;

use devbuf::MemKind;
use devbuf::mr::{
    LimitingResource, PoolOptions, PoolResource, QueueResource, StatisticsResource,
    TrackingResource,
};
use parking_lot::Mutex;
use pyo3::exceptions::PyIndexError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyDict;

use crate::errors::IntoPyResult;
use crate::mr::memory_resource::{PyMemoryResource, resource_of};
use crate::objects::foreign_objects::resolve_queue;
use crate::objects::queue::PyQueue;

/// The bottom resource: the queue's own allocator (RMM's `CudaMemoryResource` and kin).
#[pyclass(frozen, extends = PyMemoryResource, module = "devbuf.mr", name = "QueueMemoryResource")]
pub struct PyQueueResource;

#[pymethods]
impl PyQueueResource {
    /// The allocator of `device` (a selector, Device or Queue; None for the default device).
    #[new]
    #[pyo3(signature = (device = None))]
    fn new(
        py: Python<'_>,
        device: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyClassInitializer<Self>> {
        let queue = resolve_queue(py, device)?;
        Ok(PyQueueResource::of(queue))
    }
}

impl PyQueueResource {
    fn of(queue: Py<PyQueue>) -> PyClassInitializer<Self> {
        let resource = QueueResource::new(Arc::clone(&queue.get().queue));
        PyClassInitializer::from(PyMemoryResource::devbuf(resource, queue, None))
            .add_subclass(PyQueueResource)
    }
}

/// Sub-allocates from large blocks of `upstream_mr`; grows on demand up to `maximum_pool_size`
/// bytes, starting with `initial_pool_size`.
#[pyclass(frozen, extends = PyMemoryResource, module = "devbuf.mr", name = "PoolMemoryResource")]
pub struct PyPoolResource;

#[pymethods]
impl PyPoolResource {
    #[new]
    #[pyo3(signature = (upstream_mr, initial_pool_size = None, maximum_pool_size = None))]
    fn new(
        upstream_mr: &Bound<'_, PyMemoryResource>,
        initial_pool_size: Option<usize>,
        maximum_pool_size: Option<usize>,
    ) -> PyResult<PyClassInitializer<Self>> {
        let options = PoolOptions {
            initial_size: initial_pool_size.unwrap_or(0),
            maximum_size: maximum_pool_size,
        };
        let pool = PyMemoryResource::over(upstream_mr, |up| PoolResource::new(up, options))?;
        Ok(PyClassInitializer::from(pool).add_subclass(PyPoolResource))
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

/// Refuses allocations past `allocation_limit` bytes in use (MemoryError naming the limit).
#[pyclass(frozen, extends = PyMemoryResource, module = "devbuf.mr", name = "LimitingResourceAdaptor")]
pub struct PyLimitingResource;

#[pymethods]
impl PyLimitingResource {
    #[new]
    fn new(
        upstream_mr: &Bound<'_, PyMemoryResource>,
        allocation_limit: usize,
    ) -> PyResult<PyClassInitializer<Self>> {
        let limited = PyMemoryResource::over(upstream_mr, |up| {
            LimitingResource::new(up, allocation_limit)
        })?;
        Ok(PyClassInitializer::from(limited).add_subclass(PyLimitingResource))
    }

    /// The most bytes that may be allocated through this adaptor at once.
    fn get_allocation_limit(slf: PyRef<'_, Self>) -> usize {
        slf.as_super().adaptor::<LimitingResource>().limit()
    }

    /// The bytes allocated through this adaptor and not yet freed.
    fn get_allocated_bytes(slf: PyRef<'_, Self>) -> usize {
        slf.as_super().adaptor::<LimitingResource>().in_use()
    }
}

/// Counts bytes and allocations: `allocation_counts` since it was made, and regions opened by
/// `push_counters` and closed by `pop_counters` (RMM's names), or by the `devbuf.mr.statistics()`
/// context manager.
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
    fn new(upstream_mr: &Bound<'_, PyMemoryResource>) -> PyResult<PyClassInitializer<Self>> {
        let stats = PyMemoryResource::over(upstream_mr, |up| StatisticsResource::new(up))?;
        Ok(PyClassInitializer::from(stats).add_subclass(PyStatisticsResource))
    }

    /// The counters since the adaptor was made: current, peak and total bytes and counts.
    #[getter]
    fn allocation_counts<'py>(slf: PyRef<'py, Self>) -> PyResult<Bound<'py, PyDict>> {
        let stats = slf.as_super().adaptor::<StatisticsResource>().statistics();
        counts(slf.py(), stats)
    }

    /// Opens a region that counts from now on; returns the counters of the region it nests in,
    /// as they were before (RMM's `push_counters`).
    fn push_counters<'py>(slf: PyRef<'py, Self>) -> PyResult<Bound<'py, PyDict>> {
        let stats = slf.as_super().adaptor::<StatisticsResource>();
        let before = stats.region_statistics();
        stats.push_region();
        counts(slf.py(), before)
    }

    /// Closes the innermost region and returns its counters (RMM's `pop_counters`); IndexError
    /// when none is open.
    fn pop_counters<'py>(slf: PyRef<'py, Self>) -> PyResult<Bound<'py, PyDict>> {
        let region = slf.as_super().adaptor::<StatisticsResource>().pop_region();
        let region = region.ok_or_else(|| {
            PyIndexError::new_err("pop_counters: no region is open (push_counters opens one)")
        })?;
        counts(slf.py(), region)
    }
}

/// Remembers every live allocation (and, with `capture_stacks`, where it was made).
#[pyclass(frozen, extends = PyMemoryResource, module = "devbuf.mr", name = "TrackingResourceAdaptor")]
pub struct PyTrackingResource;

#[pymethods]
impl PyTrackingResource {
    #[new]
    #[pyo3(signature = (upstream_mr, capture_stacks = false))]
    fn new(
        upstream_mr: &Bound<'_, PyMemoryResource>,
        capture_stacks: bool,
    ) -> PyResult<PyClassInitializer<Self>> {
        let tracking =
            PyMemoryResource::over(upstream_mr, |up| TrackingResource::new(up, capture_stacks))?;
        Ok(PyClassInitializer::from(tracking).add_subclass(PyTrackingResource))
    }

    /// The bytes allocated through this adaptor and not yet freed.
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
    let resource = resource_of(mr)?;
    let kinds = match kind {
        Some(kind) => vec![kind.parse().py()?],
        None => MemKind::ALLOCATABLE
            .into_iter()
            .filter(|&kind| resource.queue().supports(kind))
            .collect(),
    };
    let selector = resource.queue().device().selector.clone();
    for kind in kinds {
        devbuf::mr::set_current(kind, Arc::clone(&resource)).py()?;
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
    if let Some(set) = devbuf::mr::current(&selector, kind) {
        let object = current_objects(py)
            .lock()
            .get(&(selector, kind))
            .map(|object| object.clone_ref(py));
        if let Some(object) = object
            && Arc::ptr_eq(&resource_of(object.bind(py))?, &set)
        {
            return Ok(object);
        }
    }
    Ok(Bound::new(py, PyQueueResource::of(queue))?
        .into_super()
        .unbind())
}

/// Adds the classes and functions to the `_devbuf` module (re-exported by `devbuf.mr`).
pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyMemoryResource>()?;
    m.add_class::<PyQueueResource>()?;
    m.add_class::<PyPoolResource>()?;
    m.add_class::<PyLimitingResource>()?;
    m.add_class::<PyStatisticsResource>()?;
    m.add_class::<PyTrackingResource>()?;
    crate::mr::rmm_resources::register(m)?;
    m.add_function(wrap_pyfunction!(set_current_device_resource, m)?)?;
    m.add_function(wrap_pyfunction!(get_current_device_resource, m)?)?;
    Ok(())
}
