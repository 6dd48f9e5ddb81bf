//! Asynchronous streams, events, the default streams' synchronization, the documented host
//! synchronization of copies, stream-ordered allocation and the faults: one test per rule, each
//! through the exported C ABI. Work is held back with a gate (a host function) where a test needs
//! "has not run yet" to be a fact; the per-operation delay shows what a missing wait does.

mod common;

use std::ffi::c_void;
use std::ptr;

use common::*;

const LEN: usize = 1 << 16;

fn event(stream: CUstream) -> sys::CUevent {
    let mut event = ptr::null_mut();
    // SAFETY: a valid out-pointer; the stream is alive in the current context.
    unsafe {
        ok(sys::cuEventCreate(&mut event, 0));
        ok(sys::cuEventRecord(event, stream));
    }
    event
}

fn fill_async(ptr: CUdeviceptr, byte: u8, stream: CUstream) {
    // SAFETY: `ptr` is LEN bytes of live memory.
    ok(unsafe { sys::cuMemsetD8Async(ptr, byte, LEN, stream) });
}

fn copy_async(to: CUdeviceptr, from: CUdeviceptr, stream: CUstream) {
    // SAFETY: both are LEN bytes of live memory.
    ok(unsafe { sys::cuMemcpyAsync(to, from, LEN, stream) });
}

fn synchronize(stream: CUstream) {
    // SAFETY: the stream is alive.
    ok(unsafe { sys::cuStreamSynchronize(stream) });
}

child_test!(a_missing_wait_reads_old_bytes_and_a_wait_event_fixes_it
    ["DEVBUF_CUDA_TEST_DELAY_US" = "50000"] {
    setup();
    let (producer, consumer) = (stream(NON_BLOCKING), stream(NON_BLOCKING));
    let data = device_alloc(LEN);
    let pinned = pinned_alloc(LEN) as CUdeviceptr;
    fill_async(data, 0, producer);
    synchronize(producer);
    // No wait: the consumer's one (delayed) copy runs before the producer's third fill.
    fill_async(data, 0, producer);
    fill_async(data, 0, producer);
    fill_async(data, 0xAB, producer);
    copy_async(pinned, data, consumer);
    synchronize(consumer);
    assert!(read(pinned, LEN).iter().all(|&b| b == 0), "the copy did not race the fill");
    synchronize(producer);
    // With the wait, the copy sees the fill.
    fill_async(data, 0xCD, producer);
    // SAFETY: both handles are alive.
    ok(unsafe { sys::cuStreamWaitEvent(consumer, event(producer), 0) });
    copy_async(pinned, data, consumer);
    synchronize(consumer);
    assert!(read(pinned, LEN).iter().all(|&b| b == 0xCD));
});

static QUERY_GATE: Gate = Gate::new();

child_test!(events_and_streams_are_not_ready_until_reached {
    setup();
    let stream = stream(NON_BLOCKING);
    let data = device_alloc(LEN);
    QUERY_GATE.hold(stream);
    fill_async(data, 1, stream);
    let (start, end) = (event(stream), event(stream));
    // SAFETY: the handles are alive.
    unsafe {
        assert_eq!(sys::cuEventQuery(end), CUresult::CUDA_ERROR_NOT_READY);
        assert_eq!(sys::cuStreamQuery(stream), CUresult::CUDA_ERROR_NOT_READY);
        let mut elapsed = 0.0f32;
        assert_eq!(sys::cuEventElapsedTime(&mut elapsed, start, end), CUresult::CUDA_ERROR_NOT_READY);
        QUERY_GATE.open();
        ok(sys::cuEventSynchronize(end));
        ok(sys::cuEventQuery(end));
        ok(sys::cuStreamQuery(stream));
        ok(sys::cuEventElapsedTime(&mut elapsed, start, end));
        assert!(elapsed >= 0.0);
        ok(sys::cuEventDestroy_v2(end));
        assert_eq!(sys::cuEventQuery(end), CUresult::CUDA_ERROR_INVALID_HANDLE);
    }
});

static LEGACY_GATE: Gate = Gate::new();

child_test!(the_legacy_stream_waits_for_blocking_streams_but_not_for_non_blocking_ones {
    setup();
    let (blocking, non_blocking) = (stream(0), stream(NON_BLOCKING));
    LEGACY_GATE.hold(blocking);
    let data = device_alloc(LEN);
    let legacy = 1 as CUstream;
    fill_async(data, 7, legacy);
    let after_blocking = event(legacy);
    let independent = event(non_blocking);
    // SAFETY: the handles are alive.
    unsafe {
        ok(sys::cuEventSynchronize(independent));
        assert_eq!(sys::cuEventQuery(after_blocking), CUresult::CUDA_ERROR_NOT_READY);
        // The per-thread default stream is blocking too: it waits for the legacy stream.
        let per_thread = event(2 as CUstream);
        assert_eq!(sys::cuEventQuery(per_thread), CUresult::CUDA_ERROR_NOT_READY);
        LEGACY_GATE.open();
        ok(sys::cuEventSynchronize(per_thread));
        ok(sys::cuEventQuery(after_blocking));
        // Stream 0 is the legacy stream as well.
        ok(sys::cuStreamSynchronize(ptr::null_mut()));
    }
});

static CONTEXT_GATE: Gate = Gate::new();

child_test!(context_synchronize_waits_for_every_stream_and_waits_cross_devices {
    init();
    enter(1);
    let other_device = stream(NON_BLOCKING);
    CONTEXT_GATE.hold(other_device);
    let remote = device_alloc(LEN);
    fill_async(remote, 9, other_device);
    let filled = event(other_device);
    enter(0);
    let local_stream = stream(NON_BLOCKING);
    let local = device_alloc(LEN);
    // SAFETY: the handles are alive.
    ok(unsafe { sys::cuStreamWaitEvent(local_stream, filled, 0) });
    copy_async(local, remote, local_stream);
    let copied = event(local_stream);
    std::thread::sleep(std::time::Duration::from_millis(50));
    // SAFETY: the event is alive.
    assert_eq!(unsafe { sys::cuEventQuery(copied) }, CUresult::CUDA_ERROR_NOT_READY);
    CONTEXT_GATE.open();
    // SAFETY: device 0's context is current.
    ok(unsafe { sys::cuCtxSynchronize() });
    assert!(read(local, LEN).iter().all(|&b| b == 9));
});

child_test!(pageable_copies_follow_the_documented_host_synchronization
    ["DEVBUF_CUDA_TEST_DELAY_US" = "50000"] {
    setup();
    let stream = stream(NON_BLOCKING);
    let data = device_alloc(LEN);
    let mut pageable = vec![1u8; LEN];
    // Host to device from pageable memory: staged before the call returns.
    // SAFETY: `pageable` holds LEN bytes.
    ok(unsafe { sys::cuMemcpyHtoDAsync_v2(data, pageable.as_ptr().cast(), LEN, stream) });
    pageable.fill(2);
    // Device to pageable host memory: returns once done, with the staged bytes.
    let mut back = vec![0u8; LEN];
    // SAFETY: `back` holds LEN bytes.
    ok(unsafe { sys::cuMemcpyDtoHAsync_v2(back.as_mut_ptr().cast(), data, LEN, stream) });
    assert!(back.iter().all(|&b| b == 1));
    // Pinned memory is read when the stream gets there, not when the call returns.
    let pinned = pinned_alloc(LEN);
    // SAFETY: `pinned` holds LEN bytes; nothing else touches it until the stream is drained.
    unsafe {
        pinned.write_bytes(3, LEN);
        ok(sys::cuMemcpyHtoDAsync_v2(data, pinned.cast(), LEN, stream));
        pinned.write_bytes(4, LEN);
    }
    synchronize(stream);
    assert!(read(data, LEN).iter().all(|&b| b == 4));
});

static ALLOC_GATE: Gate = Gate::new();

child_test!(stream_ordered_memory_is_usable_only_after_its_allocation_is_reached {
    setup();
    let (owner, stranger) = (stream(NON_BLOCKING), stream(NON_BLOCKING));
    let mut ptr = 0;
    ALLOC_GATE.hold(owner);
    // SAFETY: a valid out-pointer and live stream.
    ok(unsafe { sys::cuMemAllocAsync(&mut ptr, LEN, owner) });
    // Ordered after the allocation: fine. Not ordered: an illegal address.
    fill_async(ptr, 5, owner);
    fill_async(ptr, 6, stranger);
    // SAFETY: the stream is alive.
    let result = unsafe { sys::cuStreamSynchronize(stranger) };
    assert_eq!(result, CUresult::CUDA_ERROR_ILLEGAL_ADDRESS);
    ALLOC_GATE.open();
    // Sticky: every later call in the context says so.
    let mut other = 0;
    // SAFETY: valid out-pointers.
    unsafe {
        assert_eq!(sys::cuMemAlloc_v2(&mut other, 64), CUresult::CUDA_ERROR_ILLEGAL_ADDRESS);
        assert_eq!(sys::cuStreamSynchronize(owner), CUresult::CUDA_ERROR_ILLEGAL_ADDRESS);
    }
});

child_test!(stream_ordered_frees_happen_when_the_stream_reaches_them {
    setup();
    let stream = stream(NON_BLOCKING);
    let mut ptr = 0;
    // SAFETY: a valid out-pointer and live stream; freed once.
    unsafe {
        ok(sys::cuMemAllocAsync(&mut ptr, LEN, stream));
        fill_async(ptr, 5, stream);
        ok(sys::cuMemFreeAsync(ptr, stream));
        assert_eq!(sys::cuMemFreeAsync(ptr, stream), CUresult::CUDA_ERROR_INVALID_VALUE);
    }
    synchronize(stream);
    let mut start = 0u64;
    // SAFETY: a valid out-pointer of the attribute's type.
    let result = unsafe {
        sys::cuPointerGetAttribute(
            (&raw mut start).cast(),
            sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
            ptr,
        )
    };
    assert_eq!(result, CUresult::CUDA_ERROR_INVALID_VALUE, "freed memory is unknown");
});

static FREE_GATE: Gate = Gate::new();

child_test!(freeing_memory_with_queued_work_is_a_sticky_illegal_address {
    init();
    enter(1);
    let healthy = device_alloc(64);
    enter(0);
    let stream = stream(NON_BLOCKING);
    let data = device_alloc(LEN);
    FREE_GATE.hold(stream);
    fill_async(data, 1, stream);
    // SAFETY: the free is the fault under test; it dereferences nothing.
    unsafe {
        assert_eq!(sys::cuMemFree_v2(data), CUresult::CUDA_ERROR_ILLEGAL_ADDRESS);
        FREE_GATE.open();
        assert_eq!(sys::cuCtxSynchronize(), CUresult::CUDA_ERROR_ILLEGAL_ADDRESS);
        let mut ptr = 0;
        assert_eq!(sys::cuMemAlloc_v2(&mut ptr, 64), CUresult::CUDA_ERROR_ILLEGAL_ADDRESS);
        // Another device's context is unaffected.
        let mut current = ptr::null_mut();
        ok(sys::cuCtxPopCurrent_v2(&mut current));
        let mut byte = 0u8;
        ok(sys::cuMemcpyDtoH_v2((&raw mut byte).cast(), healthy, 1));
    }
});

static HOST_FREE_GATE: Gate = Gate::new();

child_test!(freeing_pinned_or_managed_memory_with_queued_work_is_an_illegal_address {
    setup();
    let stream = stream(NON_BLOCKING);
    let pinned = pinned_alloc(LEN);
    HOST_FREE_GATE.hold(stream);
    fill_async(pinned as CUdeviceptr, 1, stream);
    // SAFETY: the free is the fault under test; it dereferences nothing.
    let result = unsafe { sys::cuMemFreeHost(pinned.cast()) };
    assert_eq!(result, CUresult::CUDA_ERROR_ILLEGAL_ADDRESS);
    HOST_FREE_GATE.open();
});

static MANAGED_FREE_GATE: Gate = Gate::new();

child_test!(freeing_managed_memory_with_queued_work_is_an_illegal_address {
    setup();
    let stream = stream(NON_BLOCKING);
    let mut managed = 0;
    // SAFETY: a valid out-pointer; the free is the fault under test.
    unsafe {
        ok(sys::cuMemAllocManaged(&mut managed, LEN, 1));
        MANAGED_FREE_GATE.hold(stream);
        fill_async(managed, 1, stream);
        assert_eq!(sys::cuMemFree_v2(managed), CUresult::CUDA_ERROR_ILLEGAL_ADDRESS);
    }
    MANAGED_FREE_GATE.open();
});

#[test]
fn a_fault_names_the_test_driver_and_the_operation_on_stderr() {
    let output = common::run_child(
        "freeing_memory_with_queued_work_is_a_sticky_illegal_address",
        &[],
    );
    assert!(output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    let faults: Vec<&str> = stderr
        .lines()
        .filter(|line| line.starts_with("devbuf CUDA test driver: illegal address in cuMemFree "))
        .collect();
    assert_eq!(faults.len(), 1, "{stderr}");
}

static REUSE_GATE: Gate = Gate::new();

child_test!(immediate_pool_reuse_catches_a_consumer_racing_the_previous_owner
    ["DEVBUF_CUDA_TEST_POOL_REUSE" = "immediate"] {
    setup();
    let (previous, next, consumer) = (stream(NON_BLOCKING), stream(NON_BLOCKING), stream(NON_BLOCKING));
    let (mut first, mut second) = (0, 0);
    REUSE_GATE.hold(previous);
    // SAFETY: valid out-pointers and live streams.
    unsafe {
        ok(sys::cuMemAllocAsync(&mut first, LEN, previous));
        fill_async(first, 1, previous);
        ok(sys::cuMemFreeAsync(first, previous));
        ok(sys::cuMemAllocAsync(&mut second, LEN, next));
    }
    assert_eq!(first, second, "the pool handed back the block freed last");
    // The consumer does not wait for `next`: it races the previous owner's fill.
    fill_async(second, 2, consumer);
    // SAFETY: the stream is alive.
    let result = unsafe { sys::cuStreamSynchronize(consumer) };
    assert_eq!(result, CUresult::CUDA_ERROR_ILLEGAL_ADDRESS);
    REUSE_GATE.open();
});

child_test!(a_consumer_that_waits_for_the_allocating_stream_is_fine_with_reuse
    ["DEVBUF_CUDA_TEST_POOL_REUSE" = "immediate", "DEVBUF_CUDA_TEST_DELAY_US" = "20000"] {
    setup();
    let (previous, next, consumer) = (stream(NON_BLOCKING), stream(NON_BLOCKING), stream(NON_BLOCKING));
    let (mut first, mut second) = (0, 0);
    // SAFETY: valid out-pointers and live streams.
    unsafe {
        ok(sys::cuMemAllocAsync(&mut first, LEN, previous));
        fill_async(first, 1, previous);
        ok(sys::cuMemFreeAsync(first, previous));
        ok(sys::cuMemAllocAsync(&mut second, LEN, next));
        ok(sys::cuStreamWaitEvent(consumer, event(next), 0));
    }
    fill_async(second, 2, consumer);
    synchronize(consumer);
    assert!(read(second, LEN).iter().all(|&b| b == 2));
});

/// A host function may not call the driver, but it may read what the stream did before it.
unsafe extern "C" fn note_reached(flag: *mut c_void) {
    // SAFETY: the test passes a live AtomicBool that outlives the stream's work.
    unsafe { &*(flag as *const std::sync::atomic::AtomicBool) }
        .store(true, std::sync::atomic::Ordering::Release);
}

child_test!(host_functions_run_in_stream_order ["DEVBUF_CUDA_TEST_DELAY_US" = "20000"] {
    setup();
    let stream = stream(NON_BLOCKING);
    let data = device_alloc(LEN);
    fill_async(data, 3, stream);
    let reached = std::sync::atomic::AtomicBool::new(false);
    // SAFETY: `reached` outlives the stream's work (synchronized below).
    ok(unsafe { sys::cuLaunchHostFunc(stream, Some(note_reached), (&raw const reached).cast_mut().cast()) });
    assert!(!reached.load(std::sync::atomic::Ordering::Acquire), "ran before the delayed fill");
    synchronize(stream);
    assert!(reached.load(std::sync::atomic::Ordering::Acquire));
});

static RUNNING: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
static MOST_AT_ONCE: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Counts how many host functions run at once while it runs (for 50 ms).
unsafe extern "C" fn count_overlap(_: *mut c_void) {
    use std::sync::atomic::Ordering::SeqCst;
    let now = RUNNING.fetch_add(1, SeqCst) + 1;
    MOST_AT_ONCE.fetch_max(now, SeqCst);
    std::thread::sleep(std::time::Duration::from_millis(50));
    RUNNING.fetch_sub(1, SeqCst);
}

// cuLaunchHostFunc: "Host functions without a mandated order (such as in independent streams)
// execute in undefined order and may be serialized." A GPU's driver runs them on one thread, so
// the double does too: a host function that waits for another stream's host function waits for
// ever, as on a GPU.
child_test!(host_functions_of_independent_streams_run_one_at_a_time {
    setup();
    let streams = [stream(NON_BLOCKING), stream(NON_BLOCKING), stream(NON_BLOCKING)];
    for &stream in &streams {
        // SAFETY: the function takes no data.
        ok(unsafe { sys::cuLaunchHostFunc(stream, Some(count_overlap), ptr::null_mut()) });
    }
    for stream in streams {
        synchronize(stream);
    }
    assert_eq!(MOST_AT_ONCE.load(std::sync::atomic::Ordering::SeqCst), 1);
});
