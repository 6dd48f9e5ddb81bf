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

use std::alloc::{Layout, alloc, dealloc};
use std::hint::black_box;
use std::io::Write;
use std::ptr::NonNull;
use std::sync::Arc;
use std::time::Instant;

use devbuf::mr::{FreeAfter, MemoryResource, PoolOptions, PoolResource, QueueResource};
use devbuf::{Buffer, DEFAULT_ALIGNMENT, HostQueue, MemKind, Queue};

const SECTION: &str = "host backend (Rust)";
const ROUNDS: usize = 31;
const CALLS_PER_ROUND: usize = 20_000;

/// Nanoseconds per call of `calls` calls of `op`.
fn time_ns(calls: usize, op: &mut impl FnMut()) -> f64 {
    let start = Instant::now();
    for _ in 0..calls {
        op();
    }
    start.elapsed().as_nanos() as f64 / calls as f64
}

fn median(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    sorted[sorted.len() / 2]
}

/// One devbuf side of a row: its case, its goal and one call.
type Side<'a> = (&'static str, Option<f64>, &'a mut dyn FnMut());

/// One case: devbuf's and the reference's ns per call in each round.
struct Row {
    case: &'static str,
    reference: &'static str,
    goal: Option<f64>,
    ours: Vec<f64>,
    theirs: Vec<f64>,
}

impl Row {
    /// Times `ours` and `theirs` in `rounds` alternating rounds of `calls` calls each.
    fn alternate(
        case: &'static str,
        reference: &'static str,
        goal: Option<f64>,
        (rounds, calls): (usize, usize),
        mut ours: impl FnMut(),
        theirs: impl FnMut(),
    ) -> Row {
        let side: [Side; 1] = [(case, goal, &mut ours)];
        let [row] = Row::against_one_reference(reference, (rounds, calls), theirs, side);
        row
    }

    /// Rows whose devbuf sides share one measurement of the reference: each round times the
    /// reference, then every side, `calls` calls each. glibc's `posix_memalign` takes 35–50 ns
    /// here depending on the heap's history (which chunks its split leaves where), so a
    /// reference timed separately for each row was not the same reference in every row.
    fn against_one_reference<const N: usize>(
        reference: &'static str,
        (rounds, calls): (usize, usize),
        mut theirs: impl FnMut(),
        mut sides: [Side<'_>; N],
    ) -> [Row; N] {
        // One whole round of warm-up: the first calls of each side (caches, pools, the heap's
        // first splits) are not its steady state.
        time_ns(calls, &mut theirs);
        for (_, _, ours) in &mut sides {
            time_ns(calls, ours);
        }
        let mut reference_ns = Vec::new();
        let mut ours_ns = [(); N].map(|()| Vec::new());
        for round in 0..rounds {
            // A row of its own times the reference last in every other round: whichever side a
            // round timed first read a few percent slower in the 64 MiB copies. Rows that share
            // the reference keep one order, so that each side always follows the same one, whose
            // state (caches, heap) it inherits: alternating it moved them by up to 5 ns.
            let reference_last = N == 1 && round % 2 == 1;
            if !reference_last {
                reference_ns.push(time_ns(calls, &mut theirs));
            }
            for ((_, _, ours), times) in sides.iter_mut().zip(&mut ours_ns) {
                times.push(time_ns(calls, ours));
            }
            if reference_last {
                reference_ns.push(time_ns(calls, &mut theirs));
            }
        }
        let mut times = ours_ns.into_iter();
        sides.map(|(case, goal, _)| Row {
            case,
            reference,
            goal,
            ours: times.next().unwrap_or_default(),
            theirs: reference_ns.clone(),
        })
    }

    fn ratios(&self) -> Vec<f64> {
        self.ours
            .iter()
            .zip(&self.theirs)
            .map(|(a, b)| a / b)
            .collect()
    }

    fn ratio(&self) -> f64 {
        median(&self.ratios())
    }

    /// The lowest and highest per-round ratio.
    fn spread(&self) -> (f64, f64) {
        let ratios = self.ratios();
        let low = ratios.iter().copied().fold(f64::INFINITY, f64::min);
        (low, ratios.iter().copied().fold(0.0, f64::max))
    }

    fn verdict(&self) -> String {
        match self.goal {
            None => "—".into(),
            Some(goal) if self.ratio() <= goal => format!("≤ {goal:?}×: meets"),
            Some(goal) => format!("≤ {goal:?}×: MISSES"),
        }
    }

    fn markdown(&self) -> String {
        let (low, high) = self.spread();
        format!(
            "| {} | {} | {} ({}) | {:.3}× ({low:.3}–{high:.3}) | {} |",
            self.case,
            show(median(&self.ours)),
            show(median(&self.theirs)),
            self.reference,
            self.ratio(),
            self.verdict()
        )
    }

    fn json(&self) -> String {
        let (low, high) = self.spread();
        let goal = self.goal.map_or("null".into(), |g| format!("{g:?}"));
        let meets = self
            .goal
            .map_or("null".into(), |g| (self.ratio() <= g).to_string());
        format!(
            "{{\"section\": {}, \"case\": {}, \"reference\": {}, \"unit\": \"ns\", \"devbuf\": {}, \
             \"peer\": {}, \"ratio\": {}, \"ratio_spread\": [{low}, {high}], \"goal\": {goal}, \
             \"meets\": {meets}, \"rounds\": {}}}",
            quoted(SECTION),
            quoted(self.case),
            quoted(self.reference),
            median(&self.ours),
            median(&self.theirs),
            self.ratio(),
            self.ours.len()
        )
    }
}

fn show(ns: f64) -> String {
    if ns >= 1e6 {
        format!("{:.2} ms", ns / 1e6)
    } else {
        format!("{ns:.1} ns")
    }
}

fn quoted(text: &str) -> String {
    format!("\"{}\"", text.replace('\\', "\\\\").replace('"', "\\\""))
}

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
    println!("| case | devbuf | reference | devbuf / reference (spread of rounds) | goal |");
    println!("|---|---:|---:|---:|---|");
    for row in &rows {
        println!("{}", row.markdown());
    }
    if let Ok(path) = std::env::var("DEVBUF_BENCH_JSON") {
        let mut out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(|err| format!("{path}: {err}"))?;
        for row in &rows {
            writeln!(out, "{}", row.json()).map_err(|err| format!("{path}: {err}"))?;
        }
    }
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
