//! The row-copy kernel (`Queue::copy_rows` on SYCL, [`crate::rows`]): a column of a 1000-row
//! matrix as one command, where a runtime copy per row costs about 6 µs each on the SYCL CPU
//! runtime (6 ms for the column). SYCL has a 2-D copy (`ext_oneapi_memcpy2d`), but dpctl's C API,
//! which devbuf drives, does not expose it; it does build kernels from OpenCL C source
//! (`DPCTLKernelBundle_CreateFromOCLSource`) and run them (`DPCTLQueue_SubmitRange`), so the copy
//! is a five-line kernel, one work-item per row.
//!
//! Building it costs about 0.2 s per context and device (measured on the SYCL CPU runtime, the
//! first build of a process; about 50 ms after), which a program that copies a few short columns
//! would never win back. So the rows go one runtime copy each until that many rows have been
//! copied that way on the context and device that the build would have cost about as much
//! ([`rows_before_kernel`], `DEVBUF_SYCL_ROWS_BEFORE_KERNEL`), and through the kernel from then
//! on: never more than about twice what the better choice in hindsight costs (the ski-rental
//! rule). A device whose runtime builds no OpenCL C (Level Zero devices take SPIR-V only) keeps a
//! copy per row.

use std::ffi::CStr;
use std::sync::{Arc, LazyLock, OnceLock};

use devbuf_core::Result;
use parking_lot::Mutex;

use crate::loader::Runtime;
use crate::raw::{Context, Device, Kernel, KernelBundle, RawQueue};

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

/// The row-copy kernel of one context and device.
pub(crate) struct RowKernel {
    kernel: Kernel,
    _bundle: KernelBundle,
}

impl RowKernel {
    /// The kernel: `(dst, dst_pitch, src, src_pitch, width)` over a range of one work-item per
    /// row (pointers as `DPCTL_VOID_PTR`, the rest as `DPCTL_UINT64_T`).
    pub(crate) fn kernel(&self) -> &Kernel {
        &self.kernel
    }
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
    if let Some((_, _, copies)) = all.iter().find(|(known, on, _)| {
        // Handles of another loaded library are not this one's to compare.
        std::ptr::eq(known.rt, context.rt) && known.same_as(context) && on.same_as(device)
    }) {
        return Ok(Arc::clone(copies));
    }
    // SAFETY: `context` is live.
    let context = unsafe { Context::copy_from(context.rt, context.as_ptr()) }?;
    let copies = Arc::new(RowCopies::default());
    all.push((context, device.try_clone()?, Arc::clone(&copies)));
    Ok(copies)
}

impl RowCopies {
    /// The kernel for `context` and the device of `queue` (the ones these copies are of), when
    /// `rows` more rows make it worth building (built now if so); `None` while a copy per row is
    /// still the cheaper way, or where the runtime builds no kernel.
    pub(crate) fn kernel(
        &self,
        context: &Context,
        queue: &RawQueue,
        rows: usize,
    ) -> Option<&RowKernel> {
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
        self.kernel.get_or_init(|| build(context, queue)).as_ref()
    }
}

/// Builds the kernel for `context` and `queue`'s device; `None` where the runtime refuses.
fn build(context: &Context, queue: &RawQueue) -> Option<RowKernel> {
    let rt: &'static Runtime = queue.rt;
    let api = rt.api();
    // SAFETY: live handles; the calls catch the runtime's exceptions and answer null. The device
    // handle the queue gives is ours to delete.
    unsafe {
        let device = Device::from_raw(rt, api.DPCTLQueue_GetDevice(queue.as_ptr()))?;
        let bundle = KernelBundle::from_raw(
            rt,
            api.DPCTLKernelBundle_CreateFromOCLSource(
                context.as_ptr(),
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
