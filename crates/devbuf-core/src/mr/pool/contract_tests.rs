//! RMM's contract for a pool's sizes: the initial size reserved at construction, a maximum below
//! it refused, and the bytes in use and free readable.

use std::sync::Arc;

use super::*;
use crate::mr::QueueResource;
use crate::{Buffer, Error, HostQueue};

fn upstream() -> Arc<dyn MemoryResource> {
    QueueResource::new(Arc::new(HostQueue::new()))
}

fn options(initial_size: usize, maximum_size: Option<usize>) -> PoolOptions {
    PoolOptions {
        initial_size,
        maximum_size,
    }
}

#[test]
fn the_initial_size_is_taken_at_construction() {
    let pool = PoolResource::reserved(upstream(), options(4 << 20, None), MemKind::Device).unwrap();
    assert_eq!(pool.pool_size(), 4 << 20);
    assert_eq!(pool.initial_pool_size(), 4 << 20);
    // The first allocation of that kind comes from the reserved block: nothing more is taken.
    let resource: Arc<dyn MemoryResource> = pool.clone();
    let buffer = Buffer::alloc_from(&resource, MemKind::Device, 4096, 256).unwrap();
    assert_eq!(pool.pool_size(), 4 << 20);
    assert_eq!(pool.used_size(), 4096);
    drop(buffer);
    assert_eq!(pool.used_size(), 0);
}

#[test]
fn an_initial_size_upstream_cannot_give_fails_at_construction() {
    let err =
        PoolResource::reserved(upstream(), options(1 << 50, None), MemKind::Device).unwrap_err();
    assert!(matches!(err, Error::OutOfMemory { .. }), "{err}");
}

#[test]
fn an_initial_size_over_the_maximum_is_refused_naming_both() {
    let err = PoolResource::reserved(upstream(), options(2 << 20, Some(1 << 20)), MemKind::Device)
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "initial_pool_size: 2097152 bytes is more than maximum_pool_size, 1048576 bytes"
    );
}

#[test]
fn a_small_maximum_still_serves_small_requests() {
    let pool =
        PoolResource::reserved(upstream(), options(0, Some(64 << 10)), MemKind::Device).unwrap();
    let resource: Arc<dyn MemoryResource> = pool.clone();
    let kept: Vec<Buffer> = (0..4)
        .map(|_| Buffer::alloc_from(&resource, MemKind::Host, 8 << 10, 256).unwrap())
        .collect();
    assert!(pool.pool_size() <= 64 << 10);
    assert_eq!(pool.used_size(), 32 << 10);
    assert!(Buffer::alloc_from(&resource, MemKind::Host, 64 << 10, 256).is_err());
    drop(kept);
}

/// A maximum that is no size class of the pool's allocator (classes step by an eighth), so that
/// a request of all of it would not fit a block rounded up to its class.
const MAXIMUM: usize = (8 << 20) + 100 * UNIT;

#[test]
fn one_request_of_the_whole_maximum_is_served_in_every_kind() {
    for kind in MemKind::ALLOCATABLE {
        let pool = PoolResource::reserved(upstream(), options(0, Some(MAXIMUM)), kind).unwrap();
        let resource: Arc<dyn MemoryResource> = pool.clone();
        for round in 0..2 {
            let whole = Buffer::alloc_from(&resource, kind, MAXIMUM, 256)
                .unwrap_or_else(|err| panic!("{kind}, round {round}: {err}"));
            assert_eq!(pool.pool_size(), MAXIMUM, "{kind}");
            assert_eq!(pool.used_size(), MAXIMUM, "{kind}");
            // The block holds that request alone: nothing else is handed out of it.
            assert!(
                Buffer::alloc_from(&resource, kind, 256, 256).is_err(),
                "{kind}"
            );
            drop(whole);
            assert_eq!(pool.used_size(), 0, "{kind}");
        }
        // Freed, the block serves smaller requests again, side by side.
        let halves: Vec<Buffer> = (0..2)
            .map(|_| Buffer::alloc_from(&resource, kind, 4 << 20, 256).unwrap())
            .collect();
        assert_ne!(halves[0].ptr(), halves[1].ptr());
        assert_eq!(pool.pool_size(), MAXIMUM, "{kind}");
    }
}

#[test]
fn an_initial_block_of_the_maximum_serves_it_before_and_after_release() {
    for kind in MemKind::ALLOCATABLE {
        let pool =
            PoolResource::reserved(upstream(), options(MAXIMUM, Some(MAXIMUM)), kind).unwrap();
        let resource: Arc<dyn MemoryResource> = pool.clone();
        drop(Buffer::alloc_from(&resource, kind, MAXIMUM, 256).unwrap());
        pool.release();
        assert_eq!(pool.pool_size(), 0);
        drop(Buffer::alloc_from(&resource, kind, MAXIMUM, 256).unwrap());
        assert_eq!(pool.pool_size(), MAXIMUM, "{kind}");
    }
}

#[test]
fn the_room_left_under_the_maximum_serves_one_request_of_all_of_it() {
    for kind in MemKind::ALLOCATABLE {
        let pool = PoolResource::reserved(upstream(), options(0, Some(MAXIMUM)), kind).unwrap();
        let resource: Arc<dyn MemoryResource> = pool.clone();
        let small = Buffer::alloc_from(&resource, kind, 4096, 256).unwrap();
        let room = MAXIMUM - pool.pool_size();
        let rest = Buffer::alloc_from(&resource, kind, room, 256)
            .unwrap_or_else(|err| panic!("{kind}: {room} bytes left: {err}"));
        assert_eq!(pool.pool_size(), MAXIMUM, "{kind}");
        let (low, high) = if small.ptr() < rest.ptr() {
            (&small, &rest)
        } else {
            (&rest, &small)
        };
        assert!(
            low.ptr() as usize + low.len() <= high.ptr() as usize,
            "{kind}: overlap"
        );
        assert!(Buffer::alloc_from(&resource, kind, room + UNIT, 256).is_err());
    }
}
