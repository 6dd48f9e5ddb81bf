//! Hints about shared USM through dpctl's C API: `DPCTLQueue_Prefetch` (SYCL's
//! `queue::prefetch`, toward the queue's device) and `DPCTLQueue_MemAdvise` (SYCL's
//! `queue::mem_advise`, whose advice numbers each SYCL backend defines).

use std::ffi::c_int;

use devbuf_core::{Advice, Error, Location, Result};

use crate::queue::SyclQueue;

impl SyclQueue {
    /// [`devbuf_core::Queue::prefetch`]: SYCL migrates toward the queue's device only.
    pub(crate) unsafe fn prefetch_shared(
        &self,
        ptr: *const u8,
        len: usize,
        to: Location,
    ) -> Result<()> {
        if to == Location::Host {
            return Err(self.no_hint(
                "prefetching to the host",
                "SYCL's queue::prefetch migrates toward the queue's device only",
            ));
        }
        self.check_usm("prefetching")?;
        let api = self.runtime().api();
        self.submit("DPCTLQueue_Prefetch", |queue| {
            // SAFETY: the caller guarantees the range lies in one live shared allocation of this
            // queue; the call catches the runtime's exceptions and returns an event we own.
            unsafe { api.DPCTLQueue_Prefetch(queue, ptr.cast(), len) }
        })
    }

    /// [`devbuf_core::Queue::advise`]: SYCL takes the backend's own advice number.
    pub(crate) unsafe fn advise_shared(
        &self,
        ptr: *const u8,
        len: usize,
        advice: Advice,
    ) -> Result<()> {
        let Advice::Native(number) = advice else {
            return Err(self.no_hint(
                &format!("{advice:?}"),
                "SYCL's queue::mem_advise takes the backend's own advice number \
                 (advise(int)), not CUDA's names",
            ));
        };
        self.check_usm("mem_advise")?;
        let api = self.runtime().api();
        self.submit("DPCTLQueue_MemAdvise", |queue| {
            // SAFETY: the caller guarantees the range lies in one live shared allocation of this
            // queue; the call catches the runtime's exceptions and returns an event we own.
            unsafe { api.DPCTLQueue_MemAdvise(queue, ptr.cast(), len, number as c_int) }
        })
    }

    fn check_usm(&self, what: &str) -> Result<()> {
        if self.knows_usm {
            Ok(())
        } else {
            Err(self.no_hint(what, "the queue's context has no USM"))
        }
    }

    fn no_hint(&self, what: &str, reason: &str) -> Error {
        Error::Unsupported {
            device: self.info.selector.clone(),
            what: what.to_owned(),
            reason: reason.to_owned(),
        }
    }
}
