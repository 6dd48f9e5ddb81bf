//! RMM's resources in devbuf against devbuf's own pool, on the host backend, in alternating rounds
//! of one run (resource, pool, resource, pool, ...): the binning and fixed-size resources on one
//! small size and on a churn of many live blocks of mixed small sizes (what they are for), the
//! logging, failure-callback and prefetch adaptors' cost over the pool, and a log replayed
//! against a binning resource and against the pool. Each row's ratio is the median of the
//! per-round ratios. Run with `ci/bench` (release build); figures go to BENCHMARKS.md, and to the
//! JSON-lines file `DEVBUF_BENCH_JSON` names, when set.

mod bench_rows;

use std::hint::black_box;
use std::io::Cursor;
use std::sync::Arc;

use bench_rows::{Row, write_rows};
use devbuf::mr::{
    BinningResource, FailureCallbackResource, FileSink, FixedSizeResource, FreeAfter,
    LoggingResource, MemoryResource, PoolOptions, PoolResource, PrefetchResource, QueueResource,
    replay,
};
use devbuf::{DEFAULT_ALIGNMENT, HostQueue, MemKind};

const SECTION: &str = "memory resources (Rust, host backend)";
const ROUNDS: usize = 31;
const CALLS_PER_ROUND: usize = 20_000;
/// Live blocks in the churn rows.
const LIVE: usize = 512;

/// One allocate+deallocate of `size` bytes straight through a resource.
fn cycle(resource: &Arc<dyn MemoryResource>, size: usize) {
    let ptr = black_box(
        resource
            .allocate(MemKind::Host, size, DEFAULT_ALIGNMENT)
            .unwrap(),
    );
    // SAFETY: freed once, with the arguments it was allocated with; nothing used it.
    unsafe { resource.deallocate(ptr, MemKind::Host, size, DEFAULT_ALIGNMENT, FreeAfter::Now) };
}

/// Many live blocks of mixed small sizes: each call frees the oldest and allocates the next size
/// of a fixed sequence (16 B to 4 KiB), the same sequence on both sides.
struct Churn {
    resource: Arc<dyn MemoryResource>,
    live: Vec<(std::ptr::NonNull<u8>, usize)>,
    next: usize,
}

impl Churn {
    fn new(resource: Arc<dyn MemoryResource>) -> Churn {
        let mut churn = Churn {
            resource,
            live: Vec::with_capacity(LIVE),
            next: 0,
        };
        while churn.live.len() < LIVE {
            let block = churn.allocate();
            churn.live.push(block);
        }
        churn
    }

    fn size(&mut self) -> usize {
        // A multiplicative hash of a counter: sizes spread over 16 B to 4 KiB.
        self.next += 1;
        16 << ((self.next.wrapping_mul(0x9E37_79B9) >> 7) % 9)
    }

    fn allocate(&mut self) -> (std::ptr::NonNull<u8>, usize) {
        let size = self.size();
        let ptr = self
            .resource
            .allocate(MemKind::Host, size, DEFAULT_ALIGNMENT)
            .unwrap();
        (ptr, size)
    }

    fn step(&mut self) {
        let slot = self.next % LIVE;
        let (ptr, size) = self.live[slot];
        // SAFETY: one of this churn's live allocations, freed once with its own arguments.
        unsafe {
            self.resource
                .deallocate(ptr, MemKind::Host, size, DEFAULT_ALIGNMENT, FreeAfter::Now)
        };
        self.live[slot] = self.allocate();
    }
}

impl Drop for Churn {
    fn drop(&mut self) {
        for (ptr, size) in self.live.drain(..) {
            // SAFETY: as in `step`.
            unsafe {
                self.resource.deallocate(
                    ptr,
                    MemKind::Host,
                    size,
                    DEFAULT_ALIGNMENT,
                    FreeAfter::Now,
                )
            };
        }
    }
}

fn main() -> Result<(), String> {
    let queue = HostQueue::shared();
    let upstream = || QueueResource::new(queue.clone());
    let pool =
        || -> Arc<dyn MemoryResource> { PoolResource::new(upstream(), PoolOptions::default()) };
    let per_call = (ROUNDS, CALLS_PER_ROUND);
    let reference_pool = pool();
    let binning: Arc<dyn MemoryResource> =
        BinningResource::with_exponents(upstream(), 4, 12).map_err(|e| e.to_string())?;
    let fixed: Arc<dyn MemoryResource> =
        FixedSizeResource::new(upstream(), 1024, 128).expect("128 blocks of 1 KiB fit");
    let log_path = std::env::temp_dir().join(format!("devbuf-bench-{}.csv", std::process::id()));
    let logging: Arc<dyn MemoryResource> =
        LoggingResource::to_file(pool(), &log_path, false).map_err(|e| e.to_string())?;
    let failure_callback: Arc<dyn MemoryResource> =
        FailureCallbackResource::new(pool(), |_, _, _| Ok(false));
    let prefetch: Arc<dyn MemoryResource> = PrefetchResource::new(pool());
    let mut rows = Vec::from(Row::against_one_reference(
        "devbuf's pool `allocate`+`deallocate` 1 KiB",
        per_call,
        || cycle(&reference_pool, 1024),
        [
            (
                "binning (fixed-size bins 16 B–4 KiB) `allocate`+`deallocate` 1 KiB",
                None,
                &mut || cycle(&binning, 1024),
            ),
            (
                "fixed-size (1 KiB blocks) `allocate`+`deallocate` 1 KiB",
                None,
                &mut || cycle(&fixed, 1024),
            ),
            (
                "logging adaptor over a pool (a buffered file), 1 KiB",
                None,
                &mut || cycle(&logging, 1024),
            ),
            (
                "failure-callback adaptor over a pool, 1 KiB",
                Some(1.2),
                &mut || cycle(&failure_callback, 1024),
            ),
            (
                "prefetch adaptor over a pool, 1 KiB host (nothing to prefetch)",
                Some(1.2),
                &mut || cycle(&prefetch, 1024),
            ),
        ],
    ));
    drop(logging);
    let _ = std::fs::remove_file(&log_path);

    let mut binning_churn =
        Churn::new(BinningResource::with_exponents(upstream(), 4, 12).map_err(|e| e.to_string())?);
    let mut pool_churn = Churn::new(pool());
    rows.push(Row::alternate(
        "binning: 512 live blocks of 16 B–4 KiB, free the oldest + allocate",
        "the same through devbuf's pool",
        None,
        per_call,
        || binning_churn.step(),
        || pool_churn.step(),
    ));
    drop((binning_churn, pool_churn));

    // A log of 20,000 allocations and frees (the churn's), replayed whole against each side.
    let lines = Arc::new(bench_log(20_000)?);
    let replay_against = |resource: Arc<dyn MemoryResource>| {
        let report = replay(Cursor::new(lines.as_bytes()), &resource, MemKind::Host).unwrap();
        black_box(report);
    };
    rows.push(Row::alternate(
        "`replay` of a 20,000-step log against a binning resource",
        "against devbuf's pool",
        None,
        (ROUNDS, 1),
        || {
            replay_against(
                BinningResource::with_exponents(upstream(), 4, 12).expect("ordered exponents"),
            )
        },
        || replay_against(pool()),
    ));

    println!("{ROUNDS} alternating rounds of {CALLS_PER_ROUND} calls (one replay of the log)\n");
    write_rows(SECTION, &rows)
}

/// The log of `steps` churn steps through a logging adaptor, as text.
fn bench_log(steps: usize) -> Result<String, String> {
    let path = std::env::temp_dir().join(format!("devbuf-bench-log-{}.csv", std::process::id()));
    {
        let sink = Arc::new(FileSink::create(&path, false).map_err(|e| e.to_string())?);
        let logging = LoggingResource::new(QueueResource::new(HostQueue::shared()), sink)
            .map_err(|e| e.to_string())?;
        let mut churn = Churn::new(logging);
        for _ in 0..steps {
            churn.step();
        }
    }
    let text = std::fs::read_to_string(&path).map_err(|e| e.to_string())?;
    let _ = std::fs::remove_file(&path);
    Ok(text)
}
