//! The host synchronization NVIDIA documents for synchronous calls ("API synchronization
//! behavior" in the driver API reference), `cuMemFree`'s implicit synchronization,
//! `CU_CTX_SYNC_MEMOPS`, and host functions that call the driver. One test per rule, each through
//! the exported C ABI.

mod common;

use std::ffi::c_void;
use std::ptr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use common::*;

const LEN: usize = 1 << 16;

/// Opens `gate` after `delay`, from another thread.
fn open_later(gate: &'static Gate, delay: Duration) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        std::thread::sleep(delay);
        gate.open();
    })
}

// cuMemFree: "For all other pointers [than the stream-ordered allocator's], this API may perform
// implicit synchronization", and a synchronous copy from pageable memory to the device "will
// return once the pageable buffer has been copied to the staging memory for DMA transfer to
// device memory, but the DMA to final destination may not have completed". NVIDIA's numba-cuda
// `cudadrv/test_deallocations.py` frees right after such copies: the free must wait for them.
child_test!(a_free_right_after_a_synchronous_pageable_copy_waits_for_it
    ["DEVBUF_CUDA_TEST_DELAY_US" = "50000"] {
    setup();
    let pageable = vec![7u8; LEN];
    for _ in 0..3 {
        let data = device_alloc(LEN);
        // SAFETY: `pageable` holds LEN bytes; the free comes after the copy returned.
        unsafe {
            ok(sys::cuMemcpyHtoD_v2(data, pageable.as_ptr().cast(), LEN));
            ok(sys::cuMemFree_v2(data));
        }
    }
    // No fault: the context is healthy.
    // SAFETY: no arguments.
    ok(unsafe { sys::cuCtxSynchronize() });
});

static SYNC_COPY_GATE: Gate = Gate::new();

// "For transfers from pageable host memory to device memory, a stream sync is performed before
// the copy is initiated."
child_test!(a_synchronous_copy_from_pageable_memory_syncs_its_stream_first {
    setup();
    let data = device_alloc(LEN);
    let pageable = vec![1u8; LEN];
    SYNC_COPY_GATE.hold(ptr::null_mut());
    let opener = open_later(&SYNC_COPY_GATE, Duration::from_millis(300));
    let start = Instant::now();
    // SAFETY: `pageable` holds LEN bytes.
    ok(unsafe { sys::cuMemcpyHtoD_v2(data, pageable.as_ptr().cast(), LEN) });
    assert!(start.elapsed() >= Duration::from_millis(250), "the copy did not wait for its stream");
    opener.join().unwrap();
});

static HOST_COPY_GATE: Gate = Gate::new();

// "For transfers from any host memory to any host memory, the function is fully synchronous with
// respect to the host", for the asynchronous copies too.
child_test!(asynchronous_copies_between_host_memory_are_fully_synchronous {
    setup();
    let stream = stream(NON_BLOCKING);
    let (source, destination) = (pinned_alloc(LEN), pinned_alloc(LEN));
    let mut pageable = vec![0u8; LEN];
    // SAFETY: both pinned ranges hold LEN bytes; nothing else touches them meanwhile.
    unsafe {
        source.write_bytes(3, LEN);
        HOST_COPY_GATE.hold(stream);
        let opener = open_later(&HOST_COPY_GATE, Duration::from_millis(100));
        ok(sys::cuMemcpyAsync(destination as CUdeviceptr, source as CUdeviceptr, LEN, stream));
        assert_eq!(*destination.add(LEN - 1), 3, "pinned to pinned returned before copying");
        source.write_bytes(4, LEN);
        ok(sys::cuMemcpyAsync(pageable.as_mut_ptr() as CUdeviceptr, source as CUdeviceptr, LEN, stream));
        assert_eq!(pageable[LEN - 1], 4, "pinned to pageable returned before copying");
        pageable.fill(5);
        ok(sys::cuMemcpyAsync(destination as CUdeviceptr, pageable.as_ptr() as CUdeviceptr, LEN, stream));
        assert_eq!(*destination, 5, "pageable to pinned returned before copying");
        opener.join().unwrap();
    }
});

// CU_CTX_SYNC_MEMOPS: "Ensures that synchronous memory operations initiated on this context will
// always synchronize." Without it, a synchronous copy from pageable memory to the device returns
// before the copy is done, and a synchronous fill of device memory is asynchronous.
child_test!(synchronous_memory_operations_always_synchronize_with_sync_memops
    ["DEVBUF_CUDA_TEST_DELAY_US" = "50000"] {
    const SYNC_MEMOPS: u32 = 0x80;
    init();
    let pending = |flags: u32| {
        let mut context = ptr::null_mut();
        // SAFETY: a valid out-pointer; the context is current until destroyed below.
        ok(unsafe { sys::cuCtxCreate_v2(&mut context, flags, 0) });
        let data = device_alloc(LEN);
        let pageable = vec![1u8; LEN];
        // SAFETY: `pageable` holds LEN bytes; `data` is LEN bytes of device memory.
        let (after_copy, after_fill) = unsafe {
            ok(sys::cuMemcpyHtoD_v2(data, pageable.as_ptr().cast(), LEN));
            let after_copy = sys::cuStreamQuery(ptr::null_mut());
            ok(sys::cuCtxSynchronize());
            ok(sys::cuMemsetD8_v2(data, 2, LEN));
            let after_fill = sys::cuStreamQuery(ptr::null_mut());
            ok(sys::cuCtxSynchronize());
            ok(sys::cuCtxDestroy_v2(context));
            (after_copy, after_fill)
        };
        (after_copy, after_fill)
    };
    let not_ready = CUresult::CUDA_ERROR_NOT_READY;
    assert_eq!(pending(0), (not_ready, not_ready));
    assert_eq!(pending(SYNC_MEMOPS), (CUresult::CUDA_SUCCESS, CUresult::CUDA_SUCCESS));
});

static HOST_FUNCTION_RESULT: AtomicU32 = AtomicU32::new(u32::MAX);

unsafe extern "C" fn calls_the_driver(_: *mut c_void) {
    let mut context = ptr::null_mut();
    // SAFETY: a valid out-pointer; the call itself is the rule under test.
    let result = unsafe { sys::cuCtxGetCurrent(&mut context) };
    HOST_FUNCTION_RESULT.store(result as u32, Ordering::Release);
}

// cuStreamAddCallback: "Callbacks must not make any CUDA API calls. Attempting to use a CUDA API
// will result in CUDA_ERROR_NOT_PERMITTED." cuLaunchHostFunc: "The host function must not make any
// CUDA API calls. Attempting to use a CUDA API may result in CUDA_ERROR_NOT_PERMITTED".
child_test!(host_functions_may_not_call_the_driver {
    setup();
    let stream = stream(NON_BLOCKING);
    // SAFETY: the function is static and takes no data.
    unsafe {
        ok(sys::cuLaunchHostFunc(stream, Some(calls_the_driver), ptr::null_mut()));
        ok(sys::cuStreamSynchronize(stream));
    }
    let result = HOST_FUNCTION_RESULT.load(Ordering::Acquire);
    assert_eq!(result, CUresult::CUDA_ERROR_NOT_PERMITTED as u32);
    // Outside the host function, the same call works.
    let mut context = ptr::null_mut();
    // SAFETY: a valid out-pointer.
    ok(unsafe { sys::cuCtxGetCurrent(&mut context) });
});

static DESTROYED_GATE: Gate = Gate::new();

// cuStreamDestroy: "In case the device is still doing work in the stream hStream when
// cuStreamDestroy() is called, the function will return immediately and the resources associated
// with hStream will be released automatically once the device has completed all work in hStream";
// cuCtxSynchronize "Blocks until the device has completed all preceding requested tasks", that
// work included.
child_test!(context_synchronize_waits_for_the_work_of_a_destroyed_stream {
    setup();
    let data = device_alloc(LEN);
    let doomed = stream(0);
    DESTROYED_GATE.hold(doomed);
    // SAFETY: `data` is LEN bytes of live memory; the stream is alive until destroyed here.
    unsafe {
        ok(sys::cuMemsetD8Async(data, 0x5A, LEN, doomed));
        ok(sys::cuStreamDestroy_v2(doomed));
    }
    let started = Instant::now();
    let opener = open_later(&DESTROYED_GATE, Duration::from_millis(300));
    // SAFETY: a context is current.
    ok(unsafe { sys::cuCtxSynchronize() });
    assert!(started.elapsed() >= Duration::from_millis(250), "returned before the destroyed stream's fill ran");
    opener.join().unwrap();
    assert!(read(data, LEN).iter().all(|&b| b == 0x5A));
});

static LEGACY_AFTER_DESTROYED_GATE: Gate = Gate::new();

// The legacy default stream waits for the work of blocking streams enqueued before (CUDA Driver
// API, "Stream synchronization behavior": "The legacy default stream is an implicit stream which
// synchronizes with all other streams in the same CUcontext except for non-blocking streams"),
// whether or not the blocking stream has since been destroyed (its work still runs, see above).
child_test!(the_legacy_stream_waits_for_the_work_of_a_destroyed_blocking_stream {
    setup();
    let data = device_alloc(LEN);
    let doomed = stream(0);
    LEGACY_AFTER_DESTROYED_GATE.hold(doomed);
    // SAFETY: `data` is LEN bytes of live memory; the stream is alive until destroyed here.
    unsafe {
        ok(sys::cuMemsetD8Async(data, 0x11, LEN, doomed));
        ok(sys::cuStreamDestroy_v2(doomed));
        ok(sys::cuMemsetD8Async(data, 0x22, LEN, 1 as CUstream));
    }
    let opener = open_later(&LEGACY_AFTER_DESTROYED_GATE, Duration::from_millis(100));
    opener.join().unwrap();
    std::thread::sleep(Duration::from_millis(300));
    // The legacy stream's fill ran last.
    assert!(read(data, LEN).iter().all(|&b| b == 0x22));
});
