//! Runs each test in a fresh process (the driver's state, `cuInit` included, is per process, and
//! its settings come from the environment), against the built library through its real C ABI:
//! cudarc's `sys` functions, which load `libcuda.so.1` from `LD_LIBRARY_PATH`.

#![allow(dead_code)]

#[path = "../../../child_process.rs"]
pub mod child;

use std::ffi::c_void;
use std::path::PathBuf;
use std::process::{Command, Output};
use std::ptr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

pub use cudarc::driver::sys::{self, CUcontext, CUdeviceptr, CUresult, CUstream};

/// Child-process tests always run: the driver under test is the library cargo built.
pub fn may_run(_test: &str) -> bool {
    true
}

/// A directory holding `libcuda.so.1` (and `libcuda.so`, which cudarc tries first) linked to the
/// library cargo built for these tests.
fn driver_directory() -> PathBuf {
    let executable = std::env::current_exe().expect("the test executable");
    // target/<profile>/deps/<test>: the library beside it is the one built for this run; `cargo
    // test` does not copy it up to target/<profile>, where an older build may lie.
    let deps = executable.parent().unwrap();
    let library = deps.join("libdevbuf_cuda_test_driver.so");
    assert!(library.exists(), "{} was not built", library.display());
    let directory = deps.join("cuda-test-driver-for-tests");
    std::fs::create_dir_all(&directory).unwrap();
    for name in ["libcuda.so.1", "libcuda.so"] {
        let link = directory.join(name);
        // A link left by a target directory that was moved or copied names another build.
        if std::fs::read_link(&link).is_ok_and(|target| target != library) {
            let _ = std::fs::remove_file(&link);
        }
        // Tests run in parallel: another may have made the link first.
        match std::os::unix::fs::symlink(&library, &link) {
            Err(err) if err.kind() != std::io::ErrorKind::AlreadyExists => panic!("{err}"),
            _ => {}
        }
    }
    directory
}

/// Test `name` in a child process with `variables` set, loading the driver built for this run.
fn child_command(name: &str, variables: &[(&str, &str)]) -> Command {
    let mut command = child::command(name, variables);
    command.env("LD_LIBRARY_PATH", driver_directory());
    command
}

/// Runs test `name` alone in a child process with `variables` set, and returns what it did.
pub fn run_child(name: &str, variables: &[(&str, &str)]) -> Output {
    child::output(child_command(name, variables))
}

/// Runs the `#[ignore]`d test `name`, a helper that plays another process for a test (the other
/// side of a CUDA IPC exchange), with `variables` set; returns what it did.
pub fn run_helper(name: &str, variables: &[(&str, &str)]) -> Output {
    let mut command = child_command(name, variables);
    command.arg("--ignored");
    child::output(command)
}

#[track_caller]
pub fn ok(result: CUresult) {
    assert_eq!(result, CUresult::CUDA_SUCCESS);
}

pub fn init() {
    // SAFETY: cuInit takes no pointers.
    ok(unsafe { sys::cuInit(0) });
}

/// Retains device `ordinal`'s primary context and pushes it on this thread.
pub fn enter(ordinal: i32) -> CUcontext {
    let mut context = ptr::null_mut();
    // SAFETY: valid out-pointers; the ordinal is checked by the driver.
    unsafe {
        ok(sys::cuDevicePrimaryCtxRetain(&mut context, ordinal));
        ok(sys::cuCtxPushCurrent_v2(context));
    }
    context
}

/// `cuInit` and device 0's primary context, current on this thread.
pub fn setup() -> CUcontext {
    init();
    enter(0)
}

pub fn stream(flags: u32) -> CUstream {
    let mut stream = ptr::null_mut();
    // SAFETY: a valid out-pointer; a context is current.
    ok(unsafe { sys::cuStreamCreate(&mut stream, flags) });
    stream
}

pub const NON_BLOCKING: u32 = 1;

pub fn device_alloc(len: usize) -> CUdeviceptr {
    let mut ptr = 0;
    // SAFETY: a valid out-pointer; a context is current.
    ok(unsafe { sys::cuMemAlloc_v2(&mut ptr, len) });
    ptr
}

pub fn pinned_alloc(len: usize) -> *mut u8 {
    let mut ptr = ptr::null_mut();
    // SAFETY: a valid out-pointer; a context is current.
    ok(unsafe { sys::cuMemHostAlloc(&mut ptr, len, 0) });
    ptr.cast()
}

/// Reads `len` device bytes back with a synchronous copy.
pub fn read(ptr: CUdeviceptr, len: usize) -> Vec<u8> {
    let mut bytes = vec![0u8; len];
    // SAFETY: `bytes` holds `len` bytes; the copy is synchronous.
    ok(unsafe { sys::cuMemcpyDtoH_v2(bytes.as_mut_ptr().cast(), ptr, len) });
    bytes
}

/// A gate a stream can be held at: `hold` enqueues a host function that waits until `open`.
pub struct Gate(AtomicBool);

impl Gate {
    pub const fn new() -> Gate {
        Gate(AtomicBool::new(false))
    }

    pub fn hold(&'static self, stream: CUstream) {
        // SAFETY: the gate is static, so it outlives the host function.
        ok(unsafe {
            sys::cuLaunchHostFunc(
                stream,
                Some(wait_at_gate),
                self as *const Gate as *mut c_void,
            )
        });
    }

    pub fn open(&self) {
        self.0.store(true, Ordering::Release);
    }
}

unsafe extern "C" fn wait_at_gate(gate: *mut c_void) {
    // SAFETY: `hold` passes a static gate.
    let gate = unsafe { &*(gate as *const Gate) };
    let deadline = Instant::now() + Duration::from_secs(20);
    while !gate.0.load(Ordering::Acquire) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
    }
}
