//! CUDA backend benchmark, for a GPU machine: copy bandwidth (256 MiB device to device, pinned
//! and pageable host to device) and device alloc+free of 1 KiB and 1 MiB through devbuf (the
//! device's stream-ordered pool) with no context, the primary context or another context current,
//! against the bare driver pair (goal: within 1.2x). Run with
//! `cargo run --release -p devbuf-cuda --example bench_cuda`; without a GPU it says why and exits
//! cleanly. With `--smoke` on the CUDA test driver every case runs once and no figure is printed
//! (a check that the benchmark runs, before it goes to a GPU machine).

use std::hint::black_box;
use std::ptr;
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use cudarc::driver::sys::{self, CUcontext, CUresult, CUstream};
use devbuf_core::{Availability, Backend, Buffer, MemKind, Queue};
use devbuf_cuda::{CudaBackend, CudaQueue};

const COPY_LEN: usize = 256 << 20;

/// `--smoke`: every case once, no figures (the CUDA test driver's run).
static SMOKE: OnceLock<bool> = OnceLock::new();

fn smoke() -> bool {
    *SMOKE.get().unwrap_or(&false)
}

/// Median over `samples` batches of `per_batch` calls of `op` followed by one `finish`, in
/// nanoseconds per call (one call of one batch in a smoke run).
fn median_ns(
    samples: usize,
    per_batch: usize,
    mut op: impl FnMut(),
    mut finish: impl FnMut(),
) -> f64 {
    let (samples, per_batch) = if smoke() {
        (1, 1)
    } else {
        (samples, per_batch)
    };
    let mut times: Vec<f64> = (0..samples)
        .map(|_| {
            let start = Instant::now();
            for _ in 0..per_batch {
                op();
            }
            finish();
            start.elapsed().as_nanos() as f64 / per_batch as f64
        })
        .collect();
    times.sort_by(f64::total_cmp);
    times[samples / 2]
}

/// Nanoseconds per copy of [`COPY_LEN`] bytes from `src` to `dst`, 10 copies per timed batch.
fn copy_ns(queue: &Arc<dyn Queue>, dst: *mut u8, src: *const u8) -> f64 {
    let copy = || {
        // SAFETY: both buffers outlive the benchmark and hold COPY_LEN bytes; each batch waits.
        unsafe { queue.copy(dst, src, COPY_LEN) }.expect("copy");
    };
    copy();
    queue.wait().expect("wait");
    median_ns(9, 10, copy, || queue.wait().expect("wait"))
}

fn check(operation: &str, result: CUresult) {
    assert_eq!(result, CUresult::CUDA_SUCCESS, "{operation}");
}

/// Device 0's primary context made current on this thread, as CuPy, torch or Numba leave it; or,
/// with `own`, a context of device 0 of its own (PyCUDA's kind), made and made current.
fn push_context(own: bool) {
    let mut device = 0;
    let mut context: CUcontext = ptr::null_mut();
    // SAFETY: valid out-pointers; a context made here lives until the process exits.
    unsafe {
        check("cuDeviceGet", sys::cuDeviceGet(&mut device, 0));
        if own {
            check("cuCtxCreate", sys::cuCtxCreate_v2(&mut context, 0, device));
        } else {
            check(
                "cuDevicePrimaryCtxRetain",
                sys::cuDevicePrimaryCtxRetain(&mut context, device),
            );
            check("cuCtxPushCurrent", sys::cuCtxPushCurrent_v2(context));
        }
    }
}

/// Takes the context [`push_context`] made current off this thread.
fn pop_context() {
    let mut context: CUcontext = ptr::null_mut();
    // SAFETY: a valid out-pointer; a context is current.
    check("cuCtxPopCurrent", unsafe {
        sys::cuCtxPopCurrent_v2(&mut context)
    });
}

/// One row of the table: devbuf's ns per call against `peer`'s, their ratio and the goal on it.
fn row(case: &str, ours_ns: f64, peer: &str, peer_ns: f64, goal: f64) {
    if smoke() {
        println!("| {case} | — | — ({peer}) | — | smoke run: not measured |");
        return;
    }
    let ratio = ours_ns / peer_ns;
    let verdict = if ratio <= goal { "meets" } else { "MISSES" };
    println!(
        "| {case} | {ours_ns:.0} ns | {peer_ns:.0} ns ({peer}) | {ratio:.2}× | ≤ {goal}×: {verdict} |"
    );
}

fn main() {
    if let Availability::Unavailable(reason) = CudaBackend.availability() {
        println!("CUDA is unavailable, nothing to benchmark: {reason}");
        return;
    }
    let shared = CudaBackend::shared_queue(0).expect("device 0");
    let cuda: &CudaQueue = &shared;
    let queue: Arc<dyn Queue> = shared.clone();
    let device = queue.device();
    let smoke_run = std::env::args().any(|argument| argument == "--smoke");
    SMOKE.set(smoke_run).expect("set once");
    match &device.test_double {
        // Figures from a test double would read as GPU figures in any table they reach.
        Some(double) if !smoke_run => {
            println!(
                "no GPU: {} is {double}; nothing to benchmark",
                device.selector
            );
            return;
        }
        Some(double) => println!("smoke run on {double}: every case runs once, no figures"),
        None if smoke_run => {
            println!("--smoke is for the CUDA test driver; on a GPU, run without it");
            return;
        }
        None => {}
    }
    println!(
        "{} ({}, {} GiB), device memory from {}",
        device.name,
        device.driver,
        device.global_mem_bytes >> 30,
        if cuda.uses_memory_pool() {
            "the stream-ordered pool"
        } else {
            "cuMemAlloc (no pools)"
        }
    );
    println!();

    let device_src = Buffer::alloc(&queue, MemKind::Device, COPY_LEN).expect("device memory");
    let device_dst = Buffer::alloc(&queue, MemKind::Device, COPY_LEN).expect("device memory");
    let pinned = Buffer::alloc(&queue, MemKind::Host, COPY_LEN).expect("pinned memory");
    let pageable = vec![7u8; COPY_LEN];
    device_src.fill(1).expect("fill");
    pinned.fill(2).expect("fill");

    let d2d = copy_ns(&queue, device_dst.ptr(), device_src.ptr());
    let h2d_pinned = copy_ns(&queue, device_dst.ptr(), pinned.ptr());
    let h2d_pageable = copy_ns(&queue, device_dst.ptr(), pageable.as_ptr());
    assert!(
        device_dst
            .to_vec()
            .expect("read back")
            .iter()
            .all(|&b| b == 7)
    );

    let gbps = |ns: f64| COPY_LEN as f64 / ns;
    println!("| copy 256 MiB (median of 9 batches of 10) | GB/s | ms per copy |");
    println!("|---|---|---|");
    for (what, ns) in [
        ("device to device", d2d),
        ("pinned host to device", h2d_pinned),
        ("pageable host to device", h2d_pageable),
    ] {
        if smoke() {
            println!("| {what} | — | — |");
        } else {
            println!("| {what} | {:.1} | {:.3} |", gbps(ns), ns / 1e6);
        }
    }
    println!();

    let alloc_free = |len: usize| {
        median_ns(
            101,
            1000,
            || {
                drop(black_box(
                    Buffer::alloc(&queue, MemKind::Device, len).expect("alloc"),
                ))
            },
            || {},
        )
    };
    let stream = cuda.stream() as CUstream;
    let driver_alloc_free = |len: usize| {
        median_ns(
            101,
            1000,
            || {
                let mut ptr = 0;
                // SAFETY: a valid out-pointer and a live stream of device 0's primary context;
                // the allocation is freed on the same stream right away.
                unsafe {
                    check(
                        "cuMemAllocAsync",
                        sys::cuMemAllocAsync(&mut ptr, len, stream),
                    );
                    check(
                        "cuMemFreeAsync",
                        sys::cuMemFreeAsync(black_box(ptr), stream),
                    );
                }
            },
            || {},
        )
    };
    if !cuda.uses_memory_pool() {
        println!(
            "device alloc+free: no memory pools on this device, no stream-ordered pair to compare"
        );
        return;
    }
    println!(
        "| device alloc+free (median of 101 batches of 1000) | devbuf | the bare pair, the \
         primary context current | ratio | goal |"
    );
    println!("|---|---:|---:|---:|---|");
    for (size, len) in [("1 KiB", 1 << 10), ("1 MiB", 1 << 20)] {
        // The bare pair, as a library with the primary context current makes it.
        push_context(false);
        let bare = driver_alloc_free(len);
        let primary = alloc_free(len);
        pop_context();
        let none = alloc_free(len);
        push_context(true);
        let other = alloc_free(len);
        pop_context();
        queue.wait().expect("wait");
        let pair = "cuMemAllocAsync + cuMemFreeAsync";
        for (current, ns) in [
            ("no context current", none),
            ("the primary context current", primary),
            ("another context current", other),
        ] {
            row(
                &format!("device alloc+free {size}, {current}"),
                ns,
                pair,
                bare,
                1.2,
            );
        }
    }
}
