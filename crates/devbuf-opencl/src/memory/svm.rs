//! [`SvmMemory`]: core OpenCL's shared virtual memory buffers, coarse-grained as `device` memory
//! and fine-grained as `shared`. SVM pointers carry nothing the runtime can be asked, so the
//! strategy keeps its own table of what it handed out.

use std::collections::BTreeMap;
use std::ffi::c_void;
use std::ptr::NonNull;

use devbuf_core::interop::Holder;
use devbuf_core::{MemKind, Result};
use opencl3::context::Context;
use opencl3::device::Device;
use opencl3::error_codes::CL_INVALID_BUFFER_SIZE;
use opencl3::memory::{CL_MEM_READ_WRITE, CL_MEM_SVM_FINE_GRAIN_BUFFER};
use opencl3::types::{CL_FALSE, cl_uint};
use parking_lot::Mutex;

use super::strategy::{MemoryStrategy, QueueAccess, out_of_memory, span_holding, unknown_fill};

/// Memory in SVM buffers, by the addresses handed out.
pub(super) struct SvmMemory {
    /// devbuf's own record of each allocation, by the address it handed out.
    allocations: Mutex<BTreeMap<usize, SvmAllocation>>,
    /// The largest alignment clSVMAlloc accepts (CL_DEVICE_MEM_BASE_ADDR_ALIGN; PoCL refuses
    /// more): larger ones are met by allocating more and handing out an aligned address.
    max_align: usize,
}

/// One SVM allocation devbuf handed out.
#[derive(Debug, Clone, Copy)]
struct SvmAllocation {
    /// What clSVMAlloc returned (at or before the address handed out).
    base: usize,
    len: usize,
    kind: MemKind,
}

impl SvmMemory {
    pub(super) fn new(device: &Device) -> SvmMemory {
        SvmMemory {
            allocations: Mutex::new(BTreeMap::new()),
            max_align: device
                .mem_base_addr_align()
                .map_or(0, |bits| bits as usize / 8)
                .max(1),
        }
    }

    /// The allocation devbuf handed out that holds `ptr`, with the address it starts at.
    fn holding(&self, ptr: *const u8) -> Option<(usize, SvmAllocation)> {
        span_holding(&self.allocations, ptr, |allocation| allocation.len)
    }
}

impl MemoryStrategy for SvmMemory {
    fn name(&self) -> &'static str {
        "svm"
    }

    fn allocate(
        &self,
        queue: &dyn QueueAccess,
        kind: MemKind,
        size: usize,
        align: usize,
    ) -> Result<NonNull<u8>> {
        let flags = match kind {
            MemKind::Shared => CL_MEM_READ_WRITE | CL_MEM_SVM_FINE_GRAIN_BUFFER,
            _ => CL_MEM_READ_WRITE,
        };
        let runtime_align = align.min(self.max_align);
        // `runtime_align` is at most `align`.
        let padded = size.checked_add(align.saturating_sub(runtime_align));
        let context = queue.context().get();
        // SAFETY: the context is live; the call returns new SVM memory or an error. (opencl3's
        // SvmVec is not used: it panics on devices with fine-grained system SVM.)
        let allocated = padded.map(|padded| unsafe {
            cl3::memory::svm_alloc(context, flags, padded, runtime_align as cl_uint)
        });
        let base = match allocated {
            Some(Ok(base)) => base,
            Some(Err(code)) => return Err(out_of_memory(queue, "clSVMAlloc", kind, size, code)),
            None => {
                return Err(out_of_memory(
                    queue,
                    "clSVMAlloc",
                    kind,
                    size,
                    CL_INVALID_BUFFER_SIZE,
                ));
            }
        };
        // Inside the padded allocation: the runtime's memory ends past the aligned address.
        let padding = (base as usize)
            .checked_next_multiple_of(align)
            .map_or(0, |aligned| aligned.saturating_sub(base as usize));
        let ptr = base.cast::<u8>().wrapping_add(padding);
        let allocation = SvmAllocation {
            base: base as usize,
            len: size,
            kind,
        };
        self.allocations.lock().insert(ptr as usize, allocation);
        NonNull::new(ptr).ok_or_else(|| out_of_memory(queue, "clSVMAlloc", kind, size, 0))
    }

    unsafe fn free(&self, queue: &dyn QueueAccess, ptr: NonNull<u8>) {
        // clSVMFree does not wait for commands: core waited for the work on the memory.
        let Some(allocation) = self.allocations.lock().remove(&(ptr.as_ptr() as usize)) else {
            return;
        };
        let context = queue.context().get();
        // SAFETY: `base` is an SVM allocation of this context with no work pending.
        let _ = unsafe { cl3::memory::svm_free(context, allocation.base as *mut c_void) };
    }

    unsafe fn copy(
        &self,
        queue: &dyn QueueAccess,
        dst: *mut u8,
        src: *const u8,
        len: usize,
    ) -> Result<()> {
        let (dst, src) = (dst.cast::<c_void>(), src.cast::<c_void>());
        queue.submit("clEnqueueSVMMemcpy", &mut |queue| {
            // SAFETY: the caller guarantees both ranges (SVM of this context or host memory,
            // which SVM copies accept).
            unsafe { queue.enqueue_svm_mem_cpy(CL_FALSE, dst, src, len, &[]) }.map_err(|err| err.0)
        })
    }

    unsafe fn fill(
        &self,
        queue: &dyn QueueAccess,
        dst: *mut u8,
        byte: u8,
        len: usize,
    ) -> Result<()> {
        if dst.is_null() || self.holding(dst).is_none() {
            return Err(unknown_fill(queue, dst, len));
        }
        let dst_void = dst.cast::<c_void>();
        queue.submit("clEnqueueSVMMemFill", &mut |queue| {
            // SAFETY: `dst` is our SVM allocation, valid for `len` bytes (the caller's contract);
            // the pattern is copied at enqueue time.
            unsafe { queue.enqueue_svm_mem_fill(dst_void, &[byte], len, &[]) }.map_err(|err| err.0)
        })
    }

    fn kind_of(&self, _context: &Context, ptr: *const u8) -> MemKind {
        self.holding(ptr)
            .map_or(MemKind::Unknown, |(_, allocation)| allocation.kind)
    }

    /// Only devbuf's own SVM allocations are known, by its own table.
    fn holder_of(&self, _context: &Context, ptr: *const u8) -> Holder {
        self.holding(ptr)
            .map_or(Holder::Unknown, |(start, allocation)| Holder::Allocation {
                kind: allocation.kind,
                range: start..start.saturating_add(allocation.len),
            })
    }
}
