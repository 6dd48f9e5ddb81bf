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
