//! `devbuf.mr`: memory resources with RMM's names. The resources themselves are `devbuf::mr`'s;
//! these classes hold one each, with the Python queue their buffers report. A subclass of
//! `MemoryResource` written in Python is served through `mr_python`.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock, Weak};

use devbuf::mr::{
    Handouts, LimitingResource, MemoryResource, PoolOptions, PoolResource, QueueResource,
    StatisticsResource, TrackingResource,
};
use devbuf::{Buffer, DEFAULT_ALIGNMENT, MemKind};
use parking_lot::Mutex;
use pyo3::exceptions::{
    PyIndexError, PyNotImplementedError, PyRuntimeError, PyTypeError, PyValueError,
};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyTuple, PyType};

use crate::array::PyBuffer;
use crate::errors::IntoPyResult;
use crate::foreign::resolve_queue;
use crate::mr_python::PythonResource;
use crate::queues::{PyDevice, PyQueue};

/// A memory resource: allocates and frees memory of the kinds its device has, RMM's
/// `DeviceMemoryResource` in shape. `devbuf.alloc(..., mr=resource)` makes buffers of its memory,
/// and `allocate`/`deallocate` hand it out by address.
///
/// Subclass it in Python to write a resource: call `super().__init__(device)` (or
/// `super().__init__(upstream_mr=...)`, on that resource's device) and implement
/// `allocate(nbytes, kind)`, returning the address of `nbytes` bytes of `kind` memory aligned to
/// 256 bytes, and `deallocate(ptr, nbytes, kind)`. devbuf calls `deallocate` once for each
/// address, with what `allocate` was given, after the work devbuf knows of on that memory is done.
/// What `allocate` raises reaches the caller; what `deallocate` raises is reported through
/// `sys.unraisablehook`, as for `__del__`.
#[pyclass(frozen, subclass, module = "devbuf.mr", name = "MemoryResource")]
pub struct PyMemoryResource {
    /// Set when a devbuf resource is made, and by `__init__` for one written in Python.
    backing: OnceLock<Backing>,
}

struct Backing {
    queue: Py<PyQueue>,
    /// The resource this one allocates from, when it is an adaptor.
    upstream: Option<Py<PyMemoryResource>>,
    source: Source,
}

enum Source {
    /// devbuf's resource, and what it handed out by address.
    Devbuf(Handouts),
    /// A subclass written in Python: the resource that calls it, while anything holds one (it
    /// holds this object, so this holds it only weakly).
    Python(Mutex<Weak<PythonResource>>),
}

impl PyMemoryResource {
    /// A devbuf resource on `queue`, over `upstream` when it is an adaptor.
    fn devbuf(
        resource: Arc<dyn MemoryResource>,
        queue: Py<PyQueue>,
        upstream: Option<Py<PyMemoryResource>>,
    ) -> Self {
        let backing = Backing {
            queue,
            upstream,
            source: Source::Devbuf(Handouts::new(resource)),
        };
        PyMemoryResource {
            backing: OnceLock::from(backing),
        }
    }

    /// An adaptor over `upstream`, on its device.
    fn over(
        upstream: &Bound<'_, PyMemoryResource>,
        wrap: impl FnOnce(Arc<dyn MemoryResource>) -> Arc<dyn MemoryResource>,
    ) -> PyResult<Self> {
        let backing = backing(upstream)?;
        let resource = wrap(resource_of(upstream)?);
        Ok(PyMemoryResource::devbuf(
            resource,
            backing.queue.clone_ref(upstream.py()),
            Some(upstream.clone().unbind()),
        ))
    }

    /// The adaptor this class is named after.
    fn adaptor<T: 'static>(&self) -> &T {
        match self.backing.get().map(|backing| &backing.source) {
            Some(Source::Devbuf(handouts)) => handouts.resource().as_any().downcast_ref(),
            _ => None,
        }
        .expect("each devbuf class holds the resource it is named after")
    }

    /// Allocates a buffer of `nbytes` of `kind` from this resource.
    pub(crate) fn alloc(
        slf: &Bound<'_, PyMemoryResource>,
        nbytes: usize,
        kind: &str,
    ) -> PyResult<Py<PyBuffer>> {
        let py = slf.py();
        let kind: MemKind = kind.parse().py()?;
        let backing = backing(slf)?;
        // Kept attached: a pooled allocation takes tens of nanoseconds, less than detaching, and
        // the one wait a pool may do (for freed blocks' work, when full) runs through the
        // blocking hook, which releases the GIL.
        let buffer = match &backing.source {
            Source::Devbuf(handouts) => {
                Buffer::alloc_from(handouts.resource(), kind, nbytes, DEFAULT_ALIGNMENT)
            }
            Source::Python(_) => {
                Buffer::alloc_from(&resource_of(slf)?, kind, nbytes, DEFAULT_ALIGNMENT)
            }
        }
        .py()?;
        PyBuffer::wrap(py, buffer, backing.queue.clone_ref(py))
    }

    /// The selector of the device the resource allocates on.
    pub(crate) fn selector(slf: &Bound<'_, PyMemoryResource>) -> PyResult<String> {
        Ok(backing(slf)?.queue.get().queue.device().selector.clone())
    }
}

/// What a resource was made with, or why a subclass written in Python has none yet.
fn backing<'a>(slf: &'a Bound<'_, PyMemoryResource>) -> PyResult<&'a Backing> {
    slf.get().backing.get().ok_or_else(|| {
        let name = slf
            .get_type()
            .name()
            .map_or_else(|_| "?".into(), |n| n.to_string());
        PyRuntimeError::new_err(format!(
            "{name} was not initialised: a MemoryResource written in Python calls \
             super().__init__(device) (or super().__init__(upstream_mr=...)) in its __init__"
        ))
    })
}

/// The devbuf resource behind a resource object: its own, or the one that calls a subclass
/// written in Python.
pub(crate) fn resource_of(slf: &Bound<'_, PyMemoryResource>) -> PyResult<Arc<dyn MemoryResource>> {
    let backing = backing(slf)?;
    match &backing.source {
        Source::Devbuf(handouts) => Ok(Arc::clone(handouts.resource())),
        Source::Python(caller) => {
            let mut caller = caller.lock();
            if let Some(resource) = caller.upgrade() {
                return Ok(resource);
            }
            let queue = Arc::clone(&backing.queue.get().queue);
            let resource = PythonResource::new(slf.as_any(), queue)?;
            *caller = Arc::downgrade(&resource);
            Ok(resource)
        }
    }
}

/// `repr()`'s details: the device and the sizes that matter for each resource.
fn details(resource: &dyn MemoryResource) -> String {
    let any = resource.as_any();
    if let Some(pool) = any.downcast_ref::<PoolResource>() {
        let maximum = pool
            .maximum_pool_size()
            .map_or_else(|| "None".into(), |max| max.to_string());
        format!(
            " pool_size={} maximum_pool_size={maximum}",
            pool.pool_size()
        )
    } else if let Some(limited) = any.downcast_ref::<LimitingResource>() {
        format!(
            " allocated_bytes={} allocation_limit={}",
            limited.in_use(),
            limited.limit()
        )
    } else if let Some(stats) = any.downcast_ref::<StatisticsResource>() {
        let counts = stats.statistics();
        format!(
            " current_bytes={} current_count={}",
            counts.current_bytes, counts.current_count
        )
    } else if let Some(tracking) = any.downcast_ref::<TrackingResource>() {
        format!(
            " allocated_bytes={} outstanding={}",
            tracking.outstanding_bytes(),
            tracking.outstanding().len()
        )
    } else {
        String::new()
    }
}

#[pymethods]
impl PyMemoryResource {
    /// Made only as a subclass written in Python (devbuf's own resources have their own
    /// constructors); `__init__` then names the device.
    #[new]
    #[classmethod]
    #[pyo3(signature = (*_args, **_kwargs), text_signature = "(device=None, upstream_mr=None)")]
    fn new(
        cls: &Bound<'_, PyType>,
        _args: &Bound<'_, PyTuple>,
        _kwargs: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Self> {
        if cls.is(cls.py().get_type::<PyMemoryResource>()) {
            return Err(PyTypeError::new_err(
                "MemoryResource is abstract: subclass it, implementing allocate and deallocate \
                 (or use one of devbuf.mr's resources, e.g. QueueMemoryResource)",
            ));
        }
        Ok(PyMemoryResource {
            backing: OnceLock::new(),
        })
    }

    /// `__init__(device=None, upstream_mr=None)`, for a subclass written in Python: the device
    /// it allocates on (a selector, Device or Queue; None for the default device, or
    /// `upstream_mr`'s device when that is given), and the resource it allocates from, if any
    /// (reported as `upstream_mr`). devbuf's own resources are complete when made, and take no
    /// notice of it.
    #[pyo3(signature = (*args, **kwargs))]
    fn __init__(
        slf: &Bound<'_, Self>,
        args: &Bound<'_, PyTuple>,
        kwargs: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<()> {
        if slf.get().backing.get().is_some() {
            return Ok(());
        }
        let py = slf.py();
        let (device, upstream) = init_arguments(args, kwargs)?;
        let upstream = upstream
            .map(|upstream| resource_arg(&upstream).map(Bound::unbind))
            .transpose()?;
        let queue = match (&device, &upstream) {
            (None, Some(upstream)) => backing(upstream.bind(py))?.queue.clone_ref(py),
            (device, _) => resolve_queue(py, device.as_ref())?,
        };
        if let Some(upstream) = &upstream {
            let own = PyMemoryResource::selector(upstream.bind(py))?;
            let asked = &queue.get().queue.device().selector;
            if *asked != own {
                return Err(PyValueError::new_err(format!(
                    "device: {asked:?} is not the device of upstream_mr, which allocates on {own:?}"
                )));
            }
        }
        let backing = Backing {
            queue,
            upstream,
            source: Source::Python(Mutex::new(Weak::new())),
        };
        // Two threads initialising one object at once: the first one's backing stays.
        let _ = slf.get().backing.set(backing);
        Ok(())
    }

    /// The queue the memory belongs to.
    #[getter]
    fn queue(slf: &Bound<'_, Self>) -> PyResult<Py<PyQueue>> {
        Ok(backing(slf)?.queue.clone_ref(slf.py()))
    }

    /// The device the memory belongs to.
    #[getter]
    fn device(slf: &Bound<'_, Self>) -> PyResult<Py<PyDevice>> {
        Ok(backing(slf)?.queue.get().device.clone_ref(slf.py()))
    }

    /// The resource this one allocates from (RMM's name); None for a bottom resource.
    #[getter]
    fn upstream_mr(slf: &Bound<'_, Self>) -> PyResult<Option<Py<PyMemoryResource>>> {
        let backing = backing(slf)?;
        Ok(backing.upstream.as_ref().map(|up| up.clone_ref(slf.py())))
    }

    /// The resource this one allocates from (RMM's `get_upstream()`); None for a bottom resource.
    fn get_upstream(slf: &Bound<'_, Self>) -> PyResult<Option<Py<PyMemoryResource>>> {
        PyMemoryResource::upstream_mr(slf)
    }

    /// The address of `nbytes` new bytes of `kind` memory, aligned to 256 bytes (0 for 0 bytes),
    /// as RMM's `allocate`. It stays allocated until `deallocate(ptr, nbytes, kind)`, or until
    /// this resource object is deleted. For memory that frees itself, use
    /// `devbuf.alloc(nbytes, kind, mr=resource)`.
    #[pyo3(signature = (nbytes, kind = "shared"))]
    fn allocate(slf: &Bound<'_, Self>, nbytes: usize, kind: &str) -> PyResult<usize> {
        let kind: MemKind = kind.parse().py()?;
        match &backing(slf)?.source {
            Source::Devbuf(handouts) => handouts.allocate(kind, nbytes).py(),
            Source::Python(_) => Err(must_implement(slf, "allocate")),
        }
    }

    /// Frees what `allocate(nbytes, kind)` returned at `ptr`, as RMM's `deallocate`. An address
    /// this resource did not hand out (or took back already), or another size or kind, is a
    /// ValueError and nothing is freed. No work may still run on the memory, other than on this
    /// resource's queue.
    #[pyo3(signature = (ptr, nbytes, kind = "shared"))]
    fn deallocate(slf: &Bound<'_, Self>, ptr: usize, nbytes: usize, kind: &str) -> PyResult<()> {
        let kind: MemKind = kind.parse().py()?;
        match &backing(slf)?.source {
            Source::Devbuf(handouts) => handouts.deallocate(ptr, kind, nbytes).py(),
            Source::Python(_) => Err(must_implement(slf, "deallocate")),
        }
    }

    fn __repr__(slf: &Bound<'_, Self>) -> PyResult<String> {
        let name = slf.get_type().qualname()?;
        let module = slf.get_type().module()?;
        let Some(backing) = slf.get().backing.get() else {
            return Ok(format!("<{module}.{name} (not initialised)>"));
        };
        let selector = &backing.queue.get().queue.device().selector;
        let details = match &backing.source {
            Source::Devbuf(handouts) => details(handouts.resource().as_ref()),
            Source::Python(_) => String::new(),
        };
        Ok(format!("<{module}.{name} on {selector:?}{details}>"))
    }
}

/// An argument that may be left out.
type Optional<'py> = Option<Bound<'py, PyAny>>;

/// `__init__`'s `(device=None, upstream_mr=None)`, from what Python passed.
fn init_arguments<'py>(
    args: &Bound<'py, PyTuple>,
    kwargs: Option<&Bound<'py, PyDict>>,
) -> PyResult<(Optional<'py>, Optional<'py>)> {
    const NAMES: [&str; 2] = ["device", "upstream_mr"];
    if args.len() > NAMES.len() {
        return Err(PyTypeError::new_err(format!(
            "MemoryResource.__init__ takes device and upstream_mr, got {} positional arguments",
            args.len()
        )));
    }
    let mut values = [None, None];
    for (value, arg) in values.iter_mut().zip(args.iter()) {
        *value = Some(arg);
    }
    for (key, arg) in kwargs.into_iter().flatten() {
        let key: String = key.extract()?;
        match NAMES.iter().position(|name| *name == key) {
            Some(at) if values[at].is_none() => values[at] = Some(arg),
            Some(_) => {
                return Err(PyTypeError::new_err(format!(
                    "MemoryResource.__init__ got {key} twice"
                )));
            }
            None => {
                return Err(PyTypeError::new_err(format!(
                    "MemoryResource.__init__ got an unexpected keyword argument {key:?} \
                     (it takes device and upstream_mr)"
                )));
            }
        }
    }
    let [device, upstream] = values;
    let device = device.filter(|device| !device.is_none());
    let upstream = upstream.filter(|upstream| !upstream.is_none());
    Ok((device, upstream))
}

/// The error of a subclass written in Python that left `method` to the base class.
fn must_implement(slf: &Bound<'_, PyMemoryResource>, method: &str) -> PyErr {
    let name = slf
        .get_type()
        .name()
        .map_or_else(|_| "?".into(), |n| n.to_string());
    PyNotImplementedError::new_err(format!(
        "{name}.{method}: a MemoryResource written in Python implements allocate and deallocate"
    ))
}

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

/// The `mr=` argument of `devbuf.alloc` and the `upstream_mr` of a resource written in Python.
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
