//! The threads' magazines: where their blocks go when a thread exits, a pool is dropped, released
//! or must grow, and the guards that keep a block from being handed out twice.

use std::sync::atomic::Ordering;
use std::sync::mpsc;
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::Duration;

use super::super::arena::{UNIT, slot_of};
use super::super::recent::{entry, request};
use super::super::{PoolOptions, PoolResource};
use super::{Magazine, take_back_all};
use crate::mr::{MemoryResource, QueueResource, StatisticsResource};
use crate::{Buffer, DEFAULT_ALIGNMENT, HostQueue, MemKind};

fn host_pool(options: PoolOptions) -> (Arc<PoolResource>, Arc<dyn MemoryResource>) {
    let pool = PoolResource::new(QueueResource::new(Arc::new(HostQueue::new())), options);
    let resource: Arc<dyn MemoryResource> = pool.clone();
    (pool, resource)
}

fn alloc(resource: &Arc<dyn MemoryResource>, len: usize) -> Buffer {
    Buffer::alloc_from(resource, MemKind::Host, len, DEFAULT_ALIGNMENT).unwrap()
}

/// Whether no block of the pool's host arena is handed out (kept ones included).
fn nothing_handed_out(pool: &PoolResource) -> bool {
    pool.arenas[slot_of(MemKind::Host)]
        .lock()
        .handed_out
        .is_empty()
}

/// A buffer dropped on another thread goes to that thread's magazine, which serves that thread's
/// next request, and comes back to the pool when the thread exits.
#[test]
fn a_block_freed_on_another_thread_is_kept_there_and_comes_back_at_its_exit() {
    let (pool, resource) = host_pool(PoolOptions::default());
    let buffer = alloc(&resource, 1000);
    let addr = buffer.ptr() as usize;
    let other = Arc::clone(&resource);
    thread::spawn(move || {
        drop(buffer);
        assert_eq!(
            alloc(&other, 1000).ptr() as usize,
            addr,
            "the thread's magazine"
        );
    })
    .join()
    .unwrap();
    assert!(
        pool.magazines.list.lock().is_empty(),
        "unregistered at exit"
    );
    assert!(nothing_handed_out(&pool), "its block back in the arena");
}

/// A pool dropped while a live thread's magazine holds one of its blocks gives that block's
/// memory back upstream all the same; the thread later adopts another pool and exits cleanly.
#[test]
fn a_pool_dropped_while_a_thread_keeps_its_block_gives_all_its_memory_back() {
    let stats = StatisticsResource::new(QueueResource::new(Arc::new(HostQueue::new())));
    let upstream: Arc<dyn MemoryResource> = stats.clone();
    let pool: Arc<dyn MemoryResource> = PoolResource::new(upstream.clone(), PoolOptions::default());
    let (kept, go_on) = (mpsc::channel(), mpsc::channel::<()>());
    let worker = thread::spawn(move || {
        drop(alloc(&pool, 1000));
        drop(pool);
        kept.0.send(()).unwrap();
        go_on.1.recv().unwrap();
        let (_, next) = host_pool(PoolOptions::default());
        drop(alloc(&next, 1000));
    });
    kept.1.recv().unwrap();
    assert_eq!(
        stats.statistics().current_bytes,
        0,
        "the pool's blocks upstream"
    );
    go_on.0.send(()).unwrap();
    worker.join().unwrap();
}

/// `release` takes back the blocks other (live) threads keep, and so does a pool that must grow:
/// neither holds memory a thread's magazine sits on.
#[test]
fn release_and_growth_take_back_what_other_threads_keep() {
    let options = PoolOptions {
        initial_size: 1 << 20,
        maximum_size: Some(1 << 20),
    };
    let (pool, resource) = host_pool(options);
    let (kept, done) = (Arc::new(Barrier::new(2)), Arc::new(Barrier::new(2)));
    let worker = {
        let (resource, kept, done) = (Arc::clone(&resource), kept.clone(), done.clone());
        thread::spawn(move || {
            drop(alloc(&resource, 60 << 10));
            kept.wait();
            done.wait();
            drop(alloc(&resource, 60 << 10));
            kept.wait();
            done.wait();
        })
    };
    kept.wait();
    // The pool may not grow, and the large block needs all of it, the worker's block's room too.
    drop(alloc(&resource, 1000 << 10));
    done.wait();
    kept.wait();
    pool.release();
    assert_eq!(pool.pool_size(), 0);
    done.wait();
    worker.join().unwrap();
}

/// A thread keeps magazines for a few pools; adopting one more gives the oldest back (the thread
/// still alive).
#[test]
fn a_thread_gives_back_its_oldest_magazine_past_its_pools() {
    let pools: Vec<_> = (0..5).map(|_| host_pool(PoolOptions::default())).collect();
    let resources: Vec<_> = pools.iter().map(|(_, r)| Arc::clone(r)).collect();
    let (kept, done) = (Arc::new(Barrier::new(2)), Arc::new(Barrier::new(2)));
    let worker = {
        let (kept, done) = (kept.clone(), done.clone());
        thread::spawn(move || {
            for resource in &resources {
                drop(alloc(resource, 1000));
            }
            kept.wait();
            done.wait();
        })
    };
    kept.wait();
    let (first, last) = (&pools[0].0, &pools[4].0);
    assert!(first.magazines.list.lock().is_empty() && nothing_handed_out(first));
    assert_eq!(last.magazines.list.lock().len(), 1);
    done.wait();
    worker.join().unwrap();
}

/// The owner's guard: while its blocks are being taken back, a thread neither takes nor keeps.
#[test]
fn an_owner_leaves_its_magazine_alone_while_it_is_taken_back() {
    let magazine = Magazine::default();
    let at = entry(4 * UNIT, request(4, UNIT).unwrap()).unwrap();
    assert!(magazine.keep(0, at));
    magazine.revoked.store(true, Ordering::Relaxed);
    assert_eq!(magazine.take(0, request(4, UNIT).unwrap()), None);
    assert_eq!(magazine.take_out(0), Some(4 * UNIT));
    assert!(!magazine.keep(0, at));
    magazine.revoked.store(false, Ordering::Relaxed);
    assert!(magazine.keep(0, at));
}

/// The taker's guard: a take-back waits while an owner is using its magazine.
#[test]
fn a_take_back_waits_for_an_owner_in_the_middle_of_an_access() {
    let (pool, resource) = host_pool(PoolOptions::default());
    drop(alloc(&resource, 1000));
    let kept = Arc::clone(&pool.magazines.list.lock()[0]);
    // This thread's magazine, as if its owner were between reading and writing its block.
    kept.busy.store(true, Ordering::Relaxed);
    let taker = {
        let pool = Arc::clone(&pool);
        thread::spawn(move || take_back_all(&pool.magazines, slot_of(MemKind::Host)))
    };
    thread::sleep(Duration::from_millis(100));
    assert!(!taker.is_finished(), "took the block from under its owner");
    kept.busy.store(false, Ordering::Release);
    assert_eq!(taker.join().unwrap().len(), 1);
}
