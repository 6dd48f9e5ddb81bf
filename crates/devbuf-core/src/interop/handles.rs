//! What devbuf hands other libraries so that they can find or follow a queue's work: a native
//! stream handle ([`StreamHandle`]) and a runtime's queue handle ([`ExportedHandle`]).

use std::ffi::{CStr, c_void};
use std::fmt;
use std::num::NonZeroUsize;
use std::ptr::NonNull;

/// A queue's stream as the stream protocols name it to other libraries: CAI's `stream` entry,
/// the `stream` argument devbuf passes to a DLPack producer, `__cuda_stream__`. Never 0, which
/// every protocol that carries a stream rejects as ambiguous.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct StreamHandle(NonZeroUsize);

impl StreamHandle {
    /// The handle `value`, `None` for 0.
    pub const fn new(value: usize) -> Option<StreamHandle> {
        match NonZeroUsize::new(value) {
            Some(value) => Some(StreamHandle(value)),
            None => None,
        }
    }

    /// The handle as the protocols carry it (an integer).
    pub const fn get(self) -> usize {
        self.0.get()
    }
}

/// A runtime handle given away to a foreign library (e.g. a "SyclQueueRef" capsule payload).
/// Whoever receives it must call `destroy` once on `ptr`; dropping it unused destroys it.
pub struct ExportedHandle {
    /// The capsule name the protocol uses for this handle.
    pub name: &'static CStr,
    /// The handle itself.
    pub ptr: NonNull<c_void>,
    /// Releases the handle.
    pub destroy: unsafe extern "C" fn(*mut c_void),
}

impl ExportedHandle {
    /// Gives up ownership of the handle: the caller must call `destroy` on the returned pointer.
    pub fn into_raw(self) -> (NonNull<c_void>, unsafe extern "C" fn(*mut c_void)) {
        let parts = (self.ptr, self.destroy);
        std::mem::forget(self);
        parts
    }
}

impl Drop for ExportedHandle {
    fn drop(&mut self) {
        // SAFETY: the handle is still owned here (into_raw forgets self), so it is released once.
        unsafe { (self.destroy)(self.ptr.as_ptr()) }
    }
}

impl fmt::Debug for ExportedHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ExportedHandle({:?} at {:p})", self.name, self.ptr)
    }
}

// SAFETY: runtime handles (sycl::queue copies) are thread-safe reference-counted objects.
unsafe impl Send for ExportedHandle {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exported_handle_is_destroyed_once_unless_taken() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        static DESTROYED: AtomicUsize = AtomicUsize::new(0);
        unsafe extern "C" fn destroy(_: *mut c_void) {
            DESTROYED.fetch_add(1, Ordering::SeqCst);
        }
        let make = || ExportedHandle {
            name: c"SyclQueueRef",
            ptr: NonNull::dangling(),
            destroy,
        };
        drop(make());
        assert_eq!(DESTROYED.load(Ordering::SeqCst), 1);
        let (ptr, release) = make().into_raw();
        assert_eq!(DESTROYED.load(Ordering::SeqCst), 1);
        // SAFETY: we own the handle taken out above.
        unsafe { release(ptr.as_ptr()) };
        assert_eq!(DESTROYED.load(Ordering::SeqCst), 2);
    }

    #[test]
    fn a_stream_handle_is_never_zero() {
        assert_eq!(StreamHandle::new(0), None);
        assert_eq!(StreamHandle::new(7).map(StreamHandle::get), Some(7));
    }
}
