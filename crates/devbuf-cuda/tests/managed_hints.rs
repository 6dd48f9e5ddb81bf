//! Prefetch and advice on managed memory reach the driver as NVIDIA documents them: the range's
//! attributes (`cuMemRangeGetAttribute`) then say where it was last prefetched to and what it
//! was advised. Shown on the CUDA test driver, which models those attributes; each test runs in
//! a child process with the driver settings it needs.

mod common;

use std::ffi::c_void;

use cudarc::driver::sys::{self, CUmem_range_attribute};
use devbuf_core::mr::{MemoryResource, PrefetchResource, QueueResource};
use devbuf_core::{Advice, Buffer, DEFAULT_ALIGNMENT, Error, Location, MemKind};

use common::{check, in_primary_context, shared};

const LEN: usize = 1 << 16;
/// `CU_DEVICE_CPU`, "((CUdevice)-1)": the host, in the range attributes' answers.
const CU_DEVICE_CPU: i32 = -1;

/// A 32-bit attribute of the managed range of `buffer`.
fn attribute(buffer: &Buffer, attribute: CUmem_range_attribute) -> i32 {
    let mut value: i32 = 0;
    in_primary_context(0, || {
        // SAFETY: a 4-byte out-value for a 32-bit attribute, over a live managed range.
        check("cuMemRangeGetAttribute", unsafe {
            sys::cuMemRangeGetAttribute(
                (&raw mut value).cast::<c_void>(),
                4,
                attribute,
                buffer.ptr() as u64,
                buffer.len(),
            )
        });
    });
    value
}

child_test!(prefetch_and_advice_reach_the_driver {
    use CUmem_range_attribute::*;
    let queue = shared(0);
    let buffer = Buffer::alloc(&queue, MemKind::Shared, LEN).unwrap();
    buffer.prefetch(Location::Device).unwrap().wait().unwrap();
    assert_eq!(attribute(&buffer, CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION), 0);
    buffer.prefetch(Location::Host).unwrap().wait().unwrap();
    assert_eq!(attribute(&buffer, CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION), CU_DEVICE_CPU);
    buffer.advise(Advice::SetReadMostly).unwrap();
    assert_eq!(attribute(&buffer, CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY), 1);
    buffer.advise(Advice::UnsetReadMostly).unwrap();
    assert_eq!(attribute(&buffer, CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY), 0);
    buffer.advise(Advice::SetPreferredLocation(Location::Device)).unwrap();
    assert_eq!(attribute(&buffer, CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION), 0);
    buffer.advise(Advice::UnsetPreferredLocation).unwrap();
    match buffer.advise(Advice::Native(1)) {
        Err(Error::Unsupported { .. }) => {}
        other => panic!("an advice number on CUDA gave {other:?}"),
    }
    let device = Buffer::alloc(&queue, MemKind::Device, LEN).unwrap();
    match device.prefetch(Location::Device) {
        Err(Error::InvalidDescriptor { key: "kind", .. }) => {}
        other => panic!("prefetching device memory gave {other:?}"),
    }
});

child_test!(a_prefetch_adaptor_prefetches_shared_allocations_to_the_device {
    let queue = shared(0);
    let prefetching: std::sync::Arc<dyn MemoryResource> =
        PrefetchResource::new(QueueResource::new(queue.clone()));
    let buffer = Buffer::alloc_from(&prefetching, MemKind::Shared, LEN, DEFAULT_ALIGNMENT).unwrap();
    let last = attribute(&buffer, CUmem_range_attribute::CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION);
    assert_eq!(last, 0, "the allocation was prefetched to device 0");
});

// "If dstDevice is a GPU, then the device attribute CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS
// must be non-zero": without it, devbuf says the device cannot, before asking the driver.
child_test!(without_concurrent_managed_access_the_device_is_no_target [
    "DEVBUF_CUDA_TEST_CONCURRENT_MANAGED_ACCESS" = "0",
] needs common::Need::NoConcurrentManagedAccess; {
    let queue = shared(0);
    let buffer = Buffer::alloc(&queue, MemKind::Shared, LEN).unwrap();
    match buffer.prefetch(Location::Device) {
        Err(Error::Unsupported { reason, .. }) => {
            assert!(reason.contains("CONCURRENT_MANAGED_ACCESS"), "{reason}")
        }
        other => panic!("a prefetch to a device without concurrent managed access gave {other:?}"),
    }
    buffer.prefetch(Location::Host).unwrap().wait().unwrap();
    buffer.advise(Advice::SetReadMostly).unwrap();
});
