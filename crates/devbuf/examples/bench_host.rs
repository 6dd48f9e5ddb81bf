//! Host backend benchmark: 1 KiB alloc+free (plain and through a memory pool) and a 64 MiB copy,
//! devbuf against `std::alloc` and `copy_from_slice` in the same run; and pooled 1 KiB alloc+free
//! through the OpenCL backend against OpenCL's own allocation. Run with `ci/bench` (release build);
//! figures go to BENCHMARKS.md.

use std::alloc::{Layout, alloc, dealloc};
use std::hint::black_box;
use std::time::Instant;

use std::sync::Arc;

use devbuf::mr::{FreeAfter, MemoryResource, PoolOptions, PoolResource, QueueResource};
use devbuf::{Buffer, DEFAULT_ALIGNMENT, HostQueue, MemKind};

/// Median over `samples` batches of `per_batch` calls of `op`, in nanoseconds per call.
fn median_ns(samples: usize, per_batch: usize, mut op: impl FnMut()) -> f64 {
    let mut times: Vec<f64> = (0..samples)
        .map(|_| {
            let start = Instant::now();
            for _ in 0..per_batch {
                op();
            }
            start.elapsed().as_nanos() as f64 / per_batch as f64
        })
        .collect();
    times.sort_by(f64::total_cmp);
    times[samples / 2]
}

fn main() {
    let queue = HostQueue::shared();
    let layout = Layout::from_size_align(1024, DEFAULT_ALIGNMENT).unwrap();

    let std_alloc = median_ns(31, 20_000, || {
        // SAFETY: non-zero layout; freed right away with the same layout.
        unsafe {
            let ptr = black_box(alloc(layout));
            dealloc(ptr, layout);
        }
    });
    let devbuf_alloc = median_ns(31, 20_000, || {
        drop(black_box(
            Buffer::alloc(&queue, MemKind::Host, 1024).unwrap(),
        ));
    });

    let pool: Arc<dyn MemoryResource> =
        PoolResource::new(QueueResource::new(queue.clone()), PoolOptions::default());
    let pool_raw = median_ns(31, 20_000, || pool_cycle(&pool, MemKind::Host));
    let pool_buffer = median_ns(31, 20_000, || {
        drop(black_box(
            Buffer::alloc_from(&pool, MemKind::Host, 1024, DEFAULT_ALIGNMENT).unwrap(),
        ));
    });

    const LEN: usize = 64 << 20;
    let src_vec = vec![7u8; LEN];
    let mut dst_vec = vec![0u8; LEN];
    let std_copy = median_ns(15, 1, || dst_vec.copy_from_slice(black_box(&src_vec)));
    let src = Buffer::alloc(&queue, MemKind::Host, LEN).unwrap();
    let dst = Buffer::alloc(&queue, MemKind::Host, LEN).unwrap();
    src.fill(7).unwrap();
    dst.fill(0).unwrap();
    let devbuf_copy = median_ns(15, 1, || dst.copy_from(black_box(&src)).unwrap());
    assert_eq!(dst.to_vec().unwrap(), src_vec);

    let gbps = |ns: f64| LEN as f64 / ns;
    println!("| host benchmark (median) | std | devbuf | devbuf / std |");
    println!("|---|---|---|---|");
    println!(
        "| alloc+free 1 KiB (align {DEFAULT_ALIGNMENT}) | {std_alloc:.1} ns | {devbuf_alloc:.1} ns | {:.2}x |",
        devbuf_alloc / std_alloc
    );
    for (what, ns) in [
        ("pool allocate+deallocate 1 KiB (the resource)", pool_raw),
        ("pooled `Buffer` alloc+free 1 KiB", pool_buffer),
    ] {
        println!(
            "| {what} | {std_alloc:.1} ns | {ns:.1} ns | {:.2}x |",
            ns / std_alloc
        );
    }
    println!(
        "| copy 64 MiB host to host | {:.2} GB/s | {:.2} GB/s | {:.2}x time |",
        gbps(std_copy),
        gbps(devbuf_copy),
        devbuf_copy / std_copy
    );
    opencl();
}

/// One 1 KiB allocate+deallocate straight through a resource.
fn pool_cycle(pool: &Arc<dyn MemoryResource>, kind: MemKind) {
    let ptr = black_box(pool.allocate(kind, 1024, DEFAULT_ALIGNMENT).unwrap());
    // SAFETY: freed once, with the arguments it was allocated with; nothing used it.
    unsafe { pool.deallocate(ptr, kind, 1024, DEFAULT_ALIGNMENT, FreeAfter::Now) };
}

/// Pooled 1 KiB shared alloc+free through the OpenCL backend against OpenCL's own allocation.
fn opencl() {
    let Ok(queue) = devbuf::open("opencl") else {
        return println!("\nOpenCL: no usable device, skipped");
    };
    let Some(kind) = [MemKind::Shared, MemKind::Device]
        .into_iter()
        .find(|&kind| queue.supports(kind))
    else {
        return println!("\nOpenCL: the device allocates neither shared nor device memory");
    };
    let raw = median_ns(15, 2_000, || {
        let ptr = black_box(queue.allocate(kind, 1024, DEFAULT_ALIGNMENT).unwrap());
        // SAFETY: freed once, with the arguments it was allocated with; nothing used it.
        unsafe { queue.deallocate(ptr, kind, 1024, DEFAULT_ALIGNMENT) };
    });
    let pool: Arc<dyn MemoryResource> =
        PoolResource::new(QueueResource::new(queue.clone()), PoolOptions::default());
    let pooled = median_ns(15, 2_000, || {
        drop(black_box(
            Buffer::alloc_from(&pool, kind, 1024, DEFAULT_ALIGNMENT).unwrap(),
        ));
    });
    println!();
    println!(
        "| OpenCL ({}) (median) | OpenCL's own | devbuf pooled `Buffer` | pooled / own |",
        queue.device()
    );
    println!("|---|---|---|---|");
    println!(
        "| alloc+free 1 KiB {kind} | {raw:.1} ns | {pooled:.1} ns | {:.3}x |",
        pooled / raw
    );
}
