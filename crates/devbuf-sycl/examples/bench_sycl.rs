//! devbuf's side of `ci/bench-sycl`: alloc+free of 1 KiB of each USM kind, and 64 MiB copies
//! shared -> device -> host, on the device a dpctl filter string names (default: devbuf's
//! default SYCL device). Prints one JSON object per line: first {"device": ...}, then
//! {"case": ..., "median_ns": ..., "runs": ...}. Build with --release.

use std::sync::Arc;
use std::time::Instant;

use devbuf_core::{Backend, Buffer, MemKind, Queue};

const ALLOC_BYTES: usize = 1024;
const ALLOCS_PER_RUN: u32 = 1000;
const ALLOC_RUNS: usize = 51;
const COPY_BYTES: usize = 64 << 20;
const COPY_RUNS: usize = 31;

fn median(mut samples: Vec<f64>) -> f64 {
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2]
}

fn report(case: &str, median_ns: f64, runs: usize) {
    println!("{{\"case\": \"{case}\", \"median_ns\": {median_ns:.1}, \"runs\": {runs}}}");
}

fn main() -> Result<(), String> {
    let fail = |err: devbuf_core::Error| err.to_string();
    let filter = std::env::args().nth(1).unwrap_or_default();
    let queue: Arc<dyn Queue> = devbuf_sycl::SyclBackend::new()
        .open(&filter)
        .map_err(fail)?;
    let device = queue.device();
    println!(
        "{{\"device\": \"{}\", \"name\": \"{}\"}}",
        device.selector, device.name
    );

    for kind in MemKind::ALLOCATABLE {
        let mut samples = Vec::with_capacity(ALLOC_RUNS);
        for _ in 0..ALLOC_RUNS {
            let start = Instant::now();
            for _ in 0..ALLOCS_PER_RUN {
                drop(Buffer::alloc(&queue, kind, ALLOC_BYTES).map_err(fail)?);
            }
            samples.push(start.elapsed().as_nanos() as f64 / f64::from(ALLOCS_PER_RUN));
        }
        report(
            &format!("alloc+free 1 KiB {kind}"),
            median(samples),
            ALLOC_RUNS,
        );
    }

    let shared = Buffer::alloc(&queue, MemKind::Shared, COPY_BYTES).map_err(fail)?;
    let device = Buffer::alloc(&queue, MemKind::Device, COPY_BYTES).map_err(fail)?;
    let host = Buffer::alloc(&queue, MemKind::Host, COPY_BYTES).map_err(fail)?;
    shared.fill(0x5A).map_err(fail)?;
    let mut to_device = Vec::with_capacity(COPY_RUNS);
    let mut to_host = Vec::with_capacity(COPY_RUNS);
    for _ in 0..COPY_RUNS {
        let start = Instant::now();
        device.copy_from(&shared).map_err(fail)?;
        let middle = Instant::now();
        host.copy_from(&device).map_err(fail)?;
        to_device.push((middle - start).as_nanos() as f64);
        to_host.push(middle.elapsed().as_nanos() as f64);
    }
    // The copies really happened.
    let mut tail = [0u8; 64];
    host.slice(COPY_BYTES - 64..COPY_BYTES)
        .and_then(|view| view.copy_to_host(&mut tail))
        .map_err(fail)?;
    if tail != [0x5A; 64] {
        return Err("the 64 MiB copies produced wrong bytes".into());
    }
    report("copy 64 MiB shared->device", median(to_device), COPY_RUNS);
    report("copy 64 MiB device->host", median(to_host), COPY_RUNS);
    Ok(())
}
