//! devbuf's own memory resources with RMM's names (`QueueMemoryResource`, `PoolMemoryResource`
//! and the adaptors), each holding one of `devbuf::mr`'s, and the current resource of each device
//! and kind.

use std::collections::HashMap;
use std::sync::Arc;

use devbuf::mr::{
    LimitingResource, PoolOptions, PoolResource, QueueResource, StatisticsResource,
    TrackingResource,
};
use devbuf::{DEFAULT_ALIGNMENT, MemKind};
use parking_lot::Mutex;
use pyo3::exceptions::{PyIndexError, PyMemoryError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyDict;

use crate::errors::IntoPyResult;
use crate::mr::kind_resources::byte_size;
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
        let resource = QueueResource::new(Arc::clone(queue.get().held()));
        PyClassInitializer::from(PyMemoryResource::devbuf(resource, queue, None))
            .add_subclass(PyQueueResource)
    }
}

/// Sub-allocates from large blocks of `upstream_mr`; grows on demand up to `maximum_pool_size`
/// bytes. As RMM's pool, it takes `initial_pool_size` bytes from upstream at construction (a
/// MemoryError there when upstream cannot give them), for `kind` (default: "device", RMM's pools'
/// memory, or the first kind the device has of "shared" and "host"); other kinds take their first
/// block of that size on their first allocation. `initial_pool_size` over `maximum_pool_size` is
/// a ValueError.
#[pyclass(frozen, extends = PyMemoryResource, subclass, module = "devbuf.mr", name = "PoolMemoryResource")]
pub struct PyPoolResource;

#[pymethods]
impl PyPoolResource {
    #[new]
    #[pyo3(signature = (upstream_mr, initial_pool_size = None, maximum_pool_size = None, *, kind = None))]
    fn new(
        py: Python<'_>,
        upstream_mr: &Bound<'_, PyMemoryResource>,
        initial_pool_size: Option<&Bound<'_, PyAny>>,
        maximum_pool_size: Option<&Bound<'_, PyAny>>,
        kind: Option<&str>,
    ) -> PyResult<PyClassInitializer<Self>> {
        let options = PoolOptions {
            initial_size: byte_size(initial_pool_size, "initial_pool_size")?.unwrap_or(0),
            maximum_size: byte_size(maximum_pool_size, "maximum_pool_size")?,
        };
        let upstream = resource_of(upstream_mr)?;
        let initial = options.initial_size;
        let reserve = match kind {
            Some(kind) => kind.parse().py()?,
            // The kind upstream gives for it (a resource of one kind gives only that).
            None => [MemKind::Device, MemKind::Shared, MemKind::Host]
                .into_iter()
                .find(|&kind| upstream.queue().supports(kind))
                .map_or(MemKind::Host, |kind| {
                    upstream.serves(kind, initial.max(1), DEFAULT_ALIGNMENT)
                }),
        };
        let pool = py
            .detach(|| PoolResource::reserved(upstream, options, reserve))
            .map_err(|err| match err {
                // The initial reservation is what failed: say which argument asked for it.
                devbuf::Error::OutOfMemory { .. } => {
                    PyMemoryError::new_err(format!("initial_pool_size: {err}"))
                }
                other => crate::errors::to_py(other),
            })?;
        let pool = PyMemoryResource::over(upstream_mr, |_| pool)?;
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

    /// The bytes taken at construction (the `initial_pool_size` argument; 0 when not given).
    #[getter]
    fn initial_pool_size(slf: PyRef<'_, Self>) -> usize {
        slf.as_super().adaptor::<PoolResource>().initial_pool_size()
    }

    /// The most bytes the pool may hold from upstream; None when unlimited.
    #[getter]
    fn maximum_pool_size(slf: PyRef<'_, Self>) -> Option<usize> {
        slf.as_super().adaptor::<PoolResource>().maximum_pool_size()
    }

    /// Bytes handed out now, every kind together (cuda.core's `used_mem_current`).
    #[getter]
    fn used_bytes(slf: PyRef<'_, Self>, py: Python<'_>) -> usize {
        let pool: &PoolResource = slf.as_super().adaptor();
        py.detach(|| pool.used_size())
    }

    /// Bytes the pool holds and has not handed out: `pool_size() - used_bytes`.
    #[getter]
    fn free_bytes(slf: PyRef<'_, Self>, py: Python<'_>) -> usize {
        let pool: &PoolResource = slf.as_super().adaptor();
        py.detach(|| {
            let used = pool.used_size();
            pool.pool_size().saturating_sub(used)
        })
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
        #[pyo3(from_py_with = crate::values::int_args::allocation_limit)] allocation_limit: usize,
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

/// The counters as a `devbuf.mr.statistics.Statistics` (RMM's `Statistics`: attributes, and
/// devbuf's keys too).
fn counts(py: Python<'_>, stats: devbuf::mr::Statistics) -> PyResult<Bound<'_, PyAny>> {
    let dict = PyDict::new(py);
    dict.set_item("current_bytes", stats.current_bytes)?;
    dict.set_item("current_count", stats.current_count)?;
    dict.set_item("peak_bytes", stats.peak_bytes)?;
    dict.set_item("peak_count", stats.peak_count)?;
    dict.set_item("total_bytes", stats.total_bytes)?;
    dict.set_item("total_count", stats.total_count)?;
    py.import("devbuf.mr.statistics")?
        .getattr("Statistics")?
        .call((), Some(&dict))
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
    fn allocation_counts<'py>(slf: PyRef<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        let stats = slf.as_super().adaptor::<StatisticsResource>().statistics();
        counts(slf.py(), stats)
    }

    /// Opens a region that counts from now on; returns the counters of the region it nests in,
    /// as they were before (RMM's `push_counters`).
    fn push_counters<'py>(slf: PyRef<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        let stats = slf.as_super().adaptor::<StatisticsResource>();
        let before = stats.region_statistics();
        stats.push_region();
        counts(slf.py(), before)
    }

    /// Closes the innermost region and returns its counters (RMM's `pop_counters`); IndexError
    /// when none is open.
    fn pop_counters<'py>(slf: PyRef<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        let region = slf.as_super().adaptor::<StatisticsResource>().pop_region();
        let region = region.ok_or_else(|| {
            PyIndexError::new_err(
                "pop_counters: no region is open (push_counters opens one): cannot pop the last \
                 counter pair, the whole run's",
            )
        })?;
        counts(slf.py(), region)
    }
}

/// Remembers every live allocation (and, with `capture_stacks`, the Python stack that made it).
#[pyclass(frozen, extends = PyMemoryResource, module = "devbuf.mr", name = "TrackingResourceAdaptor")]
pub struct PyTrackingResource;

/// The innermost frames of the Python stack that is allocating, as `traceback.format_stack`
/// writes them: the leak report's lines point at Python code, not at devbuf's Rust and C frames.
fn python_stack() -> Option<String> {
    /// Frames kept: the allocating line and the calls that led to it.
    const FRAMES: usize = 6;
    Python::attach(|py| {
        let lines = py
            .import("traceback")
            .ok()?
            .call_method1("format_stack", (py.None(), FRAMES))
            .ok()?;
        lines
            .extract::<Vec<String>>()
            .ok()
            .map(|lines| lines.concat())
    })
}

#[pymethods]
impl PyTrackingResource {
    #[new]
    #[pyo3(signature = (upstream_mr, capture_stacks = false))]
    fn new(
        upstream_mr: &Bound<'_, PyMemoryResource>,
        capture_stacks: bool,
    ) -> PyResult<PyClassInitializer<Self>> {
        let tracking = PyMemoryResource::over(upstream_mr, |up| match capture_stacks {
            true => TrackingResource::with_origin(up, Arc::new(python_stack)),
            false => TrackingResource::new(up, false),
        })?;
        Ok(PyClassInitializer::from(tracking).add_subclass(PyTrackingResource))
    }

    /// The bytes allocated through this adaptor and not yet freed.
    fn get_allocated_bytes(slf: PyRef<'_, Self>) -> usize {
        slf.as_super()
            .adaptor::<TrackingResource>()
            .outstanding_bytes()
    }

    /// A leak report: one line per allocation not yet freed, followed, when `capture_stacks` was
    /// set, by the Python stack that allocated it (its innermost frames: file, line, code).
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

/// Goes back to the default for `device` (None: the default device): allocations of `kind` (every
/// kind when None) come from the device's queue itself again, as before any
/// `set_current_device_resource`. RMM's C++ `reset_current_device_resource_ref()`; RMM's Python
/// sets a fresh `CudaMemoryResource()`, which `set_current_device_resource(QueueMemoryResource())`
/// mirrors here.
#[pyfunction]
#[pyo3(signature = (device = None, kind = None))]
pub fn reset_current_device_resource(
    py: Python<'_>,
    device: Option<&Bound<'_, PyAny>>,
    kind: Option<&str>,
) -> PyResult<()> {
    let kinds = match kind {
        Some(kind) => vec![kind.parse().py()?],
        None => MemKind::ALLOCATABLE.to_vec(),
    };
    let queue = resolve_queue(py, device)?;
    let selector = queue.get().queue()?.device().selector.clone();
    for kind in kinds {
        let previous = devbuf::mr::reset_current(&selector, kind);
        let object = current_objects(py).lock().remove(&(selector.clone(), kind));
        // Dropped outside the lock: a resource written in Python may run code when freed.
        drop((previous, object));
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
    let selector = queue.get().queue()?.device().selector.clone();
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
    crate::mr::kind_resources::register(m)?;
    crate::mr::debug_log::register(m)?;
    m.add_function(wrap_pyfunction!(set_current_device_resource, m)?)?;
    m.add_function(wrap_pyfunction!(get_current_device_resource, m)?)?;
    m.add_function(wrap_pyfunction!(reset_current_device_resource, m)?)?;
    Ok(())
}
