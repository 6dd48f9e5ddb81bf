//! Rows of a strided copy as one 2-D copy (`cuMemcpy2DAsync`): a column of a 1000-row matrix is
//! one driver call and one command, where a copy per row is a thousand of each.
//!
//! The driver may refuse what a copy per row would take, each time with CUDA_ERROR_INVALID_VALUE:
//! pitches it did not compute itself between two ranges of one device (the driver API reference:
//! "On intra-device memory copies ... cuMemcpy2DAsync() may fail for pitches not computed by
//! cuMemAllocPitch()"), a pitch past `CU_DEVICE_ATTRIBUTE_MAX_PITCH`, and another device's pool
//! memory that only a peer copy reaches (`peer`). The queue then copies row by row.

use std::ptr;

use cudarc::driver::sys::{self, CUcontext, CUstream};
use devbuf_core::Rows;

use crate::loader::{DriverError, call};

/// Enqueues `rows` from `src` to `dst` on `stream` (of `context`) as one `cuMemcpy2DAsync`, both
/// sides as unified addresses, which the driver resolves as it does a plain copy's.
///
/// # Safety
/// Every row is valid until the copy completes, each pitch is at least the width, and `stream`
/// is alive.
pub(crate) unsafe fn copy_2d(
    context: CUcontext,
    stream: CUstream,
    dst: *mut u8,
    src: *const u8,
    rows: Rows,
) -> Result<(), DriverError> {
    let unified = sys::CUmemorytype::CU_MEMORYTYPE_UNIFIED;
    let matrix = sys::CUDA_MEMCPY2D {
        srcXInBytes: 0,
        srcY: 0,
        srcMemoryType: unified,
        srcHost: ptr::null(),
        srcDevice: src as u64,
        srcArray: ptr::null_mut(),
        srcPitch: rows.src_pitch,
        dstXInBytes: 0,
        dstY: 0,
        dstMemoryType: unified,
        dstHost: ptr::null_mut(),
        dstDevice: dst as u64,
        dstArray: ptr::null_mut(),
        dstPitch: rows.dst_pitch,
        WidthInBytes: rows.width,
        Height: rows.count,
    };
    crate::context::on_stream(context, stream, || {
        // SAFETY: the caller's; `matrix` outlives the call, which reads it before returning.
        call("cuMemcpy2DAsync_v2", || unsafe {
            sys::cuMemcpy2DAsync_v2(&matrix, stream)
        })
    })
}
