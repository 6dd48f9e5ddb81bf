//! Destroying a context: `cuCtxDestroy`, and a primary context's last release or its reset. The
//! driver destroys everything in the context then, its streams, events and memory, so this sits
//! above the context, stream and memory modules.

use cudarc::driver::sys::{CUcontext, CUdevice, CUresult};

use crate::context::{self, Context, primary};
use crate::device::{entry, ordinal};

/// Destroys what lived in the context, as the driver does when the last retain goes: its streams
/// (drained first), its memory, and (through the context's new incarnation) its events.
fn destroy(context: &Context) {
    crate::stream::destroy_context_streams(context);
    crate::memory::release_context_memory(context);
    context.renew();
}

/// Destroys a context from `cuCtxCreate` with everything in it; the calling thread's stack
/// loses it if it is current there. A primary context cannot be destroyed this way.
#[unsafe(no_mangle)]
pub extern "C" fn cuCtxDestroy_v2(context: CUcontext) -> CUresult {
    entry("cuCtxDestroy", || {
        let context = Context::from_handle(context)?;
        context.end_created()?;
        destroy(context);
        context::leave_if_current(context);
        Ok(())
    })
}

fn release(operation: &'static str, device: CUdevice) -> CUresult {
    entry(operation, || {
        let context = primary(ordinal(device)?);
        if context.drop_retain()? {
            destroy(context);
        }
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn cuDevicePrimaryCtxRelease_v2(device: CUdevice) -> CUresult {
    release("cuDevicePrimaryCtxRelease", device)
}

/// The pre-11.0 name, with the same arguments.
#[unsafe(no_mangle)]
pub extern "C" fn cuDevicePrimaryCtxRelease(device: CUdevice) -> CUresult {
    release("cuDevicePrimaryCtxRelease", device)
}

fn reset(device: CUdevice) -> CUresult {
    entry("cuDevicePrimaryCtxReset", || {
        let context = primary(ordinal(device)?);
        // Resources go, the retains stay: the context comes back empty on its next use.
        destroy(context);
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn cuDevicePrimaryCtxReset_v2(device: CUdevice) -> CUresult {
    reset(device)
}

#[unsafe(no_mangle)]
pub extern "C" fn cuDevicePrimaryCtxReset(device: CUdevice) -> CUresult {
    reset(device)
}
