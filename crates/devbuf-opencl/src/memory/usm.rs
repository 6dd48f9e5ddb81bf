//! [`UsmMemory`]: Intel's `cl_intel_unified_shared_memory`, whose runtime allocates each kind
//! and knows every allocation a pointer falls in.

use std::collections::BTreeMap;
use std::ffi::c_void;
use std::ptr::NonNull;

use devbuf_core::interop::Holder;
use devbuf_core::{MemKind, Result};
use opencl3::context::Context;
use opencl3::error_codes::CL_INVALID_BUFFER_SIZE;
use opencl3::event::Event as ClEvent;
use opencl3::types::{CL_FALSE, cl_event, cl_int, cl_uint};
use parking_lot::Mutex;

use super::strategy::{MemoryStrategy, QueueAccess, out_of_memory, span_holding, unknown_fill};
use crate::usm_entry_points::{
    CL_MEM_ALLOC_BASE_PTR_INTEL, CL_MEM_ALLOC_SIZE_INTEL, UsmApi, UsmFree,
};

/// Memory through the platform's USM extension functions.
pub(super) struct UsmMemory {
    api: UsmApi,
    free: UsmFree,
    /// The allocations padded to meet an alignment the runtime ignored, by the address handed
    /// out: what the runtime returned, and the length handed out.
    padded: Mutex<BTreeMap<usize, Padded>>,
}

/// An allocation handed out inside a larger one of the runtime's.
#[derive(Debug, Clone, Copy)]
struct Padded {
    base: usize,
    len: usize,
}

impl UsmMemory {
    pub(super) fn new(api: UsmApi, free: UsmFree) -> UsmMemory {
        UsmMemory {
            api,
            free,
            padded: Mutex::new(BTreeMap::new()),
        }
    }

    /// The runtime's allocation of `size` bytes of `kind`, asked for with `align`.
    fn runtime_allocate(
        &self,
        queue: &dyn QueueAccess,
        kind: MemKind,
        size: usize,
        align: usize,
    ) -> Result<NonNull<u8>> {
        let api = &self.api;
        let context = queue.context().get();
        let device = queue.device_id();
        // The caller checked that the alignment fits.
        let alignment = align as cl_uint;
        let properties = std::ptr::null();
        let mut code = 0;
        // SAFETY: the context and device are live, no properties, and `code` outlives the call;
        // each returns new memory or null with the error in `code`.
        let (operation, ptr) = unsafe {
            match kind {
                MemKind::Host => (
                    "clHostMemAllocINTEL",
                    (api.host_alloc)(context, properties, size, alignment, &mut code),
                ),
                MemKind::Device => (
                    "clDeviceMemAllocINTEL",
                    (api.device_alloc)(context, device, properties, size, alignment, &mut code),
                ),
                MemKind::Shared | MemKind::Unknown => (
                    "clSharedMemAllocINTEL",
                    (api.shared_alloc)(context, device, properties, size, alignment, &mut code),
                ),
            }
        };
        NonNull::new(ptr.cast::<u8>())
            .ok_or_else(|| out_of_memory(queue, operation, kind, size, code))
    }

    /// The padded allocation holding `ptr`, with the address handed out.
    fn padded_holding(&self, ptr: *const u8) -> Option<(usize, Padded)> {
        span_holding(&self.padded, ptr, |padded| padded.len)
    }
}

/// A USM command's event, made from what the extension function wrote.
fn usm_event(code: cl_int, event: cl_event) -> std::result::Result<ClEvent, cl_int> {
    match code {
        0 => Ok(ClEvent::new(event)),
        code => Err(code),
    }
}

impl MemoryStrategy for UsmMemory {
    fn name(&self) -> &'static str {
        "usm"
    }

    fn allocate(
        &self,
        queue: &dyn QueueAccess,
        kind: MemKind,
        size: usize,
        align: usize,
    ) -> Result<NonNull<u8>> {
        let ptr = self.runtime_allocate(queue, kind, size, align)?;
        if (ptr.as_ptr() as usize).is_multiple_of(align) {
            return Ok(ptr);
        }
        // The runtime ignored the alignment (PoCL 5 and 6 check it, then allocate without it):
        // allocate more and hand out an aligned address inside.
        // SAFETY: `ptr` is new USM memory of this context that no command uses.
        unsafe { (self.api.free)(queue.context().get(), ptr.as_ptr().cast()) };
        let Some(padded_size) = size.checked_add(align.saturating_sub(1)) else {
            return Err(out_of_memory(
                queue,
                "clMemAllocINTEL",
                kind,
                size,
                CL_INVALID_BUFFER_SIZE,
            ));
        };
        let base = self.runtime_allocate(queue, kind, padded_size, align)?;
        let address = base.as_ptr() as usize;
        let padding = address
            .checked_next_multiple_of(align)
            .map_or(0, |aligned| aligned.saturating_sub(address));
        // SAFETY: `padding` < `align`, so the address and the `size` bytes after it lie in the
        // `size + align - 1` bytes allocated.
        let aligned = unsafe { base.add(padding) };
        let padded = Padded {
            base: base.as_ptr() as usize,
            len: size,
        };
        self.padded.lock().insert(aligned.as_ptr() as usize, padded);
        Ok(aligned)
    }

    unsafe fn free(&self, queue: &dyn QueueAccess, ptr: NonNull<u8>) {
        let padded = self.padded.lock().remove(&(ptr.as_ptr() as usize));
        let ptr = padded.map_or(ptr.as_ptr().cast(), |padded| padded.base as *mut c_void);
        let context = queue.context().get();
        match self.free {
            // SAFETY: `ptr` is a USM allocation of this context (the caller's contract); the
            // blocking free waits for the commands that may still use it.
            UsmFree::Blocking => unsafe { (self.api.blocking_free)(context, ptr) },
            // clMemFreeINTEL does not wait for commands: core waited for the work on the memory.
            // SAFETY: `ptr` is a USM allocation of this context with no command pending on it
            // (the caller's contract).
            UsmFree::AfterCoreWait => unsafe { (self.api.free)(context, ptr) },
        };
    }

    unsafe fn copy(
        &self,
        queue: &dyn QueueAccess,
        dst: *mut u8,
        src: *const u8,
        len: usize,
    ) -> Result<()> {
        let (dst, src) = (dst.cast::<c_void>(), src.cast::<c_void>());
        queue.submit("clEnqueueMemcpyINTEL", &mut |queue| {
            let mut event = std::ptr::null_mut();
            // SAFETY: the caller guarantees both ranges (USM or host memory, which the extension
            // accepts); the call writes the command's event on success.
            let code = unsafe {
                (self.api.enqueue_copy)(
                    queue.get(),
                    CL_FALSE,
                    dst,
                    src,
                    len,
                    0,
                    std::ptr::null(),
                    &mut event,
                )
            };
            usm_event(code, event)
        })
    }

    unsafe fn fill(
        &self,
        queue: &dyn QueueAccess,
        dst: *mut u8,
        byte: u8,
        len: usize,
    ) -> Result<()> {
        if dst.is_null() || self.kind_of(queue.context(), dst) == MemKind::Unknown {
            return Err(unknown_fill(queue, dst, len));
        }
        let dst_void = dst.cast::<c_void>();
        queue.submit("clEnqueueMemFillINTEL", &mut |queue| {
            let mut event = std::ptr::null_mut();
            // SAFETY: `dst` is our USM allocation, valid for `len` bytes (the caller's
            // contract); the one-byte pattern is copied at enqueue time.
            let code = unsafe {
                (self.api.enqueue_fill)(
                    queue.get(),
                    dst_void,
                    (&raw const byte).cast(),
                    1,
                    len,
                    0,
                    std::ptr::null(),
                    &mut event,
                )
            };
            usm_event(code, event)
        })
    }

    fn kind_of(&self, context: &Context, ptr: *const u8) -> MemKind {
        self.api.kind_of(context, ptr)
    }

    /// The runtime names the allocation holding any pointer into it (`clGetMemAllocInfoINTEL`'s
    /// base pointer and size).
    fn holder_of(&self, context: &Context, ptr: *const u8) -> Holder {
        let api = &self.api;
        let kind = api.kind_of(context, ptr);
        if kind == MemKind::Unknown {
            return Holder::Unknown;
        }
        // Within a padded allocation, the part handed out is the allocation.
        if let Some((start, padded)) = self.padded_holding(ptr) {
            // Memory the runtime handed out: its end does not wrap.
            let range = start..start.saturating_add(padded.len);
            return Holder::Allocation { kind, range };
        }
        let base = api.alloc_info::<*mut c_void>(context, ptr, CL_MEM_ALLOC_BASE_PTR_INTEL);
        let size = api.alloc_info::<usize>(context, ptr, CL_MEM_ALLOC_SIZE_INTEL);
        let range = base.zip(size).and_then(|(base, size)| {
            let start = base as usize;
            let range = start..start.checked_add(size)?;
            range.contains(&(ptr as usize)).then_some(range)
        });
        match range {
            Some(range) => Holder::Allocation { kind, range },
            // A runtime that types the pointer but does not bound its allocation.
            None => Holder::Unbounded { kind, place: 0 },
        }
    }
}
