//! What ordering devbuf after other libraries' work costs on CUDA, for the choice recorded in
//! docs/guide/ordering.md and BENCHMARKS-archive.md: devbuf's own non-blocking stream, ordered
//! after the legacy default stream by an event only when it touches memory it handed out (what
//! devbuf does), against a blocking stream, which follows the legacy stream by itself on every
//! operation (the alternative; measured as a devbuf queue over a blocking stream,
//! `CudaQueue::with_stream`).
//!
//! ```text
//! cargo run --release -p devbuf-cuda --example ordering_cost -- access    # time per access
//! DEVBUF_CUDA_TEST_DELAY_US=1000 cargo run ... -- overlap                  # unrelated work, serialized or not
//! cargo run ... -- repeat <ours|blocking> <exported|private> <fill|view|to_vec> <n>  # for counting driver calls
//! ```
//!
//! On the devbuf CUDA test driver it says so: its times are the double's (a thread per stream), not
//! a GPU's; the driver calls per access and the serialization are what carries over.

use std::hint::black_box;
use std::ptr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cudarc::driver::sys::{self, CUcontext, CUresult, CUstream};
use devbuf_core::{Availability, Backend, Buffer, MemKind, Queue};
use devbuf_cuda::{CudaBackend, CudaQueue};

/// Bytes each access touches.
const LEN: usize = 4096;

fn check(operation: &str, result: CUresult) {
    assert_eq!(result, CUresult::CUDA_SUCCESS, "{operation}");
}

/// Makes device 0's primary context current on this thread, as another library would.
fn enter_primary_context() {
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

/// The two designs: devbuf's own queue, and a queue over a new blocking stream (leaked: it lives
/// as long as the process).
fn queue(design: &str) -> Arc<dyn Queue> {
    match design {
        "ours" => CudaBackend::shared_queue(0).expect("device 0"),
        "blocking" => {
            let mut stream: CUstream = ptr::null_mut();
            // SAFETY: a valid out-pointer; flags 0 make a blocking stream.
            check("cuStreamCreate", unsafe {
                sys::cuStreamCreate(&mut stream, 0)
            });
            // SAFETY: the stream is never destroyed.
            Arc::new(unsafe { CudaQueue::with_stream(0, stream as usize) }.expect("a queue"))
        }
        other => panic!("no design {other:?}: ours or blocking"),
    }
}

/// Pinned memory on `queue`, handed out (as any export marks it) or not.
fn memory(queue: &Arc<dyn Queue>, exported: bool) -> Buffer {
    let buffer = Buffer::alloc(queue, MemKind::Host, LEN).expect("pinned memory");
    buffer.fill(0).expect("fill");
    if exported {
        buffer.mark_exported();
    }
    buffer
}

/// One access: a command (a blocking fill), a host view (what the buffer protocol waits for), or
/// a copy to the host.
fn access(buffer: &Buffer, op: &str) {
    match op {
        "fill" => buffer.fill(1).expect("fill"),
        "view" => buffer.synchronize().expect("synchronize"),
        "to_vec" => drop(black_box(buffer.to_vec().expect("to_vec"))),
        other => panic!("no access {other:?}: fill, view or to_vec"),
    }
}

/// Median over 9 batches of `n` accesses, in microseconds per access.
fn median_us(n: usize, mut op: impl FnMut()) -> f64 {
    op();
    let mut times: Vec<f64> = (0..9)
        .map(|_| {
            let start = Instant::now();
            for _ in 0..n {
                op();
            }
            start.elapsed().as_secs_f64() * 1e6 / n as f64
        })
        .collect();
    times.sort_by(f64::total_cmp);
    times[4]
}

fn access_table() {
    let designs = [("ours", queue("ours")), ("blocking", queue("blocking"))];
    println!(
        "| access to 4 KiB of pinned memory | devbuf's stream, private | devbuf's stream, handed out | blocking stream, private |"
    );
    println!("|---|---:|---:|---:|");
    for op in ["fill", "view", "to_vec"] {
        let mut cells = Vec::new();
        for (design, exported) in [(0, false), (0, true), (1, false)] {
            let buffer = memory(&designs[design].1, exported);
            cells.push(format!("{:.1} µs", median_us(200, || access(&buffer, op))));
        }
        println!("| {op} | {} |", cells.join(" | "));
    }
    // The blocking design's host view of handed-out memory: an event on its stream, waited for.
    let blocking = &designs[1].1;
    let record_and_wait = median_us(200, || {
        blocking
            .record_event()
            .expect("event")
            .wait()
            .expect("wait")
    });
    println!(
        "| view (blocking design: an event on its stream, waited for) | | | {record_and_wait:.1} µs |"
    );
}

/// Another library's work on the legacy stream and devbuf's on unrelated, never exported memory,
/// at once: how long until devbuf's work is done, and the other library's.
fn overlap_table() {
    const OPS: usize = 10;
    let mut theirs = 0u64;
    // SAFETY: a valid out-pointer; freed below.
    check("cuMemAlloc", unsafe {
        sys::cuMemAlloc_v2(&mut theirs, 1 << 20)
    });
    let their_work = || {
        for _ in 0..OPS {
            // SAFETY: their own device memory, on the legacy stream (1).
            check("cuMemsetD8Async", unsafe {
                sys::cuMemsetD8Async(theirs, 1, 1 << 20, 1 as CUstream)
            });
        }
    };
    let wait_theirs = || {
        // SAFETY: the legacy stream of the current context.
        check("cuStreamSynchronize", unsafe {
            sys::cuStreamSynchronize(1 as CUstream)
        });
    };
    println!("| {OPS} operations each, at once | devbuf's stream | blocking stream |");
    println!("|---|---:|---:|");
    let mut ours_first = Vec::new();
    let mut theirs_first = Vec::new();
    for design in ["ours", "blocking"] {
        let queue = queue(design);
        let ours = Buffer::alloc(&queue, MemKind::Device, 1 << 20).expect("device memory");
        let our_work = || {
            for _ in 0..OPS {
                ours.enqueue_fill(2).expect("fill");
            }
        };
        // Theirs enqueued first: devbuf's wait for its own work.
        their_work();
        let start = Instant::now();
        our_work();
        ours.synchronize().expect("synchronize");
        theirs_first.push(start.elapsed());
        wait_theirs();
        // Ours enqueued first: their wait for their own work.
        our_work();
        let start = Instant::now();
        their_work();
        wait_theirs();
        ours_first.push(start.elapsed());
        ours.synchronize().expect("synchronize");
    }
    let ms = |d: &Duration| format!("{:.1} ms", d.as_secs_f64() * 1e3);
    println!(
        "| devbuf's wait for its own work, another library's queued first on the legacy stream | {} | {} |",
        ms(&theirs_first[0]),
        ms(&theirs_first[1])
    );
    println!(
        "| another library's wait for its legacy-stream work, devbuf's queued first | {} | {} |",
        ms(&ours_first[0]),
        ms(&ours_first[1])
    );
    // SAFETY: allocated above; the work on it is done.
    check("cuMemFree", unsafe { sys::cuMemFree_v2(theirs) });
}

/// `n` accesses and nothing else, for counting driver calls from outside (BENCHMARKS-archive.md).
fn repeat(args: &[String]) {
    let [design, exported, op, n] = args else {
        panic!("repeat <ours|blocking> <exported|private> <fill|view|to_vec> <n>");
    };
    let buffer = memory(&queue(design), exported == "exported");
    for _ in 0..n.parse::<usize>().expect("a count") {
        access(&buffer, op);
    }
}

fn main() {
    if let Availability::Unavailable(reason) = CudaBackend.availability() {
        println!("CUDA is unavailable, nothing to measure: {reason}");
        return;
    }
    enter_primary_context();
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("repeat") {
        return repeat(&args[1..]);
    }
    let info = CudaBackend.devices().expect("devices").remove(0);
    match &info.test_double {
        Some(double) => println!("{}: NOT A GPU: {double}", info.selector),
        None => println!("{}: {} ({})", info.selector, info.name, info.driver),
    }
    println!();
    match args.first().map(String::as_str) {
        None | Some("access") => access_table(),
        Some("overlap") => overlap_table(),
        Some(other) => panic!("no table {other:?}: access, overlap or repeat"),
    }
}
