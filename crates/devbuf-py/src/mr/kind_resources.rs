//! RMM's resources of one kind each (`DeviceMemoryResource` for RMM's `CudaMemoryResource`,
//! `ManagedMemoryResource`, `PinnedHostMemoryResource`), the stream-ordered pool of RMM's
//! `CudaAsyncMemoryResource` (`AsyncMemoryResource`), and sizes written as strings.

use std::sync::Arc;

use devbuf::MemKind;
use devbuf::mr::{
    OneKindResource, PoolOptions, PoolResource, QueueResource, ReleaseThresholdResource,
};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyString;

use crate::errors::IntoPyResult;
use crate::mr::memory_resource::PyMemoryResource;
use crate::objects::foreign_objects::resolve_queue;
use crate::objects::queue::PyQueue;

/// A bottom resource of `device`'s `kind` memory only.
fn one_kind(
    py: Python<'_>,
    device: Option<&Bound<'_, PyAny>>,
    kind: MemKind,
) -> PyResult<PyMemoryResource> {
    let queue: Py<PyQueue> = resolve_queue(py, device)?;
    let resource =
        OneKindResource::new(QueueResource::new(Arc::clone(queue.get().held())), kind).py()?;
    Ok(PyMemoryResource::devbuf(resource, queue, None))
}

/// A `devbuf.mr` class whose resource is a device's memory of one kind only, whatever kind a
/// caller asks for ([`one_kind`]): the class, its Python name, the kind, and `subclass` where
/// Python code subclasses it.
macro_rules! one_kind_resource {
    ($(#[$doc:meta])* $class:ident, $python_name:tt, $kind:expr $(, $subclass:ident)?) => {
        $(#[$doc])*
        #[pyclass(frozen, extends = PyMemoryResource, $($subclass,)? module = "devbuf.mr", name = $python_name)]
        pub struct $class;

        #[pymethods]
        impl $class {
            #[new]
            #[pyo3(signature = (device = None))]
            fn new(
                py: Python<'_>,
                device: Option<&Bound<'_, PyAny>>,
            ) -> PyResult<PyClassInitializer<Self>> {
                Ok(PyClassInitializer::from(one_kind(py, device, $kind)?).add_subclass($class))
            }
        }
    };
}

one_kind_resource!(
    /// The device's device memory, whatever kind a caller asks for (RMM's `CudaMemoryResource`;
    /// cuda.core's `DeviceMemoryResource`): as the current resource, every buffer of the device is
    /// device memory, as with RMM's.
    PyDeviceResource,
    "DeviceMemoryResource",
    MemKind::Device,
    subclass
);

one_kind_resource!(
    /// The device's shared memory, which migrates between host and device (RMM's
    /// `ManagedMemoryResource`: CUDA managed memory, SYCL shared USM), whatever kind is asked.
    PyManagedResource,
    "ManagedMemoryResource",
    MemKind::Shared
);

one_kind_resource!(
    /// The device's host memory, which the device reaches (RMM's `PinnedHostMemoryResource`: CUDA
    /// pinned memory, SYCL host USM), whatever kind is asked.
    PyPinnedHostResource,
    "PinnedHostMemoryResource",
    MemKind::Host
);

/// A stream-ordered pool of the device's `kind` memory (default "device"; "shared" is RMM's
/// experimental `CudaAsyncManagedMemoryResource`), with the settings of RMM's
/// `CudaAsyncMemoryResource`: `initial_pool_size` bytes taken at construction (default 0; sizes as ints or strings, "4MiB"),
/// and, once memory is freed, the pool's empty blocks given back while it holds more than
/// `release_threshold` bytes (default None: kept until `release()`). devbuf's pool over the
/// device's allocator, on every backend with device memory. `enable_ipc=True` is a ValueError:
/// IPC-shareable memory comes from `devbuf.alloc(..., ipc=True)`.
#[pyclass(frozen, extends = PyMemoryResource, module = "devbuf.mr", name = "AsyncMemoryResource")]
pub struct PyAsyncResource;

#[pymethods]
impl PyAsyncResource {
    #[new]
    #[pyo3(signature = (device = None, *, kind = "device", initial_pool_size = None, release_threshold = None, enable_ipc = false))]
    fn new(
        py: Python<'_>,
        device: Option<&Bound<'_, PyAny>>,
        kind: &str,
        initial_pool_size: Option<&Bound<'_, PyAny>>,
        release_threshold: Option<&Bound<'_, PyAny>>,
        enable_ipc: bool,
    ) -> PyResult<PyClassInitializer<Self>> {
        if enable_ipc {
            return Err(PyValueError::new_err(
                "enable_ipc: devbuf's pools hand out no IPC-shareable memory; allocate it with \
                 devbuf.alloc(nbytes, \"device\", ipc=True) and share its ipc_handle()",
            ));
        }
        let kind: MemKind = kind.parse().py()?;
        let initial = byte_size(initial_pool_size, "initial_pool_size")?.unwrap_or(0);
        let threshold = byte_size(release_threshold, "release_threshold")?;
        let queue: Py<PyQueue> = resolve_queue(py, device)?;
        let upstream: Arc<dyn devbuf::mr::MemoryResource> =
            OneKindResource::new(QueueResource::new(Arc::clone(queue.get().held())), kind).py()?;
        let options = PoolOptions {
            initial_size: initial,
            maximum_size: None,
        };
        let pool = py
            .detach(|| PoolResource::reserved(upstream, options, kind))
            .py()?;
        let resource: Arc<dyn devbuf::mr::MemoryResource> = match threshold {
            Some(threshold) => ReleaseThresholdResource::new(pool, threshold),
            None => pool,
        };
        Ok(
            PyClassInitializer::from(PyMemoryResource::devbuf(resource, queue, None))
                .add_subclass(PyAsyncResource),
        )
    }

    /// Bytes the pool holds from the device.
    fn pool_size(slf: PyRef<'_, Self>) -> usize {
        let base = slf.as_super();
        match base.resource_as::<ReleaseThresholdResource>() {
            Some(resource) => resource.pool().pool_size(),
            None => base.adaptor::<PoolResource>().pool_size(),
        }
    }

    /// The `release_threshold` given (None: empty blocks are kept until `release()`).
    #[getter]
    fn release_threshold(slf: PyRef<'_, Self>) -> Option<usize> {
        slf.as_super()
            .resource_as::<ReleaseThresholdResource>()
            .map(ReleaseThresholdResource::release_threshold)
    }

    /// Gives every empty block back to the device.
    fn release(slf: PyRef<'_, Self>, py: Python<'_>) {
        let base = slf.as_super();
        let pool = match base.resource_as::<ReleaseThresholdResource>() {
            Some(resource) => resource.pool().as_ref(),
            None => base.adaptor::<PoolResource>(),
        };
        py.detach(|| pool.release());
    }
}

/// A size argument as RMM takes it: an int, or a string `parse_bytes` reads ("4MiB").
pub(crate) fn byte_size(
    value: Option<&Bound<'_, PyAny>>,
    arg: &'static str,
) -> PyResult<Option<usize>> {
    let Some(value) = value.filter(|value| !value.is_none()) else {
        return Ok(None);
    };
    if let Ok(text) = value.cast::<PyString>() {
        return devbuf::mr::parse_bytes(arg, text.to_str()?).py().map(Some);
    }
    value.extract::<usize>().map(Some).map_err(|_| {
        PyValueError::new_err(format!(
            "{arg}: expected a number of bytes (an int of at least 0, or a string such as \"4MiB\"), got {}",
            value.repr().map_or_else(|_| "?".into(), |repr| repr.to_string())
        ))
    })
}

/// The bytes a size string means, as RMM's `parse_bytes`: a number, optional spaces, and an
/// optional unit, `b`, `kb` to `pb` (powers of 1000) or `kib` to `pib` (powers of 1024), in any
/// case ("4MiB", "2kib", "1.5 GB"); an int is returned as is. Anything else is a ValueError that
/// says "Could not parse".
#[pyfunction]
fn parse_bytes(value: &Bound<'_, PyAny>) -> PyResult<usize> {
    Ok(byte_size(Some(value), "value")?.unwrap_or(0))
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyDeviceResource>()?;
    m.add_class::<PyManagedResource>()?;
    m.add_class::<PyPinnedHostResource>()?;
    m.add_class::<PyAsyncResource>()?;
    m.add_function(wrap_pyfunction!(parse_bytes, m)?)?;
    Ok(())
}
