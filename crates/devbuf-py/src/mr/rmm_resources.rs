//! RMM's binning, fixed-size, logging, failure-callback and prefetch resources, each holding one of
//! `devbuf::mr`'s, and `replay`, which runs a logging adaptor's log again against any resource.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::{self, BufReader};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::{Arc, Weak};

use devbuf::MemKind;
use devbuf::mr::{
    BinningResource, DEFAULT_BLOCK_SIZE, DEFAULT_BLOCKS_TO_PREALLOCATE, FailureCallbackResource,
    FixedSizeResource, LogSink, LoggingResource, MemoryResource, PrefetchResource,
};
use parking_lot::Mutex;
use pyo3::exceptions::{PyOSError, PyTypeError, PyValueError};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyString};
use pyo3::{PyTraverseError, PyVisit};

use crate::errors::{IntoPyResult, carry};
use crate::mr::memory_resource::{PyMemoryResource, resource_arg, resource_of};
use crate::shutdown;
use crate::values::int_args;

/// Blocks of one size (`block_size`, rounded up to a multiple of 256) cut from chunks of
/// `blocks_to_preallocate` blocks taken from `upstream_mr`; a larger request is a MemoryError.
#[pyclass(frozen, extends = PyMemoryResource, module = "devbuf.mr", name = "FixedSizeMemoryResource")]
pub struct PyFixedSizeResource;

#[pymethods]
impl PyFixedSizeResource {
    #[new]
    #[pyo3(
        signature = (upstream_mr, block_size = DEFAULT_BLOCK_SIZE, blocks_to_preallocate = DEFAULT_BLOCKS_TO_PREALLOCATE),
        text_signature = "(upstream_mr, block_size=1048576, blocks_to_preallocate=128)"
    )]
    fn new(
        upstream_mr: &Bound<'_, PyMemoryResource>,
        #[pyo3(from_py_with = int_args::block_size)] block_size: usize,
        #[pyo3(from_py_with = int_args::blocks_to_preallocate)] blocks_to_preallocate: usize,
    ) -> PyResult<PyClassInitializer<Self>> {
        let fixed = PyMemoryResource::try_over(upstream_mr, |up| {
            let fixed: Arc<dyn MemoryResource> =
                FixedSizeResource::new(up, block_size, blocks_to_preallocate)?;
            Ok(fixed)
        })?;
        Ok(PyClassInitializer::from(fixed).add_subclass(PyFixedSizeResource))
    }

    /// The size of every block, in bytes.
    #[getter]
    fn block_size(slf: PyRef<'_, Self>) -> usize {
        slf.as_super().adaptor::<FixedSizeResource>().block_size()
    }

    /// The bytes taken from upstream, of every kind.
    fn get_upstream_bytes(slf: PyRef<'_, Self>) -> usize {
        slf.as_super()
            .adaptor::<FixedSizeResource>()
            .upstream_bytes()
    }
}

/// Sends each request to the smallest bin it fits, the rest to `upstream_mr`: with exponents, a
/// `FixedSizeMemoryResource` bin for each power of two from `2**min_size_exponent` to
/// `2**max_size_exponent`; `add_bin` adds more before the first allocation.
#[pyclass(frozen, extends = PyMemoryResource, module = "devbuf.mr", name = "BinningMemoryResource")]
pub struct PyBinningResource {
    /// The resource the bins devbuf makes allocate from.
    upstream: Py<PyMemoryResource>,
    /// The bins' Python objects, by allocation size, smallest first.
    bins: Mutex<Vec<(usize, Py<PyMemoryResource>)>>,
}

impl PyBinningResource {
    /// Records `bin` (its object, or a new `FixedSizeMemoryResource` object for the bin devbuf
    /// made) as the bin for `size`.
    fn record(
        &self,
        upstream: &Bound<'_, PyMemoryResource>,
        size: usize,
        made: Arc<dyn MemoryResource>,
        given: Option<Bound<'_, PyMemoryResource>>,
    ) -> PyResult<()> {
        let object = match given {
            Some(object) => object.unbind(),
            None => wrap_fixed_size(upstream, made)?,
        };
        let mut bins = self.bins.lock();
        bins.retain(|(known, _)| *known != size);
        let at = bins.partition_point(|(known, _)| *known < size);
        bins.insert(at, (size, object));
        Ok(())
    }
}

/// A `FixedSizeMemoryResource` object for a bin devbuf made over `upstream`.
fn wrap_fixed_size(
    upstream: &Bound<'_, PyMemoryResource>,
    made: Arc<dyn MemoryResource>,
) -> PyResult<Py<PyMemoryResource>> {
    let py = upstream.py();
    let resource = PyMemoryResource::over(upstream, |_| made)?;
    let initializer = PyClassInitializer::from(resource).add_subclass(PyFixedSizeResource);
    Ok(Bound::new(py, initializer)?.into_super().unbind())
}

#[pymethods]
impl PyBinningResource {
    #[new]
    #[pyo3(
        signature = (upstream_mr, min_size_exponent = -1, max_size_exponent = -1),
        text_signature = "(upstream_mr, min_size_exponent=-1, max_size_exponent=-1)"
    )]
    fn new(
        upstream_mr: &Bound<'_, PyMemoryResource>,
        #[pyo3(from_py_with = int_args::min_size_exponent)] min_size_exponent: i32,
        #[pyo3(from_py_with = int_args::max_size_exponent)] max_size_exponent: i32,
    ) -> PyResult<PyClassInitializer<Self>> {
        let binning = match (min_size_exponent, max_size_exponent) {
            (-1, -1) => BinningResource::new(resource_of(upstream_mr)?),
            (min, max) => {
                let exponent = |value: i32, name: &str| {
                    u32::try_from(value).map_err(|_| {
                        PyValueError::new_err(format!(
                            "{name}: {value} is not an exponent (both are -1, for no bins, or \
                             both at least 0)"
                        ))
                    })
                };
                let (min, max) = (
                    exponent(min, "min_size_exponent")?,
                    exponent(max, "max_size_exponent")?,
                );
                BinningResource::with_exponents(resource_of(upstream_mr)?, min, max).py()?
            }
        };
        let this = PyBinningResource {
            upstream: upstream_mr.clone().unbind(),
            bins: Mutex::default(),
        };
        for (size, bin) in binning.bins() {
            this.record(upstream_mr, size, bin, None)?;
        }
        let resource = PyMemoryResource::over(upstream_mr, |_| binning)?;
        Ok(PyClassInitializer::from(resource).add_subclass(this))
    }

    /// Serves requests up to `allocation_size` bytes from `bin_resource` (a resource on the same
    /// device), or from a new `FixedSizeMemoryResource` of blocks of that size over upstream.
    /// Bins are added before the first allocation (ValueError after).
    #[pyo3(signature = (allocation_size, bin_resource = None))]
    fn add_bin(
        slf: PyRef<'_, Self>,
        #[pyo3(from_py_with = int_args::allocation_size)] allocation_size: usize,
        bin_resource: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let py = slf.py();
        let given = bin_resource
            .filter(|bin| !bin.is_none())
            .map(|bin| {
                resource_arg(bin).map_err(|_| {
                    PyTypeError::new_err(format!(
                        "bin_resource: expected a devbuf.mr.MemoryResource, got {}",
                        bin.get_type()
                    ))
                })
            })
            .transpose()?;
        let bin = given.as_ref().map(resource_of).transpose()?;
        let made = slf
            .as_super()
            .adaptor::<BinningResource>()
            .add_bin(allocation_size, bin)
            .py()?;
        slf.record(slf.upstream.bind(py), allocation_size, made, given)
    }

    /// The bins' resources, smallest allocation size first.
    #[getter]
    fn bin_mrs(&self, py: Python<'_>) -> Vec<Py<PyMemoryResource>> {
        self.bins
            .lock()
            .iter()
            .map(|(_, bin)| bin.clone_ref(py))
            .collect()
    }
}

/// A Python text stream as a log sink: each line written with the interpreter attached (no lock
/// of devbuf's held meanwhile).
#[derive(Debug)]
struct StreamSink(Py<PyAny>);

impl LogSink for StreamSink {
    fn write_line(&self, line: &str) -> io::Result<()> {
        shutdown::attach(|py| {
            let write = intern!(py, "write");
            shutdown::call_method(self.0.bind(py), write, (format!("{line}\n"),))
                .map(drop)
                .map_err(|err| io::Error::other(err.to_string()))
        })
        .unwrap_or_else(|| Err(io::Error::other("Python has shut down")))
    }

    fn flush(&self) -> io::Result<()> {
        shutdown::attach(|py| {
            let stream = self.0.bind(py);
            if !stream.hasattr(intern!(py, "flush")).unwrap_or(false) {
                return Ok(());
            }
            shutdown::call_method(stream, intern!(py, "flush"), ())
                .map(drop)
                .map_err(|err| io::Error::other(err.to_string()))
        })
        .unwrap_or(Ok(()))
    }
}

/// Logs every allocation and free through it as a CSV line with RMM's columns (Thread, Time,
/// Action, Pointer, Size, Stream) and devbuf's Kind and Device, to the file `log_file_name`
/// (default: the environment variable `DEVBUF_LOG_FILE`) or to a text stream (an object with
/// `write`). `devbuf.mr.replay` runs the log again against any resource.
#[pyclass(frozen, extends = PyMemoryResource, module = "devbuf.mr", name = "LoggingResourceAdaptor")]
pub struct PyLoggingResource {
    file_name: Option<OsString>,
}

#[pymethods]
impl PyLoggingResource {
    #[new]
    #[pyo3(signature = (upstream_mr, log_file_name = None, *, auto_flush = false))]
    fn new(
        py: Python<'_>,
        upstream_mr: &Bound<'_, PyMemoryResource>,
        log_file_name: Option<&Bound<'_, PyAny>>,
        auto_flush: bool,
    ) -> PyResult<PyClassInitializer<Self>> {
        let upstream = resource_of(upstream_mr)?;
        let log_file_name = log_file_name.filter(|name| !name.is_none());
        let (logging, file_name) = match log_file_name {
            Some(stream)
                if !stream.is_instance_of::<PyString>()
                    && stream.hasattr(intern!(py, "write"))? =>
            {
                let sink = Arc::new(StreamSink(stream.clone().unbind()));
                (LoggingResource::new(upstream, sink).py()?, None)
            }
            Some(path) => {
                let path = os_path(path).map_err(|_| {
                    PyTypeError::new_err(format!(
                        "log_file_name: expected a path or a text stream, got {}",
                        path.get_type()
                    ))
                })?;
                let logging = LoggingResource::to_file(upstream, &path, auto_flush).py()?;
                (logging, Some(path))
            }
            None => {
                let path = std::env::var_os("DEVBUF_LOG_FILE").ok_or_else(|| {
                    PyValueError::new_err(
                        "log_file_name: none given, and the environment variable \
                         DEVBUF_LOG_FILE is not set",
                    )
                })?;
                let logging = LoggingResource::to_file(upstream, &path, auto_flush).py()?;
                (logging, Some(path))
            }
        };
        let resource = PyMemoryResource::over(upstream_mr, |_| logging)?;
        Ok(PyClassInitializer::from(resource).add_subclass(PyLoggingResource { file_name }))
    }

    /// Writes out the buffered lines; OSError names the first line that could not be written.
    fn flush(slf: PyRef<'_, Self>, py: Python<'_>) -> PyResult<()> {
        let logging: &LoggingResource = slf.as_super().adaptor();
        py.detach(|| logging.flush())
            .map_err(|err| PyOSError::new_err(format!("the log could not be written: {err}")))
    }

    /// The log file's path; None when logging to a stream.
    fn get_file_name(&self) -> Option<OsString> {
        self.file_name.clone()
    }
}

/// A path as the OS takes it, as `open()` does: `os.fsencode` of a str (undecodable bytes kept
/// through their surrogate escapes), bytes, or an `os.PathLike`.
fn os_path(path: &Bound<'_, PyAny>) -> PyResult<OsString> {
    let py = path.py();
    let encoded = py
        .import(intern!(py, "os"))?
        .call_method1(intern!(py, "fsencode"), (path,))?
        .cast_into::<PyBytes>()?;
    Ok(OsStr::from_bytes(encoded.as_bytes()).to_os_string())
}

/// Passes allocations on to `upstream_mr`; on a MemoryError calls `callback(nbytes)`, which
/// frees what it can (spilling a cache, say) and returns whether to try again (RMM's
/// `FailureCallbackResourceAdaptor`). What the callback raises reaches the caller.
#[pyclass(frozen, extends = PyMemoryResource, module = "devbuf.mr", name = "FailureCallbackResourceAdaptor")]
pub struct PyFailureCallbackResource {
    /// The callback, held here only: devbuf's adaptor reaches it weakly. Every way to allocate
    /// through the adaptor holds this object (directly, as an upstream, or as a current
    /// resource), and a callback that holds buffers of the adaptor, or this object, is then a
    /// cycle Python's collector sees (`__traverse__`) and breaks (`__clear__`).
    callback: Arc<Mutex<Option<Py<PyAny>>>>,
}

#[pymethods]
impl PyFailureCallbackResource {
    #[new]
    fn new(
        upstream_mr: &Bound<'_, PyMemoryResource>,
        callback: &Bound<'_, PyAny>,
    ) -> PyResult<PyClassInitializer<Self>> {
        if !callback.is_callable() {
            return Err(PyTypeError::new_err(format!(
                "callback: expected a callable taking the bytes asked for, got {}",
                callback.get_type()
            )));
        }
        let held = Arc::new(Mutex::new(Some(callback.clone().unbind())));
        let reached = Arc::downgrade(&held);
        let adaptor = PyMemoryResource::over(upstream_mr, move |up| {
            FailureCallbackResource::new(up, move |kind, size, error| {
                call_back(&reached, kind, size, error)
            })
        })?;
        let this = PyFailureCallbackResource { callback: held };
        Ok(PyClassInitializer::from(adaptor).add_subclass(this))
    }

    /// The callback (None once the collector has cleared it).
    #[getter]
    fn callback(&self, py: Python<'_>) -> Option<Py<PyAny>> {
        self.callback
            .lock()
            .as_ref()
            .map(|callback| callback.clone_ref(py))
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        // Never blocks in the collector: a thread holding the lock only clones the reference.
        if let Some(guard) = self.callback.try_lock()
            && let Some(callback) = guard.as_ref()
        {
            visit.call(callback)?;
        }
        Ok(())
    }

    fn __clear__(&self) {
        let cleared = self.callback.lock().take();
        drop(cleared);
    }
}

/// Calls the Python callback for an allocation upstream refused: whether to retry, or the devbuf
/// error that carries what it raised.
fn call_back(
    callback: &Weak<Mutex<Option<Py<PyAny>>>>,
    kind: MemKind,
    size: usize,
    error: &devbuf::Error,
) -> devbuf::Result<bool> {
    let raised = |err: PyErr| {
        let device = match error {
            devbuf::Error::OutOfMemory { device, .. } => device.as_str(),
            _ => "",
        };
        let context = format!(
            "cannot allocate {size} bytes of {kind} memory on {device}: the failure callback raised"
        );
        Python::attach(|py| carry(py, context, err))
    };
    // Past the interpreter's end (or during it) there is no callback to ask: no retry.
    shutdown::attach(|py| {
        // Gone with the adaptor's Python object, or cleared by the collector: no retry.
        let Some(held) = callback.upgrade() else {
            return Ok(false);
        };
        let Some(callback) = held.lock().as_ref().map(|callback| callback.clone_ref(py)) else {
            return Ok(false);
        };
        let returned = shutdown::call(callback.bind(py), (size,), None).map_err(raised)?;
        shutdown::is_true(&returned).map_err(raised)
    })
    .unwrap_or(Ok(false))
}

/// Prefetches each shared allocation made through it to the device, on the resource's queue
/// (RMM's `PrefetchResourceAdaptor`); on a backend without prefetch, passes allocations through.
#[pyclass(frozen, extends = PyMemoryResource, module = "devbuf.mr", name = "PrefetchResourceAdaptor")]
pub struct PyPrefetchResource;

#[pymethods]
impl PyPrefetchResource {
    #[new]
    fn new(upstream_mr: &Bound<'_, PyMemoryResource>) -> PyResult<PyClassInitializer<Self>> {
        let prefetching = PyMemoryResource::over(upstream_mr, |up| PrefetchResource::new(up))?;
        Ok(PyClassInitializer::from(prefetching).add_subclass(PyPrefetchResource))
    }
}

/// Runs every allocation and free of the log at `log_file_name` (a `LoggingResourceAdaptor`'s,
/// or RMM's) against `mr`, in order, on this thread; allocations of `kind` where the log has no
/// Kind column. Returns what it did: allocations, frees, failures (refused by `mr`),
/// unmatched_frees (of addresses allocated before the log began, or refused), peak_bytes, left_live
/// (freed at the end) and seconds (spent in `mr`).
#[pyfunction]
#[pyo3(signature = (log_file_name, mr, kind = "device"))]
pub fn replay<'py>(
    py: Python<'py>,
    log_file_name: &Bound<'py, PyAny>,
    mr: &Bound<'py, PyAny>,
    kind: &str,
) -> PyResult<Bound<'py, PyDict>> {
    let kind: MemKind = kind.parse().py()?;
    let resource = resource_of(&resource_arg(mr)?)?;
    let path = os_path(log_file_name).map_err(|_| {
        PyTypeError::new_err(format!(
            "log_file_name: expected a path, got {}",
            log_file_name.get_type()
        ))
    })?;
    let file = File::open(&path).map_err(|err| {
        PyOSError::new_err(format!(
            "log_file_name: cannot open {}: {err}",
            Path::new(&path).display()
        ))
    })?;
    let report = py
        .detach(|| devbuf::mr::replay(BufReader::new(file), &resource, kind))
        .py()?;
    let dict = PyDict::new(py);
    dict.set_item("allocations", report.allocations)?;
    dict.set_item("frees", report.frees)?;
    dict.set_item("failures", report.failures)?;
    dict.set_item("unmatched_frees", report.unmatched_frees)?;
    dict.set_item("peak_bytes", report.peak_bytes)?;
    dict.set_item("left_live", report.left_live)?;
    dict.set_item("seconds", report.elapsed.as_secs_f64())?;
    Ok(dict)
}

/// Adds the classes and `replay` to the `_devbuf` module (re-exported by `devbuf.mr`).
pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyFixedSizeResource>()?;
    m.add_class::<PyBinningResource>()?;
    m.add_class::<PyLoggingResource>()?;
    m.add_class::<PyFailureCallbackResource>()?;
    m.add_class::<PyPrefetchResource>()?;
    m.add_function(wrap_pyfunction!(replay, m)?)?;
    Ok(())
}
