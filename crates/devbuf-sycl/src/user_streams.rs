//! Users' streams on SYCL: a new in-order queue on a device, in the device's default context, so
//! that it reaches the memory of devbuf's queue for the device and of dpctl's queues (dpctl's
//! `SyclQueue(device, property="in_order")` is the same thing). SYCL queues have no priorities
//! and nothing like CUDA's legacy default stream, so `StreamOptions` change nothing here.

use std::sync::Arc;

use devbuf_core::{Queue, Result, split_selector};

use crate::queue::SyclQueue;
use crate::raw::{Context, Device};
use crate::loader::Runtime;

/// A new in-order queue on the root device the dpctl filter string `filter` picks, or, for "",
/// on the device of `default`, devbuf's default SYCL queue.
pub(crate) fn open_stream(
    rt: &'static Runtime,
    filter: &str,
    default: impl FnOnce() -> Result<Arc<SyclQueue>>,
) -> Result<Arc<dyn Queue>> {
    let device = match filter {
        "" => {
            let default = default()?;
            Device::from_filter(rt, split_selector(&default.device().selector).1)?
        }
        filter => Device::from_filter(rt, filter)?,
    };
    let context = Context::default_for(&device)?;
    Ok(Arc::new(SyclQueue::create(context, device)?))
}
