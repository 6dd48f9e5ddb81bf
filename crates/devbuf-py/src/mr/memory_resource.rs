//! `devbuf.mr.MemoryResource`, the base of every memory resource: what each holds (a
//! `devbuf::mr` resource with the Python queue its buffers report, or, for a subclass written in
//! Python, the `python_resource` that calls it), allocation, and memory by address. devbuf's
//! own resources and the current resource are in `resources`.

use std::sync::{Arc, OnceLock, Weak};

use devbuf::mr::{
    Handouts, LimitingResource, MemoryResource, PoolResource, StatisticsResource, TrackingResource,
};
use devbuf::{Buffer, DEFAULT_ALIGNMENT, MemKind};
use parking_lot::Mutex;
use pyo3::exceptions::{PyNotImplementedError, PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple, PyType};

use crate::errors::IntoPyResult;
use crate::mr::python_resource::PythonResource;
use crate::objects::array::PyBuffer;
use crate::objects::device::PyDevice;
use crate::objects::foreign_objects::resolve_queue;
use crate::objects::queue::PyQueue;

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
/// `sys.unraisablehook`, as for `__del__`. The address `allocate` returns is checked by the
/// device's runtime (kind, device and extent, where the runtime can tell): one it does not vouch
/// for goes back through `deallocate` and is a ValueError naming the resource.
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
    pub(crate) fn devbuf(
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
    pub(crate) fn over(
        upstream: &Bound<'_, PyMemoryResource>,
        wrap: impl FnOnce(Arc<dyn MemoryResource>) -> Arc<dyn MemoryResource>,
    ) -> PyResult<Self> {
        PyMemoryResource::try_over(upstream, |up| Ok(wrap(up)))
    }

    /// [`PyMemoryResource::over`] for an adaptor whose construction can fail.
    pub(crate) fn try_over(
        upstream: &Bound<'_, PyMemoryResource>,
        wrap: impl FnOnce(Arc<dyn MemoryResource>) -> devbuf::Result<Arc<dyn MemoryResource>>,
    ) -> PyResult<Self> {
        let backing = backing(upstream)?;
        let upstream_resource = resource_of(upstream)?;
        // A stack deeper than devbuf allows is refused before anything allocates through it
        // (or drops it): RecursionError naming `upstream_mr`.
        devbuf::mr::check_depth(&upstream_resource, "upstream_mr", 1).py()?;
        let resource = wrap(upstream_resource).py()?;
        Ok(PyMemoryResource::devbuf(
            resource,
            backing.queue.clone_ref(upstream.py()),
            Some(upstream.clone().unbind()),
        ))
    }

    /// The adaptor this class is named after.
    pub(crate) fn adaptor<T: 'static>(&self) -> &T {
        match self.backing.get().map(|backing| &backing.source) {
            Some(Source::Devbuf(handouts)) => handouts.resource().as_any().downcast_ref(),
            _ => None,
        }
        .expect("each devbuf class holds the resource it is named after")
    }

    /// The devbuf resource of type `T` this object holds, if it holds one.
    pub(crate) fn resource_as<T: 'static>(&self) -> Option<&T> {
        match self.backing.get().map(|backing| &backing.source) {
            Some(Source::Devbuf(handouts)) => handouts.resource().as_any().downcast_ref(),
            _ => None,
        }
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
        Ok(backing(slf)?.queue.get().held().device().selector.clone())
    }
}

/// Makes work enqueued on `later` from now on wait for all work enqueued on `earlier` so far,
/// other libraries' included (`devbuf::stream::order_stream_after`).
fn order_after(
    py: Python<'_>,
    later: &Arc<dyn devbuf::Queue>,
    earlier: &Arc<dyn devbuf::Queue>,
) -> PyResult<()> {
    py.detach(|| devbuf::ordering::order_stream_after(later, earlier))
        .py()
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
            let queue = Arc::clone(backing.queue.get().held());
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
            let asked = &queue.get().queue()?.device().selector;
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
    /// as RMM's `allocate`. `kind` None: the one kind the resource serves (a
    /// `DeviceMemoryResource`'s device memory...), else "shared"; a kind such a resource does not
    /// serve is a ValueError. It stays allocated until `deallocate(ptr, nbytes, kind)`, or until
    /// this resource object is deleted. For memory that frees itself, use
    /// `devbuf.alloc(nbytes, kind, mr=resource)`.
    ///
    /// With `stream` (a `devbuf.Stream` of the resource's device), work enqueued on that stream
    /// from now on waits until the memory is ready on the resource's own queue (a stream-ordered
    /// allocation), as RMM's `allocate(bytes, stream)`.
    #[pyo3(signature = (nbytes, kind = None, *, stream = None))]
    fn allocate(
        slf: &Bound<'_, Self>,
        #[pyo3(from_py_with = crate::values::int_args::nbytes)] nbytes: usize,
        kind: Option<&str>,
        stream: Option<&Bound<'_, PyQueue>>,
    ) -> PyResult<usize> {
        let kind = served_kind(slf, nbytes, kind)?;
        let backing = backing(slf)?;
        let Source::Devbuf(handouts) = &backing.source else {
            return Err(must_implement(slf, "allocate"));
        };
        let address = handouts.allocate(kind, nbytes).py()?;
        if let Some(stream) = stream {
            // The stream's later work follows the allocation on the resource's queue; memory
            // the caller never learns the address of goes back before the error is raised.
            let ordered = order_after(slf.py(), stream.get().queue()?, backing.queue.get().held());
            if let Err(err) = ordered {
                handouts.deallocate(address, kind, nbytes).py()?;
                return Err(err);
            }
        }
        Ok(address)
    }

    /// Frees what `allocate(nbytes, kind)` returned at `ptr`, as RMM's `deallocate`. An address
    /// this resource did not hand out (or took back already), or another size or kind, is a
    /// ValueError and nothing is freed. No work may still run on the memory, other than on this
    /// resource's queue, or on `stream` (a `devbuf.Stream` of the resource's device: the memory
    /// is then reused only after the work enqueued on it so far, as RMM's
    /// `deallocate(ptr, bytes, stream)`).
    #[pyo3(signature = (ptr, nbytes, kind = None, *, stream = None))]
    fn deallocate(
        slf: &Bound<'_, Self>,
        #[pyo3(from_py_with = crate::values::int_args::ptr)] ptr: usize,
        #[pyo3(from_py_with = crate::values::int_args::nbytes)] nbytes: usize,
        kind: Option<&str>,
        stream: Option<&Bound<'_, PyQueue>>,
    ) -> PyResult<()> {
        let kind = served_kind(slf, nbytes, kind)?;
        let backing = backing(slf)?;
        // Reused only once all work on the stream so far is done, other libraries' included.
        let after = match stream {
            Some(stream) => {
                let stream = stream.get().queue()?;
                slf.py()
                    .detach(|| devbuf::ordering::free_after_stream(stream))
                    .py()?
            }
            None => devbuf::mr::FreeAfter::Now,
        };
        match &backing.source {
            Source::Devbuf(handouts) => handouts.deallocate_after(ptr, kind, nbytes, after).py(),
            Source::Python(_) => Err(must_implement(slf, "deallocate")),
        }
    }

    fn __repr__(slf: &Bound<'_, Self>) -> PyResult<String> {
        let name = slf.get_type().qualname()?;
        let module = slf.get_type().module()?;
        let Some(backing) = slf.get().backing.get() else {
            return Ok(format!("<{module}.{name} (not initialised)>"));
        };
        let selector = &backing.queue.get().held().device().selector;
        let details = match &backing.source {
            Source::Devbuf(handouts) => details(handouts.resource().as_ref()),
            Source::Python(_) => String::new(),
        };
        Ok(format!("<{module}.{name} on {selector:?}{details}>"))
    }
}

/// The kind `allocate`/`deallocate` deal in: `kind` when given (refused when the resource serves
/// another kind whatever is asked), else the resource's kind for `nbytes`, else shared memory.
fn served_kind(
    slf: &Bound<'_, PyMemoryResource>,
    nbytes: usize,
    kind: Option<&str>,
) -> PyResult<MemKind> {
    let asked: MemKind = kind.unwrap_or("shared").parse().py()?;
    let backing = backing(slf)?;
    let Source::Devbuf(handouts) = &backing.source else {
        return Ok(asked);
    };
    let served = handouts
        .resource()
        .serves(asked, nbytes.max(1), DEFAULT_ALIGNMENT);
    if kind.is_some() && served != asked {
        let name = slf
            .get_type()
            .name()
            .map_or_else(|_| "?".into(), |n| n.to_string());
        return Err(PyValueError::new_err(format!(
            "kind: {name} serves {served} memory, not {asked}; leave kind out"
        )));
    }
    Ok(served)
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

/// The `mr=` argument of `devbuf.alloc` and the `upstream_mr` of a resource written in Python.
pub(crate) fn resource_arg<'py>(mr: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyMemoryResource>> {
    mr.cast::<PyMemoryResource>().cloned().map_err(|_| {
        PyTypeError::new_err(format!(
            "mr: expected a devbuf.mr.MemoryResource, got {}",
            mr.get_type()
        ))
    })
}
