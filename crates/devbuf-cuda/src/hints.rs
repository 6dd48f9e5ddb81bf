//! Hints about managed memory: `cuMemPrefetchAsync_v2` on the queue's stream and
//! `cuMemAdvise_v2` (the ABIs of CUDA 12.2 on, the only ones CUDA 13 declares), with the
//! locations NVIDIA's driver API documents: "CU_MEM_LOCATION_TYPE_DEVICE with CUmemLocation::id
//! representing a valid device ordinal" or "CU_MEM_LOCATION_TYPE_HOST" (whose id "will be
//! ignored").

use cudarc::driver::sys::{self, CUmem_advise, CUmemLocation, CUmemLocationType};
use devbuf_core::{Advice, Error, Location, Queue as _, Result};

use crate::loader::{DriverError, call};
use crate::queue::CudaQueue;

impl CudaQueue {
    /// [`devbuf_core::Queue::prefetch`], on the queue's stream.
    pub(crate) unsafe fn prefetch_managed(
        &self,
        ptr: *const u8,
        len: usize,
        to: Location,
    ) -> Result<()> {
        let location = self.location(to, "prefetching to the device")?;
        let _current = self.context().enter()?;
        // SAFETY: the caller guarantees the range lies in one live managed allocation; the
        // stream is ours and alive; flags "must be zero".
        let prefetched = call("cuMemPrefetchAsync_v2", || unsafe {
            sys::cuMemPrefetchAsync_v2(ptr as u64, len, location, 0, self.stream.raw())
        });
        self.hint_taken(prefetched)
    }

    /// [`devbuf_core::Queue::advise`]: CUDA's named advice.
    pub(crate) unsafe fn advise_managed(
        &self,
        ptr: *const u8,
        len: usize,
        advice: Advice,
    ) -> Result<()> {
        use CUmem_advise::*;
        // "The location argument is ignored" for the read-mostly advice and for unsetting the
        // preferred location: the host stands in there.
        let (advice, at) = match advice {
            Advice::SetReadMostly => (CU_MEM_ADVISE_SET_READ_MOSTLY, Location::Host),
            Advice::UnsetReadMostly => (CU_MEM_ADVISE_UNSET_READ_MOSTLY, Location::Host),
            Advice::SetPreferredLocation(at) => (CU_MEM_ADVISE_SET_PREFERRED_LOCATION, at),
            Advice::UnsetPreferredLocation => {
                (CU_MEM_ADVISE_UNSET_PREFERRED_LOCATION, Location::Host)
            }
            Advice::SetAccessedBy(at) => (CU_MEM_ADVISE_SET_ACCESSED_BY, at),
            Advice::UnsetAccessedBy(at) => (CU_MEM_ADVISE_UNSET_ACCESSED_BY, at),
            Advice::Native(number) => {
                return Err(Error::Unsupported {
                    device: self.device().selector.clone(),
                    what: format!("advice number {number}"),
                    reason: "CUDA's cuMemAdvise takes its named advice (set_read_mostly, ...)"
                        .into(),
                });
            }
        };
        let location = self.location(at, "advice naming the device")?;
        let _current = self.context().enter()?;
        // SAFETY: the caller guarantees the range lies in one live managed allocation.
        let advised = call("cuMemAdvise_v2", || unsafe {
            sys::cuMemAdvise_v2(ptr as u64, len, advice, location)
        });
        self.hint_taken(advised)
    }

    /// A hint's outcome: a driver without the entry point (older than CUDA 12.2: the call never
    /// reached it, so no error code) takes no hints.
    fn hint_taken(&self, result: std::result::Result<(), DriverError>) -> Result<()> {
        match result {
            Ok(()) => Ok(()),
            Err(DriverError {
                operation,
                code: None,
                message,
            }) => Err(Error::Unsupported {
                device: self.device().selector.clone(),
                what: operation.to_owned(),
                reason: format!("the driver lacks it (CUDA 12.2 added it): {message}"),
            }),
            Err(err) => Err(err.into()),
        }
    }

    /// The driver's location for `at`. The device is a valid target only where "the device
    /// attribute CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS" is non-zero.
    fn location(&self, at: Location, what: &str) -> Result<CUmemLocation> {
        let (type_, id) = match at {
            Location::Host => (CUmemLocationType::CU_MEM_LOCATION_TYPE_HOST, 0),
            Location::Device if !self.concurrent_managed_access => {
                return Err(Error::Unsupported {
                    device: self.device().selector.clone(),
                    what: what.to_owned(),
                    reason: "the device has no concurrent managed access \
                             (CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS is 0)"
                        .into(),
                });
            }
            Location::Device => (
                CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE,
                self.ordinal() as i32,
            ),
        };
        Ok(CUmemLocation { type_, id })
    }
}
