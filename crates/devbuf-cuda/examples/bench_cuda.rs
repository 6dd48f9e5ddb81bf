//! CUDA backend benchmark, for a GPU machine: copy bandwidth (256 MiB device to device, pinned
//! and pageable host to device) and pooled alloc+free of 1 KiB and 1 MiB through devbuf, against
//! the bare driver calls. Run with `cargo run --release -p devbuf-cuda --example bench_cuda`; without a
//! GPU it says why and exits cleanly.

use std::hint::black_box;
use std::ptr;
use std::sync::Arc;
use std::time::Instant;

use cudarc::driver::sys::{self, CUcontext, CUresult, CUstream};
use devbuf_core::{Availability, Backend, Buffer, MemKind, Queue};
use devbuf_cuda::{CudaBackend, CudaQueue};

const COPY_LEN: usize = 256 << 20;

/// Median over `samples` batches of `per_batch` calls of `op` followed by one `finish`, in
/// nanoseconds per call.
fn median_ns(
    samples: usize,
    per_batch: usize,
    mut op: impl FnMut(),
    mut finish: impl FnMut(),
) -> f64 {
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

/// Makes device 0's primary context current on this thread, as CuPy, torch or Numba would.
fn make_primary_context_current() {
    let mut device = 0;
    let mut context: CUcontext = ptr::null_mut();
    // SAFETY: valid out-pointers; the retain is held until the process exits.
    unsafe {
        check("cuDeviceGet", sys::cuDeviceGet(&mut device, 0));
        check(
            "cuDevicePrimaryCtxRetain",
            sys::cuDevicePrimaryCtxRetain(&mut context, device),
        );
        check("cuCtxPushCurrent", sys::cuCtxPushCurrent_v2(context));
    }
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
    if let Some(double) = &device.test_double {
        // Figures from a test double would read as GPU figures in any table they reach.
        println!(
            "no GPU: {} is {double}; nothing to benchmark",
            device.selector
        );
        return;
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
        println!("| {what} | {:.1} | {:.3} |", gbps(ns), ns / 1e6);
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
                // SAFETY: a valid out-pointer and a live stream of the current context; the
                // allocation is freed on the same stream right away.
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
    let sizes = [("1 KiB", 1 << 10), ("1 MiB", 1 << 20)];
    let without_context: Vec<f64> = sizes.iter().map(|&(_, len)| alloc_free(len)).collect();
    make_primary_context_current();
    let with_context: Vec<f64> = sizes.iter().map(|&(_, len)| alloc_free(len)).collect();
    let driver: Vec<Option<f64>> = sizes
        .iter()
        .map(|&(_, len)| cuda.uses_memory_pool().then(|| driver_alloc_free(len)))
        .collect();
    queue.wait().expect("wait");

    println!(
        "| device alloc+free (median of 101 batches of 1000) | devbuf, no context current | \
         devbuf, primary context current | cuMemAllocAsync + cuMemFreeAsync |"
    );
    println!("|---|---|---|---|");
    for (i, (size, _)) in sizes.iter().enumerate() {
        let driver = driver[i].map_or("n/a (no pools)".into(), |ns| format!("{ns:.0} ns"));
        println!(
            "| {size} | {:.0} ns | {:.0} ns | {driver} |",
            without_context[i], with_context[i]
        );
    }
}
