//! How the CUDA backend reports and survives driver faults, shown on the CUDA test driver with
//! injected failures. Each test runs in a child process with the driver settings it needs; on a GPU
//! a test that needs the test driver's knobs or a second device is skipped, saying so.

mod common;

use std::ffi::c_void;
use std::ptr;

use cudarc::driver::sys;
use devbuf_core::conformance::pattern;
use devbuf_core::{Buffer, Error, HostQueue, MemKind, Queue};

use common::{Need, check, fresh, in_primary_context, shared};

const LEN: usize = 1 << 20;

// Only a lack of memory is MemoryError; a refused stream-ordered allocation falls back to
// `cuMemAlloc`, whose memory is then freed with `cuMemFree` after the work on it.
child_test!(allocation_failures_keep_their_meaning [
    "DEVBUF_CUDA_TEST_DELAY_US" = "20000",
    "DEVBUF_CUDA_TEST_FAIL_ALLOCATIONS" = "1:INVALID_CONTEXT,2:NOT_SUPPORTED,4",
    "DEVBUF_CUDA_TEST_MEMORY_POOLS" = "1",
] needs Need::TestDriver("injected allocation failures (DEVBUF_CUDA_TEST_FAIL_ALLOCATIONS)"); {
    let queue = shared(0);
    match Buffer::alloc(&queue, MemKind::Host, LEN) {
        Err(Error::Runtime { .. }) => {}
        other => panic!("CUDA_ERROR_INVALID_CONTEXT from cuMemHostAlloc gave {other:?}"),
    }
    let fallback = Buffer::alloc(&queue, MemKind::Device, LEN)
        .expect("cuMemAllocAsync refused: the memory comes from cuMemAlloc");
    fallback.copy_from_host(&pattern(LEN, 9)).unwrap();
    assert_eq!(fallback.to_vec().unwrap(), pattern(LEN, 9));
    fallback.enqueue_fill(4).unwrap();
    let address = fallback.ptr() as usize;
    drop(fallback);
    assert_eq!(devbuf_cuda::classify(address).unwrap(), None, "the fallback block was not freed");
    match Buffer::alloc(&queue, MemKind::Device, LEN) {
        Err(Error::OutOfMemory { .. }) => {}
        other => panic!("CUDA_ERROR_OUT_OF_MEMORY gave {other:?}"),
    }
});

// After a fault the context's error is sticky: an allocation then is a runtime fault, not a lack of
// memory. The fault is a fill of pinned memory freed while the fill is queued, which only the test
// driver's delay keeps queued (a GPU finishes the fill first, and cuMemFreeHost may synchronize).
child_test!(a_sticky_error_is_not_out_of_memory ["DEVBUF_CUDA_TEST_DELAY_US" = "20000"]
    needs Need::TestDriver("illegal address from memory freed under a delayed fill"); {
    let queue = fresh(0);
    in_primary_context(0, || {
        let mut pinned: *mut c_void = ptr::null_mut();
        // SAFETY: a valid out-pointer; freeing the memory while the fill on it is queued is the
        // fault this test needs.
        unsafe {
            check("cuMemHostAlloc", sys::cuMemHostAlloc(&mut pinned, LEN, 0));
            let stream = common::cuda(&queue).stream() as sys::CUstream;
            check("cuMemsetD8Async", sys::cuMemsetD8Async(pinned as u64, 1, LEN, stream));
            sys::cuMemFreeHost(pinned);
        }
    });
    for kind in [MemKind::Device, MemKind::Host, MemKind::Shared] {
        match Buffer::alloc(&queue, kind, LEN) {
            Err(Error::Runtime { message, .. }) => assert!(message.contains("ILLEGAL_ADDRESS")),
            other => panic!("{kind} allocation in a broken context gave {other:?}"),
        }
    }
});

// Without concurrent managed access the host must not touch managed memory while work may run on
// it: devbuf copies it through the device instead (the driver faults a host access).
child_test!(managed_memory_is_copied_not_touched_without_concurrent_access [
    "DEVBUF_CUDA_TEST_DELAY_US" = "20000",
    "DEVBUF_CUDA_TEST_CONCURRENT_MANAGED_ACCESS" = "0",
] needs Need::NoConcurrentManagedAccess; {
    let queue = shared(0);
    let managed = Buffer::alloc(&queue, MemKind::Shared, LEN).unwrap();
    managed.copy_from_host(&pattern(LEN, 1)).unwrap();
    assert!(!managed.is_host_accessible());
    managed.mark_exported();
    // A consumer's work on it, which devbuf does not see.
    let consumer = fresh(0);
    common::foreign_fill(0, common::cuda(&consumer).stream(), managed.ptr(), 2, LEN);
    let host = Buffer::alloc(&HostQueue::shared(), MemKind::Host, LEN).unwrap();
    host.copy_from(&managed).unwrap();
    consumer.wait().unwrap();
});

// Memory of device 1 is classified without device 0, which may be unusable.
child_test!(pointers_are_classified_without_device_0 [
    "DEVBUF_CUDA_TEST_UNAVAILABLE_DEVICES" = "0",
]
    needs Need::TestDriver("devices made unusable (DEVBUF_CUDA_TEST_UNAVAILABLE_DEVICES)"),
    Need::Devices(2); {
    let memory = Buffer::alloc(&shared(1), MemKind::Device, 64).unwrap();
    let (queue, kind) = devbuf_cuda::queue_for_pointer(memory.ptr() as usize)
        .expect("classifying device 1's memory")
        .expect("device 1's memory is CUDA memory");
    assert_eq!((queue.ordinal(), kind), (1, MemKind::Device));
});

// Classifying device 1's memory does not open device 0.
child_test!(classifying_opens_no_other_device needs Need::Devices(2); {
    let memory = Buffer::alloc(&shared(1), MemKind::Host, 64).unwrap();
    assert!(devbuf_cuda::classify(memory.ptr() as usize).unwrap().is_some());
    let (mut flags, mut active) = (0u32, 0i32);
    // SAFETY: valid out-pointers; device 0 exists.
    check("cuDevicePrimaryCtxGetState", unsafe {
        sys::cuDevicePrimaryCtxGetState(0, &mut flags, &mut active)
    });
    assert_eq!(active, 0, "classifying opened device 0");
});

// Device memory of a context other than the primary one is not handed to the primary context's
// queue.
child_test!(memory_of_another_context_is_not_imported_with_the_primary_queue {
    let primary = shared(0);
    let mut context = ptr::null_mut();
    let mut memory = 0;
    // SAFETY: valid out-pointers; the created context is current until it is destroyed below.
    unsafe {
        check("cuCtxCreate", sys::cuCtxCreate_v2(&mut context, 0, 0));
        check("cuMemAlloc", sys::cuMemAlloc_v2(&mut memory, LEN));
    }
    match devbuf_cuda::queue_for_pointer(memory as usize) {
        Err(Error::Unsupported { reason, .. }) => assert!(reason.contains("primary context")),
        Err(other) => panic!("importing another context's memory failed with {other:?}"),
        Ok(found) => panic!(
            "another context's memory was imported with {:?}",
            found.map(|(queue, kind)| (queue.device().selector.clone(), kind))
        ),
    }
    let own = Buffer::alloc(&primary, MemKind::Device, 64).unwrap();
    assert!(devbuf_cuda::queue_for_pointer(own.ptr() as usize).unwrap().is_some());
    // SAFETY: the context created above, destroyed once, with its memory.
    check("cuCtxDestroy", unsafe { sys::cuCtxDestroy_v2(context) });
});

// Stream-ordered memory belongs to its device, not to a context (CUDA Programming Guide, "Stream
// Ordered Memory Allocator": CU_POINTER_ATTRIBUTE_CONTEXT is NULL): it is imported with the
// device's queue whichever context allocated it, and outlives that context ("cuCtxDestroy() will
// not destroy memory allocations by cuMemCreate(), cuMemAllocAsync() and
// cuMemAllocFromPoolAsync()").
child_test!(stream_ordered_memory_is_imported_whichever_context_allocated_it {
    // The last device: device 1 on the test driver, the only one on a one-GPU machine.
    let last = common::device_count() - 1;
    let queue = shared(last);
    let mut context = ptr::null_mut();
    let mut memory = 0;
    // SAFETY: valid out-pointers; the created context is current until it is destroyed below,
    // and its legacy stream orders the allocation.
    unsafe {
        check("cuCtxCreate", sys::cuCtxCreate_v2(&mut context, 0, last as i32));
        check("cuMemAllocAsync", sys::cuMemAllocAsync(&mut memory, LEN, ptr::null_mut()));
        check("cuCtxSynchronize", sys::cuCtxSynchronize());
    }
    let imported = |memory: u64| {
        let (queue, kind) = devbuf_cuda::queue_for_pointer(memory as usize)
            .expect("importing stream-ordered memory")
            .expect("stream-ordered memory is CUDA memory");
        (queue.ordinal(), kind)
    };
    assert_eq!(imported(memory), (last, MemKind::Device));
    // SAFETY: the context created above, destroyed once; the pool memory stays.
    check("cuCtxDestroy", unsafe { sys::cuCtxDestroy_v2(context) });
    assert_eq!(imported(memory), (last, MemKind::Device));
    let own = Buffer::alloc(&queue, MemKind::Device, 64).unwrap();
    assert_eq!(imported(own.ptr() as u64), (last, MemKind::Device));
    in_primary_context(last as i32, || {
        // SAFETY: allocated above, freed once, nothing pending on it.
        check("cuMemFree", unsafe { sys::cuMemFree_v2(memory) });
    });
});
