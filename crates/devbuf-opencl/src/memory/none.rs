//! [`NoMemory`]: the strategy of a device devbuf cannot allocate on.

use std::ptr::NonNull;

use devbuf_core::interop::Holder;
use devbuf_core::{MemKind, Result};
use opencl3::context::Context;

use super::strategy::{MemoryStrategy, QueueAccess};

/// A device with neither USM nor SVM: nothing to allocate, and the queue reaches host memory only,
/// so it copies and fills on the host.
pub(super) struct NoMemory;

impl MemoryStrategy for NoMemory {
    fn name(&self) -> &'static str {
        "none"
    }

    fn allocate(
        &self,
        queue: &dyn QueueAccess,
        kind: MemKind,
        _size: usize,
        _align: usize,
    ) -> Result<NonNull<u8>> {
        Err(queue.unsupported(
            format!("{kind} allocation"),
            "the device offers no memory devbuf can allocate".into(),
        ))
    }

    unsafe fn free(&self, _queue: &dyn QueueAccess, _ptr: NonNull<u8>) {}

    unsafe fn copy(
        &self,
        _queue: &dyn QueueAccess,
        dst: *mut u8,
        src: *const u8,
        len: usize,
    ) -> Result<()> {
        // SAFETY: the caller guarantees both ranges are valid for `len` bytes.
        unsafe { std::ptr::copy(src, dst, len) };
        Ok(())
    }

    unsafe fn fill(
        &self,
        queue: &dyn QueueAccess,
        dst: *mut u8,
        byte: u8,
        len: usize,
    ) -> Result<()> {
        queue.wait()?;
        // SAFETY: the caller guarantees `dst` is valid for `len` bytes.
        unsafe { std::ptr::write_bytes(dst, byte, len) };
        Ok(())
    }

    fn kind_of(&self, _context: &Context, _ptr: *const u8) -> MemKind {
        MemKind::Unknown
    }

    fn holder_of(&self, _context: &Context, _ptr: *const u8) -> Holder {
        Holder::Unknown
    }
}
