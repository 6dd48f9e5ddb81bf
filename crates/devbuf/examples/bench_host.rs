//! Host backend benchmark: 1 KiB alloc+free (the default resource, a pool, a pooled `Buffer`)
//! against `std::alloc`, and a 64 MiB copy against `copy_from_slice`, in alternating rounds of one
//! run (devbuf, std, devbuf, std, ...: machine load hits both alike); and pooled 1 KiB alloc+free
//! through the OpenCL backend against OpenCL's own allocation. Each row's ratio is the median of
//! the per-round ratios. Run with `ci/bench` (release build); figures go to BENCHMARKS.md, and to
//! the JSON-lines file `DEVBUF_BENCH_JSON` names, when set.
//!
//! `bench_host --count CASE SIDE N` runs only N calls of one side (`devbuf` or `std`) of one
//! alloc+free case (`alloc`, `pool`, `pooled-buffer`): what `ci/bench-counts` counts
//! instructions of under callgrind.

mod bench_rows;

use std::alloc::{Layout, alloc, dealloc};
use std::hint::black_box;
use std::ptr::NonNull;
use std::sync::Arc;

use devbuf::mr::{FreeAfter, MemoryResource, PoolOptions, PoolResource, QueueResource};
use devbuf::{Buffer, DEFAULT_ALIGNMENT, HostQueue, MemKind, Queue};

use bench_rows::{Row, write_rows};

const SECTION: &str = "host backend (Rust)";
const ROUNDS: usize = 31;
const CALLS_PER_ROUND: usize = 20_000;

/// Host memory from `std::alloc` with the host queue's alignment, for the copy's peer.
struct HostBlock {
    ptr: NonNull<u8>,
    layout: Layout,
}

impl HostBlock {
    fn filled(len: usize, byte: u8) -> HostBlock {
        let layout = Layout::from_size_align(len, DEFAULT_ALIGNMENT).unwrap();
        // SAFETY: a non-zero layout.
        let ptr = NonNull::new(unsafe { alloc(layout) }).expect("64 MiB of host memory");
        // SAFETY: the block is `len` bytes, written before anything reads it.
        unsafe { ptr.as_ptr().write_bytes(byte, len) };
        HostBlock { ptr, layout }
    }

    fn bytes(&self) -> &[u8] {
        // SAFETY: the block holds `layout.size()` initialized bytes, borrowed with `self`.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.layout.size()) }
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `bytes`, borrowed mutably with `self`.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.layout.size()) }
    }
}

impl Drop for HostBlock {
    fn drop(&mut self) {
        // SAFETY: allocated in `filled` with this layout, freed once.
        unsafe { dealloc(self.ptr.as_ptr(), self.layout) };
    }
}

fn std_cycle(layout: Layout) {
    // SAFETY: non-zero layout; freed right away with the same layout.
    unsafe {
        let ptr = black_box(alloc(layout));
        dealloc(ptr, layout);
    }
}

fn buffer_cycle(queue: &Arc<dyn Queue>) {
    drop(black_box(
        Buffer::alloc(queue, MemKind::Host, 1024).unwrap(),
    ));
}

fn pooled_buffer_cycle(pool: &Arc<dyn MemoryResource>) {
    drop(black_box(
        Buffer::alloc_from(pool, MemKind::Host, 1024, DEFAULT_ALIGNMENT).unwrap(),
    ));
}

/// One 1 KiB allocate+deallocate straight through a resource.
fn pool_cycle(pool: &Arc<dyn MemoryResource>, kind: MemKind) {
    let ptr = black_box(pool.allocate(kind, 1024, DEFAULT_ALIGNMENT).unwrap());
    // SAFETY: freed once, with the arguments it was allocated with; nothing used it.
    unsafe { pool.deallocate(ptr, kind, 1024, DEFAULT_ALIGNMENT, FreeAfter::Now) };
}

/// `--count CASE SIDE N`: N calls of one side of one case, nothing else timed or printed.
fn count(case: &str, side: &str, calls: usize) -> Result<(), String> {
    let queue = HostQueue::shared();
    let layout = Layout::from_size_align(1024, DEFAULT_ALIGNMENT).unwrap();
    let pool: Arc<dyn MemoryResource> =
        PoolResource::new(QueueResource::new(queue.clone()), PoolOptions::default());
    let mut op: Box<dyn FnMut()> = match (case, side) {
        (_, "std") => Box::new(|| std_cycle(layout)),
        ("alloc", "devbuf") => Box::new(|| buffer_cycle(&queue)),
        ("pool", "devbuf") => Box::new(|| pool_cycle(&pool, MemKind::Host)),
        ("pooled-buffer", "devbuf") => Box::new(|| pooled_buffer_cycle(&pool)),
        _ => return Err(format!("--count: unknown case {case:?} or side {side:?}")),
    };
    // The first call of each kind warms the caches and the pool, whatever N is.
    op();
    for _ in 0..calls {
        op();
    }
    Ok(())
}

fn main() -> Result<(), String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let [flag, case, side, calls] = args.as_slice()
        && flag == "--count"
    {
        let calls = calls
            .parse()
            .map_err(|_| format!("--count: N: {calls:?}"))?;
        return count(case, side, calls);
    }
    let queue = HostQueue::shared();
    let layout = Layout::from_size_align(1024, DEFAULT_ALIGNMENT).unwrap();
    let per_call = (ROUNDS, CALLS_PER_ROUND);
    let pool: Arc<dyn MemoryResource> =
        PoolResource::new(QueueResource::new(queue.clone()), PoolOptions::default());
    let mut rows = Vec::from(Row::against_one_reference(
        "`std::alloc`",
        per_call,
        || std_cycle(layout),
        [
            (
                "alloc+free 1 KiB, 256-byte aligned: `Buffer::alloc` (default resource)",
                Some(1.0),
                &mut || buffer_cycle(&queue),
            ),
            (
                "pool `allocate`+`deallocate` 1 KiB (the resource itself)",
                Some(1.2),
                &mut || pool_cycle(&pool, MemKind::Host),
            ),
            (
                "pooled `Buffer::alloc_from`+drop 1 KiB",
                Some(1.0),
                &mut || pooled_buffer_cycle(&pool),
            ),
        ],
    ));

    const LEN: usize = 64 << 20;
    // The peer copies between blocks allocated as devbuf's host queue allocates them
    // (`std::alloc`, 256-byte aligned), so that both sides copy between the same offsets within
    // a page (a `Vec`'s 16-byte-aligned blocks are not): only the copy differs.
    let src_block = HostBlock::filled(LEN, 7);
    let mut dst_block = HostBlock::filled(LEN, 0);
    let src = Buffer::alloc(&queue, MemKind::Host, LEN).unwrap();
    let dst = Buffer::alloc(&queue, MemKind::Host, LEN).unwrap();
    src.fill(7).unwrap();
    dst.fill(0).unwrap();
    // Copies are memmove on both sides: a tie within the noise of whole-copy rounds meets.
    rows.push(Row::alternate(
        "copy 64 MiB host to host (`Buffer::copy_from`)",
        "`copy_from_slice`",
        Some(1.05),
        (31, 2),
        || dst.copy_from(black_box(&src)).unwrap(),
        || black_box(dst_block.bytes_mut()).copy_from_slice(black_box(src_block.bytes())),
    ));
    assert_eq!(dst.to_vec().unwrap(), src_block.bytes());
    assert_eq!(dst_block.bytes(), src_block.bytes());
    rows.extend(opencl());

    println!(
        "{ROUNDS} alternating rounds of {CALLS_PER_ROUND} calls (two copies for the copy row)\n"
    );
    write_rows(SECTION, &rows)?;
    Ok(())
}

/// Pooled 1 KiB shared alloc+free through the OpenCL backend against OpenCL's own allocation.
fn opencl() -> Option<Row> {
    let Ok(queue) = devbuf::open("opencl") else {
        println!("OpenCL: no usable device, skipped\n");
        return None;
    };
    let Some(kind) = [MemKind::Shared, MemKind::Device]
        .into_iter()
        .find(|&kind| queue.supports(kind))
    else {
        println!("OpenCL: the device allocates neither shared nor device memory\n");
        return None;
    };
    let pool: Arc<dyn MemoryResource> =
        PoolResource::new(QueueResource::new(queue.clone()), PoolOptions::default());
    let case = match kind {
        MemKind::Shared => "OpenCL: pooled `Buffer` alloc+free 1 KiB shared",
        _ => "OpenCL: pooled `Buffer` alloc+free 1 KiB device",
    };
    Some(Row::alternate(
        case,
        "the queue's own allocate+deallocate",
        None,
        (15, 2_000),
        || {
            drop(black_box(
                Buffer::alloc_from(&pool, kind, 1024, DEFAULT_ALIGNMENT).unwrap(),
            ));
        },
        || {
            let ptr = black_box(queue.allocate(kind, 1024, DEFAULT_ALIGNMENT).unwrap());
            // SAFETY: freed once, with the arguments it was allocated with; nothing used it.
            unsafe { queue.deallocate(ptr, kind, 1024, DEFAULT_ALIGNMENT) };
        },
    ))
}
