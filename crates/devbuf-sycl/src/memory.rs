//! Which USM a pointer is, as a SYCL context tells.

use devbuf_core::MemKind;
use devbuf_sycl_sys as sys;

use crate::raw::Context;

/// The USM kind of `ptr` in `context`; Unknown for memory the context does not know.
pub(crate) fn classify(context: &Context, knows_usm: bool, ptr: *const u8) -> MemKind {
    if ptr.is_null() || !knows_usm {
        return MemKind::Unknown;
    }
    // SAFETY: the context is live and knows USM, so the runtime answers instead of throwing; the
    // pointer is only looked up, never dereferenced.
    let usm_type = unsafe {
        context
            .rt
            .api()
            .DPCTLUSM_GetPointerType(ptr.cast_mut().cast(), context.as_ptr())
    };
    match usm_type {
        sys::DPCTLSyclUSMType_DPCTL_USM_HOST => MemKind::Host,
        sys::DPCTLSyclUSMType_DPCTL_USM_DEVICE => MemKind::Device,
        sys::DPCTLSyclUSMType_DPCTL_USM_SHARED => MemKind::Shared,
        _ => MemKind::Unknown,
    }
}
