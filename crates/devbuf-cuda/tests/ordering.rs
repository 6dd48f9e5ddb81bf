//! Ordering and lifetime rules of the CUDA backend, each shown on the CUDA test driver (with its
//! per-operation delay, so that a missing wait reads wrong bytes or touches unallocated memory,
//! which the driver reports as an illegal address). Each test runs in a child process with the
//! driver settings it needs.

mod common;

use devbuf_core::conformance::{assert_check, pattern};
use devbuf_core::{Buffer, MemKind};

use common::{fresh, shared};

const LEN: usize = 1 << 20;

child_test!(busy_frees_are_ordered_with_memory_pools ["DEVBUF_CUDA_TEST_DELAY_US" = "2000"] {
    assert_check("busy_free", "cuda", &Ok(shared(0)));
});

child_test!(busy_frees_are_ordered_without_memory_pools [
    "DEVBUF_CUDA_TEST_DELAY_US" = "2000",
    "DEVBUF_CUDA_TEST_MEMORY_POOLS" = "0",
] {
    assert_check("busy_free", "cuda", &Ok(shared(0)));
});

// Pinned memory that a copy on another device's stream still writes: the release waits for it.
child_test!(pinned_memory_outlives_a_copy_on_another_device ["DEVBUF_CUDA_TEST_DELAY_US" = "20000"] {
    let (home, other) = (shared(0), shared(1));
    let source = Buffer::alloc(&other, MemKind::Device, LEN).unwrap();
    source.copy_from_host(&pattern(LEN, 3)).unwrap();
    for kind in [MemKind::Host, MemKind::Shared] {
        let target = Buffer::alloc(&home, kind, LEN).unwrap();
        target.enqueue_copy_from(&source, &other).unwrap();
        drop(target);
    }
    assert_eq!(source.to_vec().unwrap(), pattern(LEN, 3));
});

// A block the pool hands back at once is usable only once the allocating stream reaches the
// allocation: a copy into it on another stream must wait for that.
child_test!(a_fresh_pool_allocation_is_pending_work [
    "DEVBUF_CUDA_TEST_DELAY_US" = "20000",
    "DEVBUF_CUDA_TEST_POOL_REUSE" = "immediate",
] {
    let (home, other) = (shared(0), fresh(0));
    let source = Buffer::alloc(&other, MemKind::Host, LEN).unwrap();
    source.copy_from_host(&pattern(LEN, 5)).unwrap();
    let first = Buffer::alloc(&home, MemKind::Device, LEN).unwrap();
    first.enqueue_fill(1).unwrap();
    drop(first);
    let fresh_block = Buffer::alloc(&home, MemKind::Device, LEN).unwrap();
    assert!(
        fresh_block.has_pending_work(),
        "a stream-ordered allocation is not recorded as pending work"
    );
    let sync = fresh_block.sync_queue(fresh_block.queue()).unwrap();
    assert!(
        sync.is_some_and(|queue| std::sync::Arc::ptr_eq(&queue, &home)),
        "a CAI export of a fresh allocation must name the allocating stream"
    );
    fresh_block.enqueue_copy_from(&source, &other).unwrap();
    assert_eq!(fresh_block.to_vec().unwrap(), pattern(LEN, 5));
});
