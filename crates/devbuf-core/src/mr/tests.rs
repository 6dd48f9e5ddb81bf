//! The adaptors on the host backend; the conformance kit checks pools on every backend.

use std::ptr::NonNull;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::*;
use crate::Event;
use crate::conformance::pattern;
use crate::{Buffer, DEFAULT_ALIGNMENT, Error, HostQueue};

fn host_pool() -> Arc<PoolResource> {
    let upstream = QueueResource::new(Arc::new(HostQueue::new()));
    PoolResource::new(upstream, PoolOptions::default())
}

/// A host pool that starts with 1 MiB and may hold at most `maximum` bytes.
fn bounded_host_pool(maximum: usize) -> Arc<PoolResource> {
    let upstream = QueueResource::new(Arc::new(HostQueue::new()));
    let options = PoolOptions {
        initial_size: 1 << 20,
        maximum_size: Some(maximum),
    };
    PoolResource::new(upstream, options)
}

fn alloc(resource: &Arc<dyn MemoryResource>, len: usize) -> Buffer {
    Buffer::alloc_from(resource, MemKind::Host, len, DEFAULT_ALIGNMENT).unwrap()
}

#[test]
fn a_pool_reuses_freed_blocks_and_releases_empty_ones() {
    let pool = host_pool();
    let resource: Arc<dyn MemoryResource> = pool.clone();
    let first = alloc(&resource, 1000);
    let addr = first.ptr();
    drop(first);
    assert_eq!(alloc(&resource, 1000).ptr(), addr);
    assert!(pool.pool_size() >= 1 << 20);
    pool.release();
    assert_eq!(pool.pool_size(), 0);
}

#[test]
fn small_blocks_kept_for_reuse_give_way_before_the_pool_grows() {
    let pool = bounded_host_pool(1 << 20);
    let resource: Arc<dyn MemoryResource> = pool.clone();
    let small: Vec<Buffer> = (0..8).map(|_| alloc(&resource, 60 << 10)).collect();
    let addrs: Vec<_> = small.iter().map(Buffer::ptr).collect();
    drop(small);
    // Kept for the same request...
    let again = alloc(&resource, 60 << 10);
    assert!(addrs.contains(&again.ptr()));
    drop(again);
    // ...and merged back when a larger one needs their room (the pool may not grow).
    let large = alloc(&resource, 900 << 10);
    assert_eq!(pool.pool_size(), 1 << 20);
    drop(large);
    pool.release();
    assert_eq!(pool.pool_size(), 0);
}

#[test]
fn a_pool_stops_at_its_maximum_size() {
    let resource: Arc<dyn MemoryResource> = bounded_host_pool(2 << 20);
    let _held = alloc(&resource, 1 << 20);
    // Up to the maximum, exactly...
    let _rest = alloc(&resource, 1 << 20);
    // ...and no further.
    let err = Buffer::alloc_from(&resource, MemKind::Host, 256, 256).unwrap_err();
    assert!(matches!(err, Error::OutOfMemory { .. }), "{err}");
    assert!(err.to_string().contains("at most 2097152"), "{err}");
}

#[test]
fn the_limit_names_itself_the_request_and_the_use() {
    let upstream = QueueResource::new(Arc::new(HostQueue::new()));
    let limited: Arc<dyn MemoryResource> = LimitingResource::new(upstream, 1000);
    let held = alloc(&limited, 600);
    let err = Buffer::alloc_from(&limited, MemKind::Host, 500, 256).unwrap_err();
    let message = err.to_string();
    for part in ["500 bytes", "limit of 1000 bytes", "600 bytes in use"] {
        assert!(message.contains(part), "{message}");
    }
    drop(held);
    alloc(&limited, 1000);
}

#[test]
fn statistics_count_overall_and_per_region() {
    let upstream = QueueResource::new(Arc::new(HostQueue::new()));
    let stats = StatisticsResource::new(upstream);
    let resource: Arc<dyn MemoryResource> = stats.clone();
    let a = alloc(&resource, 100);
    stats.push_region();
    let b = alloc(&resource, 50);
    drop(a);
    let region = stats.pop_region().unwrap();
    assert_eq!((region.total_count, region.peak_bytes), (1, 50));
    drop(b);
    let all = stats.statistics();
    assert_eq!(
        (all.current_bytes, all.peak_bytes, all.total_bytes),
        (0, 150, 150)
    );
    assert_eq!(
        (all.current_count, all.peak_count, all.total_count),
        (0, 2, 2)
    );
}

/// A region that frees memory allocated before it began counts below zero, as RMM's signed
/// counters do, and the whole run stays exact.
#[test]
fn a_region_that_frees_older_memory_counts_below_zero() {
    let upstream = QueueResource::new(Arc::new(HostQueue::new()));
    let stats = StatisticsResource::new(upstream);
    let resource: Arc<dyn MemoryResource> = stats.clone();
    let older = alloc(&resource, 10);
    stats.push_region();
    drop(older);
    let region = stats.pop_region().unwrap();
    assert_eq!((region.current_bytes, region.current_count), (-10, -1));
    assert_eq!((region.peak_bytes, region.total_bytes), (0, 0));
    let all = stats.statistics();
    assert_eq!(
        (all.current_bytes, all.peak_bytes, all.total_count),
        (0, 10, 1)
    );
}

#[test]
fn tracking_reports_what_is_outstanding() {
    let upstream = QueueResource::new(Arc::new(HostQueue::new()));
    let tracking = TrackingResource::new(upstream, true);
    let resource: Arc<dyn MemoryResource> = tracking.clone();
    let kept = alloc(&resource, 123);
    drop(alloc(&resource, 7));
    let outstanding = tracking.outstanding();
    assert_eq!(outstanding.len(), 1);
    assert_eq!(outstanding[0].ptr, kept.ptr() as usize);
    let report = tracking.outstanding_report();
    assert!(
        report.starts_with("1 outstanding allocations on host:\n"),
        "{report}"
    );
    assert!(report.contains("123 bytes of host memory"), "{report}");
    assert!(
        report.contains("tracking_reports_what_is_outstanding"),
        "{report}"
    );
    drop(kept);
    assert_eq!(
        tracking.outstanding_report(),
        "",
        "nothing outstanding: nothing to report"
    );
}

#[test]
fn the_current_resource_serves_its_own_queue_only() {
    let queue: Arc<dyn Queue> = Arc::new(HostQueue::new());
    let stats = StatisticsResource::new(QueueResource::new(Arc::clone(&queue)));
    // A queue of a device no other test uses, so that the current resource is ours alone.
    let selector = queue.device().selector.clone();
    set_current(MemKind::Device, stats.clone()).unwrap();
    drop(Buffer::alloc(&queue, MemKind::Device, 10).unwrap());
    let other: Arc<dyn Queue> = Arc::new(HostQueue::new());
    drop(Buffer::alloc(&other, MemKind::Device, 10).unwrap());
    reset_current(&selector, MemKind::Device);
    drop(Buffer::alloc(&queue, MemKind::Device, 10).unwrap());
    assert_eq!(stats.statistics().total_count, 1);
}

/// Mixed sizes allocated and freed at random: what the pool takes from upstream stays within
/// 1.5 times the most bytes live at once.
#[test]
fn fragmentation_keeps_the_pool_within_one_and_a_half_times_the_live_peak() {
    let pool = host_pool();
    let resource: Arc<dyn MemoryResource> = pool.clone();
    let mut state = 0x2545_F491_4F6C_DD1Du64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let (mut live, mut live_bytes, mut live_peak) = (Vec::new(), 0usize, 0usize);
    for _ in 0..20_000 {
        if live.len() < 400 && next() % 3 != 0 || live.is_empty() {
            // Sizes from 1 KiB to 1 MiB, log-uniform.
            let len = 1024 << (next() % 11) as usize;
            let len = len + (next() as usize % len);
            live_bytes += len;
            live_peak = live_peak.max(live_bytes);
            live.push(alloc(&resource, len));
        } else {
            let victim = live.swap_remove(next() as usize % live.len());
            live_bytes -= victim.len();
        }
    }
    let ratio = pool.peak_pool_size() as f64 / live_peak as f64;
    assert!(
        ratio <= 1.5,
        "upstream peak {} for a live peak of {live_peak}: {ratio:.2}x",
        pool.peak_pool_size()
    );
}

/// 8 threads allocating, filling, checking and freeing through one pool. `DEVBUF_LONG_MR=1`
/// runs 10 s instead of 2.
#[test]
fn eight_threads_through_one_pool_corrupt_nothing() {
    let seconds = if std::env::var_os("DEVBUF_LONG_MR").is_some() {
        10
    } else {
        2
    };
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let resource: Arc<dyn MemoryResource> = host_pool();
    std::thread::scope(|scope| {
        for thread in 0..8u8 {
            let resource = &resource;
            scope.spawn(move || {
                let mut round = 0usize;
                let mut held: Vec<(Buffer, Vec<u8>)> = Vec::new();
                while Instant::now() < deadline {
                    let len = 1 + (thread as usize * 977 + round * 131) % 70_000;
                    let bytes = pattern(len, thread.wrapping_add(round as u8));
                    let buffer = alloc(resource, len);
                    buffer.copy_from_host(&bytes).unwrap();
                    held.push((buffer, bytes));
                    if held.len() > 16 {
                        let (buffer, bytes) = held.swap_remove(round % held.len());
                        assert_eq!(buffer.to_vec().unwrap(), bytes, "thread {thread}");
                    }
                    round += 1;
                }
                for (buffer, bytes) in held {
                    assert_eq!(buffer.to_vec().unwrap(), bytes, "thread {thread}");
                }
            });
        }
    });
}

#[test]
fn handouts_free_only_what_they_handed_out_once_and_the_rest_when_dropped() {
    let stats = StatisticsResource::new(QueueResource::new(Arc::new(HostQueue::new())));
    let handouts = Handouts::new(stats.clone());
    let address = handouts.allocate(MemKind::Host, 100).unwrap();
    assert_eq!(address % DEFAULT_ALIGNMENT, 0);
    let refused = |address, kind, size| {
        let err = handouts.deallocate(address, kind, size).unwrap_err();
        assert!(err.to_string().ends_with("nothing was freed"), "{err}");
        err.to_string()
    };
    assert!(refused(address + 1, MemKind::Host, 100).starts_with("ptr: "));
    assert!(refused(address, MemKind::Host, 99).starts_with("nbytes: "));
    assert!(refused(address, MemKind::Device, 100).starts_with("kind: "));
    assert_eq!(stats.statistics().current_bytes, 100, "nothing was freed");
    handouts.deallocate(address, MemKind::Host, 100).unwrap();
    assert_eq!(stats.statistics().current_bytes, 0);
    assert!(refused(address, MemKind::Host, 100).starts_with("ptr: "));
    assert_eq!(handouts.allocate(MemKind::Host, 0).unwrap(), 0);
    handouts.deallocate(0, MemKind::Host, 0).unwrap();
    handouts.allocate(MemKind::Shared, 10).unwrap();
    assert_eq!(handouts.outstanding(), 1);
    drop(handouts);
    assert_eq!(stats.statistics().current_bytes, 0);
}

/// An upstream that, while it allocates, has another thread use the pool above it (as a thread
/// holding Python's GIL would, while a resource written in Python waits for that GIL).
#[derive(Debug)]
struct UsesThePoolWhileAllocating {
    inner: Arc<dyn MemoryResource>,
    pool: std::sync::OnceLock<std::sync::Weak<PoolResource>>,
    other_thread_got_through: std::sync::atomic::AtomicBool,
}

impl MemoryResource for UsesThePoolWhileAllocating {
    fn queue(&self) -> &Arc<dyn crate::Queue> {
        self.inner.queue()
    }

    fn allocate(&self, kind: MemKind, size: usize, align: usize) -> crate::Result<NonNull<u8>> {
        if let Some(pool) = self.pool.get().and_then(std::sync::Weak::upgrade) {
            let (done, finished) = std::sync::mpsc::channel();
            std::thread::spawn(move || {
                pool.release();
                let _ = done.send(());
            });
            let through = finished.recv_timeout(Duration::from_secs(5)).is_ok();
            self.other_thread_got_through
                .store(through, std::sync::atomic::Ordering::Relaxed);
        }
        self.inner.allocate(kind, size, align)
    }

    unsafe fn deallocate(
        &self,
        ptr: NonNull<u8>,
        kind: MemKind,
        size: usize,
        align: usize,
        after: FreeAfter,
    ) {
        // SAFETY: forwarded from our caller.
        unsafe { self.inner.deallocate(ptr, kind, size, align, after) }
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

#[test]
fn a_pool_is_not_locked_while_its_upstream_allocates() {
    let upstream = Arc::new(UsesThePoolWhileAllocating {
        inner: QueueResource::new(Arc::new(HostQueue::new())),
        pool: Default::default(),
        other_thread_got_through: Default::default(),
    });
    let pool = PoolResource::new(upstream.clone(), PoolOptions::default());
    upstream.pool.set(Arc::downgrade(&pool)).unwrap();
    let resource: Arc<dyn MemoryResource> = pool.clone();
    drop(alloc(&resource, 100));
    assert!(
        upstream
            .other_thread_got_through
            .load(std::sync::atomic::Ordering::Relaxed)
    );
}

/// Work on a freed block that the test completes when it says: an event of another queue's
/// stream, as far as the pool can tell.
#[derive(Debug)]
struct WorkDoneWhenSet(Arc<std::sync::atomic::AtomicBool>);

impl crate::QueueEvent for WorkDoneWhenSet {
    fn wait(&self) -> crate::Result<()> {
        while !self.0.load(std::sync::atomic::Ordering::Acquire) {
            std::thread::yield_now();
        }
        Ok(())
    }

    fn is_complete(&self) -> crate::Result<bool> {
        Ok(self.0.load(std::sync::atomic::Ordering::Acquire))
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

/// The ordering invariant on the pool's side: a block freed while work on it may still run is
/// not handed out again before that work completes, even to the next request of its size (whose
/// kept blocks skip the arena's lock); one freed after its work completed is.
#[test]
fn a_block_freed_with_pending_work_is_reused_only_after_it() {
    let resource: Arc<dyn MemoryResource> = host_pool();
    let (kind, size) = (MemKind::Host, 1024);
    let allocate = || resource.allocate(kind, size, DEFAULT_ALIGNMENT).unwrap();
    // SAFETY: each block is freed once, as allocated, and nothing uses it.
    let free =
        |ptr, after| unsafe { resource.deallocate(ptr, kind, size, DEFAULT_ALIGNMENT, after) };
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let work = Event::new(WorkDoneWhenSet(done.clone()));

    let busy = allocate();
    free(busy, FreeAfter::Event(work.clone()));
    let next = allocate();
    assert_ne!(next, busy, "handed out under running work");

    done.store(true, std::sync::atomic::Ordering::Release);
    free(next, FreeAfter::Event(work));
    assert_eq!(
        allocate(),
        next,
        "a block whose work completed is reused at once"
    );
}

/// 8 threads allocating, filling, checking and freeing blocks of three small sizes through one
/// pool, so that most requests take a kept block another thread has just freed (the kept blocks'
/// atomic slots, without the arena's lock): no block is handed to two holders at once.
#[test]
fn eight_threads_sharing_kept_blocks_corrupt_nothing() {
    let deadline = Instant::now() + Duration::from_secs(1);
    let resource: Arc<dyn MemoryResource> = host_pool();
    std::thread::scope(|scope| {
        for thread in 0..8u8 {
            let resource = &resource;
            scope.spawn(move || {
                let mut held: Vec<(Buffer, Vec<u8>)> = Vec::new();
                for round in 0usize.. {
                    if Instant::now() >= deadline {
                        break;
                    }
                    let len = [256, 1024, 4096][(thread as usize + round) % 3];
                    let bytes = pattern(len, thread.wrapping_add(round as u8));
                    let buffer = alloc(resource, len);
                    buffer.copy_from_host(&bytes).unwrap();
                    held.push((buffer, bytes));
                    if held.len() > 3 {
                        let (buffer, bytes) = held.swap_remove(round % held.len());
                        assert_eq!(buffer.to_vec().unwrap(), bytes, "thread {thread}");
                    }
                }
            });
        }
    });
}
