//! Runs a test's body in a child process of the test binary with extra environment variables: the
//! CUDA test driver reads its settings once per process, and an illegal address it detects makes
//! the context's error sticky for the rest of that process. Where CUDA is unavailable the test is
//! skipped, printing why, unless `DEVBUF_REQUIRE` lists "cuda" (or "all").

#![allow(dead_code)]

#[path = "../../../../tests/child_process.rs"]
pub mod child;

use std::ffi::c_void;
use std::process::Output;
use std::ptr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use cudarc::driver::sys::{self, CUcontext, CUresult, CUstream};
use devbuf_core::{Backend, Queue};
use devbuf_cuda::{CudaBackend, CudaQueue};

/// Whether a child-process test may run: where CUDA can be used; prints why not (and fails when
/// `DEVBUF_REQUIRE` lists cuda).
pub fn may_run(test: &str) -> bool {
    match CudaBackend.availability() {
        devbuf_core::Availability::Available => true,
        devbuf_core::Availability::Unavailable(why) => {
            let required = std::env::var("DEVBUF_REQUIRE").unwrap_or_default();
            if required
                .split(',')
                .any(|backend| matches!(backend.trim(), "cuda" | "all"))
            {
                panic!("{test} skipped but DEVBUF_REQUIRE lists cuda: {why}");
            }
            eprintln!("skip {test}: {why}");
            false
        }
    }
}

/// Runs test `name` alone in a child process with `variables` set, on the driver the loader
/// finds (the test driver's, where ci/test puts it on `LD_LIBRARY_PATH`).
pub fn run_child(name: &str, variables: &[(&str, &str)]) -> Output {
    child::output(child::command(name, variables))
}

/// Device `ordinal`'s shared queue.
pub fn shared(ordinal: u32) -> Arc<dyn Queue> {
    CudaBackend::shared_queue(ordinal).expect("a shared CUDA queue")
}

/// A queue on device `ordinal` with a stream of its own.
pub fn fresh(ordinal: u32) -> Arc<dyn Queue> {
    Arc::new(CudaQueue::new(ordinal).expect("a CUDA queue"))
}

pub fn cuda(queue: &Arc<dyn Queue>) -> &CudaQueue {
    queue.as_any().downcast_ref().expect("a CUDA queue")
}

#[track_caller]
pub fn check(operation: &str, result: CUresult) {
    assert_eq!(result, CUresult::CUDA_SUCCESS, "{operation}");
}

/// Runs `body` with device `ordinal`'s primary context current, as another library would.
pub fn in_primary_context<T>(ordinal: i32, body: impl FnOnce() -> T) -> T {
    let mut device = 0;
    let mut context: CUcontext = ptr::null_mut();
    // SAFETY: valid out-pointers; the retain is released below.
    unsafe {
        check("cuDeviceGet", sys::cuDeviceGet(&mut device, ordinal));
        check(
            "cuDevicePrimaryCtxRetain",
            sys::cuDevicePrimaryCtxRetain(&mut context, device),
        );
        check("cuCtxPushCurrent", sys::cuCtxPushCurrent_v2(context));
    }
    let result = body();
    // SAFETY: pops the context pushed above and releases the retain taken above.
    unsafe {
        check("cuCtxPopCurrent", sys::cuCtxPopCurrent_v2(&mut context));
        check(
            "cuDevicePrimaryCtxRelease",
            sys::cuDevicePrimaryCtxRelease_v2(device),
        );
    }
    result
}

/// Enqueues setting `len` bytes at `ptr` to `byte` on `stream` (of device `ordinal`), as another
/// library would: devbuf does not know about it.
pub fn foreign_fill(ordinal: i32, stream: usize, ptr: *mut u8, byte: u8, len: usize) {
    in_primary_context(ordinal, || {
        // SAFETY: the caller keeps the memory and the stream alive until the fill completes.
        check("cuMemsetD8Async", unsafe {
            sys::cuMemsetD8Async(ptr as u64, byte, len, stream as CUstream)
        });
    });
}

/// Holds a stream at this point until `gate` opens (or 30 s pass, so that a failed test cannot
/// hang the process).
unsafe extern "C" fn wait_for_gate(gate: *mut c_void) {
    // SAFETY: the pointer is to one of the tests' static gates.
    let gate = unsafe { &*(gate as *const AtomicBool) };
    let deadline = Instant::now() + Duration::from_secs(30);
    while !gate.load(Ordering::Acquire) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Blocks `stream` (of device 0's primary context) until `gate` opens.
pub fn hold_stream(stream: usize, gate: &'static AtomicBool) {
    in_primary_context(0, || {
        // SAFETY: the stream is alive; the gate is static, so it outlives the host function.
        check("cuLaunchHostFunc", unsafe {
            sys::cuLaunchHostFunc(
                stream as CUstream,
                Some(wait_for_gate),
                gate as *const AtomicBool as *mut c_void,
            )
        });
    });
}
