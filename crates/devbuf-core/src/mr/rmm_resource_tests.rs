//! The binning, fixed-size, logging and failure-callback resources and the log replay on the
//! host backend; the conformance kit reruns every check through them on every backend.

#![allow(
    clippy::arithmetic_side_effects,
    reason = "tests: expected addresses and sizes from small constants"
)]

use std::io::Cursor;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use parking_lot::Mutex;

use super::*;
use crate::{Buffer, DEFAULT_ALIGNMENT, Error, HostQueue};

fn host() -> Arc<dyn MemoryResource> {
    QueueResource::new(Arc::new(HostQueue::new()))
}

fn alloc(resource: &Arc<dyn MemoryResource>, len: usize) -> crate::Result<Buffer> {
    Buffer::alloc_from(resource, MemKind::Host, len, DEFAULT_ALIGNMENT)
}

#[test]
fn a_fixed_size_resource_cuts_chunks_into_blocks_and_refuses_larger_requests() {
    let fixed = FixedSizeResource::new(host(), 1000, 4).unwrap();
    assert_eq!(fixed.block_size(), 1024);
    let resource: Arc<dyn MemoryResource> = fixed.clone();
    let blocks: Vec<Buffer> = (0..4).map(|_| alloc(&resource, 1000).unwrap()).collect();
    let addresses: Vec<usize> = blocks.iter().map(|b| b.ptr() as usize).collect();
    assert!(
        addresses.windows(2).all(|w| w[1] - w[0] == 1024),
        "{addresses:x?}"
    );
    assert_eq!(fixed.upstream_bytes(), 4096);
    let fifth = alloc(&resource, 1).unwrap();
    assert_eq!(fixed.upstream_bytes(), 8192);
    let last_freed = blocks[3].ptr() as usize;
    drop(blocks);
    let again = alloc(&resource, 1024).unwrap();
    assert_eq!(
        again.ptr() as usize,
        last_freed,
        "the last block freed is handed out first"
    );
    assert_eq!(fixed.upstream_bytes(), 8192);
    drop(again);
    drop(fifth);
    match alloc(&resource, 1025) {
        Err(Error::OutOfMemory { reason, .. }) => {
            assert!(reason.contains("up to 1024 bytes"), "{reason}")
        }
        other => panic!("a 1025-byte block from 1024-byte blocks: {other:?}"),
    }
}

#[test]
fn a_binning_resource_sends_each_size_to_its_bin_and_larger_ones_upstream() {
    let upstream = StatisticsResource::new(host());
    let binning = BinningResource::with_exponents(upstream.clone(), 8, 12).unwrap();
    let bins = binning.bins();
    assert_eq!(
        bins.iter().map(|(size, _)| *size).collect::<Vec<_>>(),
        [256, 512, 1024, 2048, 4096]
    );
    let resource: Arc<dyn MemoryResource> = binning.clone();
    let small = alloc(&resource, 300).unwrap();
    let bin_512 = bins[1]
        .1
        .as_any()
        .downcast_ref::<FixedSizeResource>()
        .unwrap();
    assert_eq!(bin_512.upstream_bytes(), 512 * 128, "chunks of 128 blocks");
    let chunks = upstream.statistics().current_count;
    let large = alloc(&resource, 5000).unwrap();
    assert_eq!(
        upstream.statistics().current_count,
        chunks + 1,
        "5000 bytes go upstream"
    );
    drop(large);
    assert_eq!(upstream.statistics().current_count, chunks);
    // An alignment a bin's blocks do not promise goes upstream too.
    let aligned = Buffer::alloc_from(&resource, MemKind::Host, 300, 8192).unwrap();
    assert!((aligned.ptr() as usize).is_multiple_of(8192));
    drop((small, aligned));
}

#[test]
fn bins_are_added_before_the_first_allocation_on_the_same_device() {
    let binning = BinningResource::new(host());
    let other_device: Arc<dyn MemoryResource> = QueueResource::new(HostQueue::shared());
    assert!(binning.add_bin(64, None).is_ok());
    let small = FixedSizeResource::new(host(), 256, 4).unwrap();
    assert!(binning.add_bin(128, Some(small.clone())).is_ok());
    let too_small = FixedSizeResource::new(host(), 256, 4).unwrap();
    let refused = binning.add_bin(1024, Some(too_small)).unwrap_err();
    assert!(
        refused.to_string().contains("blocks of 256 bytes"),
        "{refused}"
    );
    drop(other_device);
    let resource: Arc<dyn MemoryResource> = binning.clone();
    drop(alloc(&resource, 100).unwrap());
    assert_eq!(
        small.upstream_bytes(),
        1024,
        "100 bytes went to the 128-byte bin"
    );
    let late = binning.add_bin(4096, None).unwrap_err();
    assert!(
        late.to_string()
            .contains("before the binning resource's first allocation"),
        "{late}"
    );
}

#[test]
fn a_failure_callback_decides_whether_to_retry() {
    let limited = LimitingResource::new(host(), 1000);
    let upstream: Arc<dyn MemoryResource> = limited.clone();
    // What the callback may spill, freed one at a time.
    let cache: Arc<Mutex<Vec<Buffer>>> = Arc::default();
    let calls = Arc::new(AtomicUsize::new(0));
    let spill = {
        let (cache, calls) = (cache.clone(), calls.clone());
        move |kind: MemKind, size: usize, error: &Error| {
            assert_eq!((kind, size), (MemKind::Host, 600));
            assert!(matches!(error, Error::OutOfMemory { .. }));
            calls.fetch_add(1, Ordering::Relaxed);
            Ok(cache.lock().pop().is_some())
        }
    };
    let resource: Arc<dyn MemoryResource> = FailureCallbackResource::new(upstream.clone(), spill);
    cache
        .lock()
        .extend((0..3).map(|_| alloc(&upstream, 300).unwrap()));
    let served = alloc(&resource, 600).unwrap();
    assert_eq!(
        calls.load(Ordering::Relaxed),
        2,
        "two blocks spilled, then it fit"
    );
    assert_eq!((cache.lock().len(), limited.in_use()), (1, 900));
    // Nothing left to spill: the callback declines and the error reaches the caller.
    drop(served);
    let _kept = alloc(&upstream, 700).unwrap();
    let refused = alloc(&resource, 600).unwrap_err();
    assert!(matches!(refused, Error::OutOfMemory { .. }), "{refused}");
    assert_eq!(calls.load(Ordering::Relaxed), 4);
    let raising: Arc<dyn MemoryResource> = FailureCallbackResource::new(upstream, |_, _, _| {
        Err(Error::invalid("callback", "raised"))
    });
    let raised = alloc(&raising, 600).unwrap_err();
    assert!(
        matches!(
            raised,
            Error::InvalidDescriptor {
                key: "callback",
                ..
            }
        ),
        "{raised}"
    );
}

/// A log kept in memory.
#[derive(Debug, Default)]
struct Lines(Mutex<Vec<String>>);

impl LogSink for Lines {
    fn write_line(&self, line: &str) -> std::io::Result<()> {
        self.0.lock().push(line.to_owned());
        Ok(())
    }

    fn flush(&self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn a_logging_adaptor_writes_rmms_columns_and_its_log_replays() {
    let lines = Arc::new(Lines::default());
    let limited = LimitingResource::new(host(), 10_000);
    let logging = LoggingResource::new(limited, lines.clone()).unwrap();
    let resource: Arc<dyn MemoryResource> = logging.clone();
    let kept = alloc(&resource, 4000).unwrap();
    drop(alloc(&resource, 100).unwrap());
    assert!(alloc(&resource, 8000).is_err());
    let log = lines.0.lock().clone();
    assert_eq!(log[0], LOG_HEADER);
    let rows: Vec<Vec<&str>> = log[1..].iter().map(|l| l.split(',').collect()).collect();
    let actions: Vec<&str> = rows.iter().map(|row| row[2]).collect();
    assert_eq!(
        actions,
        ["allocate", "allocate", "free", "allocate failure"]
    );
    assert_eq!(rows[0][3], format!("{:#x}", kept.ptr() as usize));
    assert_eq!(
        (rows[0][4], rows[0][6], rows[0][7]),
        ("4000", "host", "host")
    );
    assert_eq!(
        rows[1][3], rows[2][3],
        "the free names the allocation's address"
    );
    // SAFETY: gettid takes no arguments and cannot fail.
    let thread = i64::from(unsafe { libc::gettid() });
    assert_eq!(rows[0][0], thread.to_string());
    assert_eq!(rows[0][1].len(), "HH:MM:SS.ffffff".len());

    let replayed = StatisticsResource::new(host());
    let target: Arc<dyn MemoryResource> = replayed.clone();
    let report = replay(Cursor::new(log.join("\n")), &target, MemKind::Device).unwrap();
    assert_eq!(
        (report.allocations, report.frees, report.left_live),
        (2, 1, 1)
    );
    assert_eq!((report.failures, report.unmatched_frees), (0, 0));
    assert_eq!(report.peak_bytes, 4100);
    let counts = replayed.statistics();
    assert_eq!(
        (counts.total_count, counts.peak_bytes, counts.current_bytes),
        (2, 4100, 0)
    );
    drop(kept);
}

#[test]
fn a_replay_reads_rmms_own_log_and_names_the_line_it_cannot_read() {
    let rmm_log = "Thread,Time,Action,Pointer,Size,Stream\n\
                   1,08:00:00.000001,allocate,0x7f0000000000,256,0x0\n\
                   1,08:00:00.000002,free,0x7f0000000100,64,0x0\n\
                   1,08:00:00.000003,free,0x7f0000000000,256,0x0\n";
    let target = StatisticsResource::new(host());
    let resource: Arc<dyn MemoryResource> = target.clone();
    let report = replay(Cursor::new(rmm_log), &resource, MemKind::Host).unwrap();
    assert_eq!(
        (report.allocations, report.frees, report.unmatched_frees),
        (1, 1, 1)
    );
    let broken = "Thread,Time,Action,Pointer,Size,Stream\n1,0,allocate,0x10,many,0x0\n";
    let error = replay(Cursor::new(broken), &resource, MemKind::Host).unwrap_err();
    assert!(
        error.to_string().contains("line 2: Size \"many\""),
        "{error}"
    );
    let no_columns = replay(Cursor::new("a,b\n"), &resource, MemKind::Host).unwrap_err();
    assert!(
        no_columns.to_string().contains("no Action column"),
        "{no_columns}"
    );
    assert_eq!(target.statistics().current_bytes, 0);
}

#[test]
fn a_fixed_size_resource_that_cannot_lay_out_its_chunks_names_the_argument() {
    // Issue 45: 4 blocks of 2^62 + 256 bytes wrapped to a 1024-byte chunk, and blocks were
    // handed out ~4 EiB past it; a block size of 2^64 - 1 rounded to 0.
    let key = |result: crate::Result<Arc<FixedSizeResource>>| match result.unwrap_err() {
        Error::InvalidDescriptor { key, .. } => key,
        other => panic!("{other}"),
    };
    assert_eq!(
        key(FixedSizeResource::new(host(), (1 << 62) + 256, 4)),
        "blocks_to_preallocate"
    );
    assert_eq!(
        key(FixedSizeResource::new(host(), usize::MAX, 4)),
        "block_size"
    );
    assert_eq!(
        key(FixedSizeResource::new(host(), 1 << 63, 1)),
        "block_size"
    );
    // The largest chunk an allocation may span is still laid out (upstream then refuses it).
    let largest = FixedSizeResource::new(host(), 1 << 62, 1).unwrap();
    let resource: Arc<dyn MemoryResource> = largest;
    assert!(alloc(&resource, 100).unwrap_err().is_out_of_memory());
}

#[test]
fn a_bin_too_large_to_lay_out_names_its_size() {
    // Issue 45: a bin of 2^62 bytes made a 3000-byte request report "0 bytes".
    let binning = BinningResource::new(host());
    let err = binning.add_bin(1 << 62, None).unwrap_err();
    assert!(err.to_string().starts_with("allocation_size: "), "{err}");
    let err = BinningResource::with_exponents(host(), 8, 62).unwrap_err();
    assert!(err.to_string().starts_with("max_size_exponent: "), "{err}");
}

fn is_recursion(err: &Error, key: &str) -> bool {
    matches!(err, Error::Recursion { key: k, .. } if *k == key)
}

#[test]
fn a_bin_that_reaches_its_binning_resource_is_refused() {
    // Issue 45: each of these overflowed the stack at the next allocation.
    let binning = BinningResource::new(host());
    let itself: Arc<dyn MemoryResource> = binning.clone();
    let err = binning.add_bin(1024, Some(itself)).unwrap_err();
    assert!(is_recursion(&err, "bin_resource"), "{err}");
    let (a, b) = (BinningResource::new(host()), BinningResource::new(host()));
    a.add_bin(1024, Some(b.clone())).unwrap();
    let err = b.add_bin(1024, Some(a.clone())).unwrap_err();
    assert!(is_recursion(&err, "bin_resource"), "{err}");
    // Through an adaptor over it.
    let over = StatisticsResource::new(LimitingResource::new(binning.clone(), 1 << 20));
    let err = binning.add_bin(2048, Some(over)).unwrap_err();
    assert!(is_recursion(&err, "bin_resource"), "{err}");
    // Nothing was added: both still allocate.
    for resource in [binning as Arc<dyn MemoryResource>, a, b] {
        drop(alloc(&resource, 100).unwrap());
    }
}

#[test]
fn a_stack_deeper_than_devbuf_allows_is_refused_not_a_stack_overflow() {
    let mut stack: Arc<dyn MemoryResource> = host();
    for _ in 0..MAX_DEPTH + 44 {
        stack = StatisticsResource::new(stack);
    }
    // Built in Rust, unchecked: the allocation stops at the depth guard, on a small stack too.
    let deep = stack.clone();
    let err = std::thread::Builder::new()
        .stack_size(1 << 20)
        .spawn(move || alloc(&deep, 64).unwrap_err())
        .unwrap()
        .join()
        .unwrap();
    assert!(is_recursion(&err, "mr"), "{err}");
    let err = check_depth(&stack, "upstream_mr", 1).unwrap_err();
    assert!(is_recursion(&err, "upstream_mr"), "{err}");
    let err = set_current(MemKind::Host, stack.clone()).unwrap_err();
    assert!(is_recursion(&err, "mr"), "{err}");
    // Within the limit, it allocates.
    let mut shallow: Arc<dyn MemoryResource> = host();
    for _ in 0..MAX_DEPTH - 1 {
        shallow = StatisticsResource::new(shallow);
    }
    check_depth(&shallow, "upstream_mr", 0).unwrap();
    drop(alloc(&shallow, 64).unwrap());
    // Dropping the deep stack from a thread with a small stack does not overflow it either.
    std::thread::Builder::new()
        .stack_size(1 << 20)
        .spawn(move || drop(stack))
        .unwrap()
        .join()
        .unwrap();
}
