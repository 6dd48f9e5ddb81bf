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

/// What a test needs beyond a usable CUDA driver (see `has`).
#[derive(Debug, Clone, Copy)]
pub enum Need {
    /// The CUDA test driver, for the knob named (fault injection, devices made unusable): a GPU
    /// has no such knob.
    TestDriver(&'static str),
    /// At least this many CUDA devices.
    Devices(usize),
    /// Device 0 without concurrent managed access: the test driver's
    /// DEVBUF_CUDA_TEST_CONCURRENT_MANAGED_ACCESS=0, or a GPU without it.
    NoConcurrentManagedAccess,
}

/// Whether this machine has what `test` needs; prints why not (the test is then skipped: a GPU
/// lacks the test driver's knobs, and may have one device).
pub fn has(test: &str, need: Need) -> bool {
    let devices = CudaBackend.devices().expect("the CUDA devices");
    let on_test_driver = devices.iter().any(|device| device.test_double.is_some());
    let missing =
        match need {
            Need::TestDriver(knob) => (!on_test_driver)
                .then(|| format!("the CUDA test driver's {knob}, which a GPU lacks")),
            Need::Devices(count) => (devices.len() < count)
                .then(|| format!("{count} CUDA devices; the driver shows {}", devices.len())),
            Need::NoConcurrentManagedAccess => (!on_test_driver && concurrent_managed_access(0))
                .then(|| {
                    "a device without concurrent managed access; device 0 has it \
                 (CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS)"
                        .to_string()
                }),
        };
    if let Some(missing) = &missing {
        eprintln!("skip {test}: needs {missing}");
    }
    missing.is_none()
}

/// How many CUDA devices the driver shows.
pub fn device_count() -> u32 {
    CudaBackend.devices().expect("the CUDA devices").len() as u32
}

/// `CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS` of device `ordinal`.
fn concurrent_managed_access(ordinal: i32) -> bool {
    let mut value = 0;
    // SAFETY: a valid out-pointer; devbuf initialised the driver (`may_run`).
    check("cuDeviceGetAttribute", unsafe {
        sys::cuDeviceGetAttribute(
            &mut value,
            sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS,
            ordinal,
        )
    });
    value != 0
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

/// A one-shot gate a stream waits at (see `hold_stream`).
pub struct Gate {
    open: AtomicBool,
    expired: AtomicBool,
}

impl Gate {
    pub const fn new() -> Self {
        Gate {
            open: AtomicBool::new(false),
            expired: AtomicBool::new(false),
        }
    }

    pub fn open(&self) {
        self.open.store(true, Ordering::Release);
    }

    /// Whether the gate gave up waiting (10 s) rather than being opened: the test's thread was
    /// blocked meanwhile.
    pub fn expired(&self) -> bool {
        self.expired.load(Ordering::Acquire)
    }
}

/// Holds a stream at this point until `gate` opens (or 10 s pass, so that a failed test cannot
/// hang the process).
unsafe extern "C" fn wait_for_gate(gate: *mut c_void) {
    // SAFETY: the pointer is to one of the tests' static gates.
    let gate = unsafe { &*(gate as *const Gate) };
    let deadline = Instant::now() + Duration::from_secs(10);
    while !gate.open.load(Ordering::Acquire) {
        if Instant::now() > deadline {
            gate.expired.store(true, Ordering::Release);
            return;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Blocks `stream` (of device 0's primary context) until `gate` opens. A GPU's driver may run the
/// host functions of all streams on one thread (cuLaunchHostFunc: they "may be serialized") and
/// may synchronize implicitly in other calls (cuMemFree "may perform implicit synchronization"),
/// so a gated test runs alone in its process (`child_test!`), where no other test's call can wait
/// for the gate while the gate waits for the test.
pub fn hold_stream(stream: usize, gate: &'static Gate) {
    in_primary_context(0, || {
        // SAFETY: the stream is alive; the gate is static, so it outlives the host function.
        check("cuLaunchHostFunc", unsafe {
            sys::cuLaunchHostFunc(
                stream as CUstream,
                Some(wait_for_gate),
                gate as *const Gate as *mut c_void,
            )
        });
    });
}

/// Sleeps for the milliseconds its argument holds (a host function: it calls no CUDA).
unsafe extern "C" fn sleep_millis(millis: *mut c_void) {
    std::thread::sleep(Duration::from_millis(millis as u64));
}

/// Holds `stream` (of device 0's primary context) for `duration` from when its earlier work is
/// done: work enqueued after this is pending for that long on any device, a GPU's included
/// (where a 1 MiB fill takes microseconds). A host function that only sleeps needs nobody to open
/// it, so host functions serialized on one driver thread (cuLaunchHostFunc: "may be serialized")
/// cannot keep each other closed.
pub fn hold_stream_for(stream: usize, duration: Duration) {
    in_primary_context(0, || {
        // SAFETY: the stream is alive; the argument is a number, not a pointer.
        check("cuLaunchHostFunc", unsafe {
            sys::cuLaunchHostFunc(
                stream as CUstream,
                Some(sleep_millis),
                duration.as_millis() as usize as *mut c_void,
            )
        });
    });
}
