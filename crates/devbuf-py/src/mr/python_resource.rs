//! Memory resources written in Python: a subclass of `devbuf.mr.MemoryResource` whose
//! `allocate(nbytes, kind)` returns an address and whose `deallocate(ptr, nbytes, kind)` frees
//! it, served to devbuf (its buffers, the adaptors over it, the current resource) as any
//! resource. What `allocate` raises reaches devbuf's caller as raised; what `deallocate` raises
//! goes to `sys.unraisablehook` (a deallocator has no caller to raise to).

use std::cell::RefCell;
use std::fmt;
use std::ptr::NonNull;
use std::sync::Arc;

use devbuf::mr::{FreeAfter, MemoryResource};
use devbuf::{MemKind, Queue};
use pyo3::exceptions::{PyRecursionError, PyTypeError, PyValueError};
use pyo3::intern;
use pyo3::prelude::*;

use crate::shutdown;

/// The devbuf resource of one object of a subclass written in Python.
pub(crate) struct PythonResource {
    object: Py<PyAny>,
    queue: Arc<dyn Queue>,
    /// The class's name, for messages and `Debug` (which cannot reach Python).
    name: String,
}

impl fmt::Debug for PythonResource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "PythonResource({} on {})",
            self.name,
            self.queue.device().selector
        )
    }
}

thread_local! {
    /// The resources whose `allocate` runs on this thread, innermost last.
    static ALLOCATING: RefCell<Vec<usize>> = const { RefCell::new(Vec::new()) };
}

impl PythonResource {
    /// The resource that calls `object`, a `devbuf.mr.MemoryResource` subclass's, on `queue`.
    pub(crate) fn new(
        object: &Bound<'_, PyAny>,
        queue: Arc<dyn Queue>,
    ) -> PyResult<Arc<PythonResource>> {
        Ok(Arc::new(PythonResource {
            object: object.clone().unbind(),
            queue,
            name: object.get_type().name()?.to_string(),
        }))
    }

    /// The devbuf error that carries `err` out of `allocate`: `errors::to_py` raises `err` itself.
    fn raised(&self, py: Python<'_>, kind: MemKind, size: usize, err: PyErr) -> devbuf::Error {
        let context = format!(
            "cannot allocate {size} bytes of {kind} memory on {} from {}",
            self.queue.device().selector,
            self.name
        );
        crate::errors::carry(py, context, err)
    }

    fn allocate_attached(
        &self,
        py: Python<'_>,
        kind: MemKind,
        size: usize,
        align: usize,
    ) -> devbuf::Result<NonNull<u8>> {
        let this = self as *const Self as usize;
        if ALLOCATING.with_borrow(|active| active.contains(&this)) {
            let err = PyRecursionError::new_err(format!(
                "{}.allocate allocated from itself (through the current resource or an adaptor \
                 over it); allocate from its upstream resource instead",
                self.name
            ));
            return Err(self.raised(py, kind, size, err));
        }
        ALLOCATING.with_borrow_mut(|active| active.push(this));
        let allocate = intern!(py, "allocate");
        let returned = shutdown::call_method(self.object.bind(py), allocate, (size, kind.as_str()));
        ALLOCATING.with_borrow_mut(|active| active.retain(|&other| other != this));
        let returned = returned.map_err(|err| self.raised(py, kind, size, err))?;
        let address = returned.extract::<usize>().map_err(|_| {
            let what = returned
                .repr()
                .map_or_else(|_| "?".into(), |r| r.to_string());
            let err = PyTypeError::new_err(format!(
                "{}.allocate returned {what}; it returns the address of the memory, an int",
                self.name
            ));
            self.raised(py, kind, size, err)
        })?;
        let Some(ptr) = NonNull::new(address as *mut u8).filter(|_| address.is_multiple_of(align))
        else {
            if address != 0 {
                // Not usable, but it was handed out: it goes back.
                self.call_deallocate(py, address, kind, size);
            }
            let err = PyValueError::new_err(format!(
                "{}.allocate returned {address:#x} for {size} bytes; devbuf needs a non-null \
                 address aligned to {align} bytes",
                self.name
            ));
            return Err(self.raised(py, kind, size, err));
        };
        // The address is untrusted, as an import's pointer is: the runtime must know it as
        // `kind` memory of this device, all `size` bytes of it.
        if let Err(refused) = devbuf::extent::check_handed_out(&*self.queue, address, size, kind) {
            self.call_deallocate(py, address, kind, size);
            let err = match refused {
                devbuf::Error::InvalidDescriptor { message, .. } => PyValueError::new_err(format!(
                    "{}.allocate returned {message}; a resource returns memory of the kind asked, \
                     on its own device",
                    self.name
                )),
                other => crate::errors::to_py(other),
            };
            return Err(self.raised(py, kind, size, err));
        }
        Ok(ptr)
    }

    fn call_deallocate(&self, py: Python<'_>, address: usize, kind: MemKind, size: usize) {
        let object = self.object.bind(py);
        let deallocate = intern!(py, "deallocate");
        if let Err(err) = shutdown::call_method(object, deallocate, (address, size, kind.as_str()))
        {
            err.write_unraisable(py, Some(object));
        }
    }
}

impl MemoryResource for PythonResource {
    fn queue(&self) -> &Arc<dyn Queue> {
        &self.queue
    }

    fn allocate(&self, kind: MemKind, size: usize, align: usize) -> devbuf::Result<NonNull<u8>> {
        shutdown::attach(|py| self.allocate_attached(py, kind, size, align)).unwrap_or_else(|| {
            Err(devbuf::Error::OutOfMemory {
                kind,
                size,
                device: self.queue.device().selector.clone(),
                reason: format!(
                    "{} is written in Python, which has shut down or is shutting down",
                    self.name
                ),
            })
        })
    }

    unsafe fn deallocate(
        &self,
        ptr: NonNull<u8>,
        kind: MemKind,
        size: usize,
        _align: usize,
        after: FreeAfter,
    ) {
        // Python code may hand the memory out again at once: it gets it back only once the work
        // on it is done. Memory whose wait failed may still be in use, and is not given back.
        if devbuf::ordering::wait_before_handing_back(&self.queue, &after).is_err() {
            return;
        }
        // Past the interpreter's end (or during it, on a thread that must not attach) nothing can
        // be called: the memory goes with the process.
        shutdown::attach(|py| self.call_deallocate(py, ptr.as_ptr() as usize, kind, size));
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}
