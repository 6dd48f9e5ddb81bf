//! Rows of a strided copy as one kernel (`Queue::copy_rows`): a column of a 1000-row matrix is one
//! command, where a runtime copy per row costs about 6 µs each on the SYCL CPU runtime (6 ms for
//! the column). SYCL has a 2-D copy (`ext_oneapi_memcpy2d`), but dpctl's C API, which devbuf
//! drives, does not expose it; it does build kernels from OpenCL C source
//! (`DPCTLKernelBundle_CreateFromOCLSource`) and run them (`DPCTLQueue_SubmitRange`), so the copy is
//! a five-line kernel, one work-item per row.
//!
//! Building it costs about 0.2 s per context and device (measured on the SYCL CPU runtime), which
//! a program that copies a few short columns would never win back. So the rows go one runtime copy
//! each until that many rows have been copied that way on the context and device that the build
//! would have cost about as much ([`rows_before_kernel`], `DEVBUF_SYCL_ROWS_BEFORE_KERNEL`), and
//! through the kernel from then on: never more than about twice what the better choice in
//! hindsight costs (the ski-rental rule). A device whose runtime builds no OpenCL C (Level Zero
//! devices take SPIR-V only) keeps a copy per row.
//!
//! The kernel reaches USM of the queue's context only. A side that is other host memory (a fill's
//! pattern, NumPy's array for `get()`) is staged through USM host memory of the context when its
//! rows are packed (pitch = width, so the span holds nothing else): written on the host before
//! the kernel, once the queue has reached the copy (so that the work the source was ordered after
//! is done), or read on the host after it. A staged copy waits for its kernel, to free the staging
//! memory; one with rows apart in other host memory goes row by row.

use std::ffi::{CStr, c_void};
use std::sync::{Arc, LazyLock, OnceLock};

use devbuf_core::{MemKind, Queue, Result, Rows};
use devbuf_sycl_sys as sys;
use parking_lot::Mutex;

use crate::loader::Runtime;
use crate::queue::SyclQueue;
use crate::raw::{Context, Device, Kernel, KernelBundle};

const KERNEL_NAME: &CStr = c"devbuf_copy_rows";

const KERNEL_SOURCE: &CStr = c"
__kernel void devbuf_copy_rows(__global uchar *dst, ulong dst_pitch,
                               __global const uchar *src, ulong src_pitch, ulong width) {
    size_t row = get_global_id(0);
    __global uchar *to = dst + row * dst_pitch;
    __global const uchar *from = src + row * src_pitch;
    for (ulong i = 0; i < width; i++) {
        to[i] = from[i];
    }
}
";

/// The most bytes a side is staged through USM host memory for.
const STAGING_BYTES: usize = 16 << 20;

/// The row-copy kernel of one context and device.
struct RowKernel {
    kernel: Kernel,
    _bundle: KernelBundle,
}

/// What one context and device have done about rows: how many went a copy each, and the kernel
/// once built (`None` inside where the runtime would not build it).
#[derive(Default)]
pub(crate) struct RowCopies {
    copied_singly: Mutex<usize>,
    kernel: OnceLock<Option<RowKernel>>,
}

/// The rows to copy one runtime copy each before the kernel is built: `DEVBUF_SYCL_ROWS_BEFORE_KERNEL`
/// (0 builds it for the first copy of rows), else about a build's worth of copies.
fn rows_before_kernel() -> usize {
    static ROWS: LazyLock<usize> = LazyLock::new(|| {
        std::env::var("DEVBUF_SYCL_ROWS_BEFORE_KERNEL")
            .ok()
            .and_then(|rows| rows.trim().parse().ok())
            .unwrap_or(32_768)
    });
    *ROWS
}

/// The [`RowCopies`] of `context` and `device`, shared by every queue on them (the registry keeps
/// a handle to each, so a context is never mistaken for a later one at its address).
pub(crate) fn copies_for(context: &Context, device: &Device) -> Result<Arc<RowCopies>> {
    type Registry = Vec<(Context, Device, Arc<RowCopies>)>;
    static ALL: LazyLock<Mutex<Registry>> = LazyLock::new(Default::default);
    let mut all = ALL.lock();
    if let Some((_, _, copies)) = all
        .iter()
        .find(|(known, on, _)| known.same_as(context) && on.same_as(device))
    {
        return Ok(Arc::clone(copies));
    }
    // SAFETY: `context` is live.
    let context = unsafe { Context::copy_from(context.rt, context.as_ptr()) }?;
    let copies = Arc::new(RowCopies::default());
    all.push((context, device.try_clone()?, Arc::clone(&copies)));
    Ok(copies)
}

impl RowCopies {
    /// The kernel, when `rows` more rows make it worth building (built now if so); `None` while
    /// a copy per row is still the cheaper way, or where the runtime builds no kernel.
    fn kernel(&self, queue: &SyclQueue, rows: usize) -> Option<&RowKernel> {
        if let Some(built) = self.kernel.get() {
            return built.as_ref();
        }
        {
            let mut copied = self.copied_singly.lock();
            if *copied < rows_before_kernel() {
                *copied = copied.saturating_add(rows);
                return None;
            }
        }
        self.kernel.get_or_init(|| build(queue)).as_ref()
    }
}

/// Builds the kernel for `queue`'s context and device; `None` where the runtime refuses.
fn build(queue: &SyclQueue) -> Option<RowKernel> {
    let rt: &'static Runtime = queue.runtime();
    let api = rt.api();
    // SAFETY: live handles; the calls catch the runtime's exceptions and answer null. The device
    // handle the queue gives is ours to delete.
    unsafe {
        let device = Device::from_raw(rt, api.DPCTLQueue_GetDevice(queue.commands.as_ptr()))?;
        let bundle = KernelBundle::from_raw(
            rt,
            api.DPCTLKernelBundle_CreateFromOCLSource(
                queue.context.as_ptr(),
                device.as_ptr(),
                KERNEL_SOURCE.as_ptr(),
                c"".as_ptr(),
            ),
        )?;
        let kernel = Kernel::from_raw(
            rt,
            api.DPCTLKernelBundle_GetKernel(bundle.as_ptr(), KERNEL_NAME.as_ptr()),
        )?;
        Some(RowKernel {
            kernel,
            _bundle: bundle,
        })
    }
}

/// One side of the copy as the kernel sees it: USM of the context, or host memory staged.
enum Side {
    Usm(*mut u8),
    Staged {
        host: *mut u8,
        usm: *mut u8,
        len: usize,
    },
}

impl Side {
    fn usm(&self) -> *mut u8 {
        match *self {
            Side::Usm(ptr) | Side::Staged { usm: ptr, .. } => ptr,
        }
    }
}

/// Enqueues `rows` on `queue` as one kernel, when the kernel is worth it and reaches both sides
/// (directly or staged); `Ok(false)` when the caller should copy row by row instead.
///
/// # Safety
/// As for [`Queue::copy_rows`].
pub(crate) unsafe fn copy(
    queue: &SyclQueue,
    dst: *mut u8,
    src: *const u8,
    rows: Rows,
) -> Result<bool> {
    // Device USM of one device is not another's: a context of several devices goes row by row.
    if rows.count < 2 || !queue.knows_usm || queue.multi_device_context {
        return Ok(false);
    }
    let Some(kernel) = queue.row_copies.kernel(queue, rows.count) else {
        return Ok(false);
    };
    // Every row a kernel's work-item, reaching each side's USM.
    let span = |pitch: usize| {
        rows.count
            .checked_sub(1)?
            .checked_mul(pitch)
            .and_then(|rows_before| rows_before.checked_add(rows.width))
    };
    let side = |ptr: *mut u8, pitch: usize| -> Option<Side> {
        if queue.kind_of(ptr) != MemKind::Unknown {
            return Some(Side::Usm(ptr));
        }
        let len = span(pitch).filter(|&len| pitch == rows.width && len <= STAGING_BYTES)?;
        Some(Side::Staged {
            host: ptr,
            usm: std::ptr::null_mut(),
            len,
        })
    };
    let (Some(mut to), Some(mut from)) = (
        side(dst, rows.dst_pitch),
        side(src.cast_mut(), rows.src_pitch),
    ) else {
        return Ok(false);
    };
    let api = queue.runtime().api();
    let commands = queue.commands.as_ptr();
    // Staging memory of the context, host-accessible: the host writes and reads it directly.
    let mut staging: Vec<*mut c_void> = Vec::new();
    let mut stage = |side: &mut Side| -> bool {
        if let Side::Staged { usm, len, .. } = side {
            // SAFETY: a live queue; the call catches the runtime's exceptions (null on failure).
            let memory = unsafe { api.DPCTLmalloc_host(*len, commands) };
            if memory.is_null() {
                return false;
            }
            staging.push(memory.cast());
            *usm = memory.cast();
        }
        true
    };
    let staged = stage(&mut to) && stage(&mut from);
    let result = (|| {
        if !staged {
            return Ok(false);
        }
        if let Side::Staged { host, usm, len } = from {
            // The host reads the source now, not when the queue reaches the copy, which
            // `Queue::copy_rows` orders after the queue's earlier work: that work must be done
            // first. (The SYCL CPU runtime's own copies into such memory return done, so no
            // test on it can catch a missing wait here; another runtime's need not.)
            queue.wait()?;
            // SAFETY: the caller's `len` packed bytes at `host` (the source's rows), with no
            // work left on them (waited for above); `usm` is our fresh allocation of `len`.
            unsafe { std::ptr::copy_nonoverlapping(host, usm, len) };
        }
        let (mut dst_pitch, mut src_pitch, mut width) = (
            rows.dst_pitch as u64,
            rows.src_pitch as u64,
            rows.width as u64,
        );
        let mut args: [*mut c_void; 5] = [
            to.usm().cast(),
            (&raw mut dst_pitch).cast(),
            from.usm().cast(),
            (&raw mut src_pitch).cast(),
            (&raw mut width).cast(),
        ];
        let types = [
            sys::DPCTLKernelArgType_DPCTL_VOID_PTR,
            sys::DPCTLKernelArgType_DPCTL_UINT64_T,
            sys::DPCTLKernelArgType_DPCTL_VOID_PTR,
            sys::DPCTLKernelArgType_DPCTL_UINT64_T,
            sys::DPCTLKernelArgType_DPCTL_UINT64_T,
        ];
        let range = [rows.count];
        queue.submit("DPCTLQueue_SubmitRange", |commands| {
            // SAFETY: the kernel takes these five arguments; the pointers are USM of the
            // queue's context, valid for every row (the caller's, or our staging); the values
            // are read before the call returns. The call catches the runtime's exceptions.
            unsafe {
                api.DPCTLQueue_SubmitRange(
                    kernel.kernel.as_ptr(),
                    commands,
                    args.as_mut_ptr(),
                    types.as_ptr(),
                    args.len(),
                    range.as_ptr(),
                    range.len(),
                    std::ptr::null(),
                    0,
                )
            }
        })?;
        if !staging.is_empty() {
            // The staging memory is freed below: the kernel must be done with it.
            queue.wait()?;
        }
        if let Side::Staged { host, usm, len } = to {
            // SAFETY: the kernel has written `len` packed bytes at `usm` (waited for above);
            // `host` is the caller's destination of the same packed rows.
            unsafe { std::ptr::copy(usm, host, len) };
        }
        Ok(true)
    })();
    if result.is_ok() || !staging.is_empty() && queue.wait().is_ok() {
        for memory in staging {
            // SAFETY: our allocations, no longer in use (waited for above).
            unsafe { api.DPCTLfree_with_queue(memory.cast(), commands) };
        }
    }
    // A failed wait leaves the staging memory to the runtime: the kernel may still use it.
    result
}
