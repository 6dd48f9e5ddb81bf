//! The reverse direction of ordering, as plain state: once memory was handed out, devbuf's use of
//! it asks its queue to order after other libraries' work; releases follow the backend's rule (a
//! wait for the whole device, or the runtime's own free); pools never hand such memory out again
//! where the device wait does not see every queue.

use super::*;
use crate::Event;
use crate::interop::{Holder, Interop, IpcSharing};
use crate::mr::{PoolOptions, PoolResource, QueueResource};
use crate::{Access, CompletedEvent, HostQueue};
use dlpark::ffi::DLDevice;
use std::any::Any;
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering;

/// Host memory on a queue that says whether other libraries enqueue on it and whether its device
/// wait sees every queue, counting what devbuf asks of it.
#[derive(Debug, Default)]
struct HandedOutQueue {
    host: HostQueue,
    foreign_work: bool,
    covers_every_queue: bool,
    /// The name of the thread that last freed memory of this queue.
    freed_on: parking_lot::Mutex<Option<String>>,
    orders: AtomicUsize,
    fences: AtomicUsize,
    event_waits: AtomicUsize,
    device_waits: AtomicUsize,
}

impl Queue for HandedOutQueue {
    fn device(&self) -> &DeviceInfo {
        self.host.device()
    }
    fn allocate(&self, kind: MemKind, size: usize, align: usize) -> Result<NonNull<u8>> {
        self.host.allocate(kind, size, align)
    }
    unsafe fn deallocate(&self, ptr: NonNull<u8>, kind: MemKind, size: usize, align: usize) {
        *self.freed_on.lock() = std::thread::current().name().map(str::to_owned);
        // SAFETY: forwarded unchanged from the caller's contract.
        unsafe { self.host.deallocate(ptr, kind, size, align) }
    }
    unsafe fn copy(&self, dst: *mut u8, src: *const u8, len: usize) -> Result<()> {
        // SAFETY: forwarded unchanged from the caller's contract.
        unsafe { self.host.copy(dst, src, len) }
    }
    unsafe fn fill(&self, dst: *mut u8, byte: u8, len: usize) -> Result<()> {
        // SAFETY: forwarded unchanged from the caller's contract.
        unsafe { self.host.fill(dst, byte, len) }
    }
    fn wait(&self) -> Result<()> {
        Ok(())
    }
    fn wait_device(&self) -> Result<()> {
        self.device_waits.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
    fn record_event(&self) -> Result<Event> {
        Ok(Event::new(CompletedEvent))
    }
    fn wait_event(&self, _event: &Event) -> Result<()> {
        self.event_waits.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
    fn kind_of(&self, ptr: *const u8) -> MemKind {
        self.host.kind_of(ptr)
    }
    fn interop(&self) -> &dyn Interop {
        self
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// The host queue's answers, but for the ordering with other libraries' work under test.
impl Interop for HandedOutQueue {
    fn dlpack_device(&self, kind: MemKind) -> DLDevice {
        self.host.dlpack_device(kind)
    }
    fn dlpack_export_refusal(&self) -> Option<String> {
        None
    }
    fn holder_of(&self, ptr: *const u8) -> Result<Holder> {
        self.host.holder_of(ptr)
    }
    crate::hands_out_no_handle!();
    fn untracked_foreign_work(&self) -> bool {
        self.foreign_work
    }
    fn order_after_foreign_work(&self) -> Result<()> {
        self.orders.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
    fn foreign_work_event(&self) -> Result<Option<Event>> {
        self.fences.fetch_add(1, Ordering::SeqCst);
        Ok(Some(Event::new(CompletedEvent)))
    }
    fn handed_out_event(&self) -> Result<Event> {
        self.record_event()
    }
    fn hands_out_command_queue(&self) -> bool {
        true
    }
    fn order_handed_out_after(&self, event: &Event) -> Result<()> {
        self.wait_event(event)
    }
    fn wait_device_covers_every_queue(&self) -> bool {
        self.covers_every_queue
    }
    crate::takes_no_foreign_stream!();
    fn ipc(&self) -> Result<&dyn IpcSharing> {
        self.host.ipc()
    }
}

fn queue(foreign_work: bool, covers_every_queue: bool) -> (Arc<HandedOutQueue>, Arc<dyn Queue>) {
    let queue = Arc::new(HandedOutQueue {
        foreign_work,
        covers_every_queue,
        ..HandedOutQueue::default()
    });
    (queue.clone(), queue)
}

fn count(counter: &AtomicUsize) -> usize {
    counter.load(Ordering::SeqCst)
}

#[test]
fn devbufs_use_of_exported_memory_follows_other_libraries_work() {
    let ((a, qa), (b, qb)) = (queue(true, true), queue(true, true));
    let buffer = Buffer::alloc(&qa, MemKind::Host, 64).unwrap();
    buffer.fill(1).unwrap();
    buffer.synchronize().unwrap();
    assert!(!buffer.needs_synchronize());
    assert_eq!(
        (count(&a.orders), count(&a.fences)),
        (0, 0),
        "not handed out yet"
    );

    buffer.mark_exported();
    assert!(buffer.needs_synchronize());
    // A command on its own queue: ordered there, without an event.
    buffer.fill(2).unwrap();
    assert_eq!((count(&a.orders), count(&a.fences)), (1, 0));
    // A host view: waits for an event that covers the foreign work.
    buffer.synchronize().unwrap();
    assert_eq!((count(&a.orders), count(&a.fences)), (1, 1));
    // A copy on another queue: that queue waits for the event.
    let other = Buffer::alloc(&qb, MemKind::Host, 64).unwrap();
    other.copy_from(&buffer).unwrap();
    assert_eq!(count(&a.fences), 2);
    assert_eq!(count(&b.event_waits), 1);
    assert_eq!(other.to_vec().unwrap(), vec![2; 64]);
}

#[test]
fn a_queue_no_other_library_enqueues_on_is_not_asked() {
    let (a, qa) = queue(false, true);
    let buffer = Buffer::alloc(&qa, MemKind::Host, 64).unwrap();
    buffer.mark_exported();
    assert!(!buffer.needs_synchronize());
    buffer.fill(1).unwrap();
    buffer.synchronize().unwrap();
    assert_eq!((count(&a.orders), count(&a.fences)), (0, 0));
}

#[test]
fn exported_memory_waits_for_the_device_only_where_that_sees_every_queue() {
    for covers in [true, false] {
        let (a, qa) = queue(true, covers);
        let exported = Buffer::alloc(&qa, MemKind::Device, 8).unwrap();
        exported.mark_exported();
        drop(exported);
        // Elsewhere the runtime's own free waits for other libraries' work, as for theirs.
        assert_eq!(
            count(&a.device_waits),
            usize::from(covers),
            "covers: {covers}"
        );
    }
}

#[test]
fn a_pool_never_hands_out_again_a_block_other_libraries_may_still_use() {
    let (a, qa) = queue(true, false);
    let pool = PoolResource::new(QueueResource::new(qa), PoolOptions::default());
    let resource: Arc<dyn MemoryResource> = pool.clone();
    let alloc = || Buffer::alloc_from(&resource, MemKind::Host, 1024, DEFAULT_ALIGNMENT).unwrap();
    let exported = alloc();
    // In the same upstream block: it cannot go back upstream while this lives.
    let keeper = alloc();
    let addr = exported.ptr();
    exported.mark_exported();
    drop(exported);
    assert_eq!(count(&a.device_waits), 0);
    let again: Vec<Buffer> = (0..2048).map(|_| alloc()).collect();
    assert!(again.iter().all(|buffer| buffer.ptr() != addr));
    drop((again, keeper));
    pool.release();
    assert_eq!(
        pool.pool_size(),
        0,
        "the block with the retired allocation went back"
    );

    // Once such blocks are at least half of an upstream block with nothing else in use, it goes
    // back by itself.
    let exported: Vec<Buffer> = (0..600).map(|_| alloc()).collect();
    assert_eq!(pool.pool_size(), 1 << 20);
    for buffer in &exported {
        buffer.mark_exported();
    }
    drop(exported);
    assert_eq!(pool.pool_size(), 0);
}

#[test]
fn every_access_follows_other_libraries_work_on_every_queue_the_memory_was_handed_out_on() {
    // The memory's own queue and a user stream `s` named in an export (issue 33).
    let ((a, qa), (s, qs), (r, qr)) = (queue(true, true), queue(true, true), queue(true, true));
    let buffer = Buffer::alloc(&qa, MemKind::Host, 64).unwrap();
    buffer.fill(1).unwrap();
    buffer.hand_out_on(&qs);
    assert!(buffer.needs_synchronize() && buffer.needs_ordering_on_own_queue());
    // A host view: an event covering the consumers' work on each queue.
    buffer.synchronize().unwrap();
    assert_eq!((count(&a.fences), count(&s.fences)), (1, 1));
    // A command on the stream itself: ordered there, after the other queue's work.
    buffer.order_on(&qs).unwrap();
    assert_eq!((count(&s.orders), count(&a.fences)), (1, 2));
    // A command on a third queue waits for both.
    buffer.order_access(Access::Queue(&qr)).unwrap();
    assert_eq!(
        (count(&a.fences), count(&s.fences), count(&r.event_waits)),
        (3, 2, 2)
    );
    // A re-export names a queue that was made to follow both.
    let named = buffer
        .sync_queue(&qa)
        .unwrap()
        .expect("a queue to wait for");
    assert!(Arc::ptr_eq(&named, &qa));
    assert_eq!((count(&a.orders), count(&s.fences)), (1, 3));
}

#[test]
fn a_stream_named_in_an_export_lives_as_long_as_the_memory() {
    let ((_, qa), (_, qs)) = (queue(true, true), queue(true, true));
    let buffer = Buffer::alloc(&qa, MemKind::Host, 64).unwrap();
    buffer.hand_out_on(&qs);
    buffer.hand_out_on(&qs);
    let stream = Arc::downgrade(&qs);
    drop(qs);
    assert!(stream.upgrade().is_some());
    let view = buffer.slice(0..8).unwrap();
    drop(buffer);
    assert!(
        stream.upgrade().is_some(),
        "a view keeps the allocation and its streams"
    );
    drop(view);
    assert!(stream.upgrade().is_none());
}

#[test]
fn a_release_follows_other_libraries_work_on_the_queues_it_was_handed_out_on() {
    // Where the device wait does not cover every queue (SYCL), the release waits for an event
    // of each queue the memory was handed out on, on devbuf's release thread (the release may
    // run inside another library's host task).
    let ((a, qa), (s, qs)) = (queue(true, false), queue(true, false));
    let buffer = Buffer::alloc(&qa, MemKind::Host, 64).unwrap();
    buffer.hand_out_on(&qs);
    drop(buffer);
    crate::buffer::ordering::release::wait_for_release_thread();
    assert_eq!(
        count(&s.fences),
        1,
        "the stream's consumers were not waited for"
    );
    assert_eq!(count(&a.event_waits), 1);
}

/// The name of the thread on which foreign memory handed out on another queue is let go, where
/// the device wait of its queue does or does not cover every queue.
fn thread_letting_go_of_foreign_memory(covers_every_queue: bool) -> Option<String> {
    let ((_, qa), (_, qs)) = (
        queue(true, covers_every_queue),
        queue(true, covers_every_queue),
    );
    let mut memory = vec![0u8; 64];
    let (told, let_go_on) = std::sync::mpsc::channel();
    // SAFETY: `memory` outlives the buffer, which the release thread lets go of before the wait
    // below returns.
    let buffer = unsafe {
        Buffer::from_foreign(
            qa,
            memory.as_mut_ptr(),
            memory.len(),
            MemKind::Host,
            Owner::deleter(move || {
                let _ = told.send(std::thread::current().name().map(str::to_owned));
            }),
        )
    };
    buffer.hand_out_on(&qs);
    drop(buffer);
    crate::buffer::ordering::release::wait_for_release_thread();
    let_go_on.recv().unwrap()
}

#[test]
fn foreign_memory_whose_release_waits_is_let_go_on_the_release_thread_where_the_device_wait_misses_queues()
 {
    // SYCL: the last reference may go inside dpnp's host task, where a wait for work the
    // scheduler holds behind that task never ends (the ordering machine hung there).
    assert_eq!(
        thread_letting_go_of_foreign_memory(false).as_deref(),
        Some("devbuf-release")
    );
    // CUDA: the device wait covers every queue; the owner goes on the thread that let go.
    assert_ne!(
        thread_letting_go_of_foreign_memory(true).as_deref(),
        Some("devbuf-release")
    );
}

#[test]
fn exported_memory_with_work_on_its_own_queue_is_freed_on_the_release_thread() {
    // The runtime's own free does not see devbuf's commands the SYCL scheduler still holds behind
    // a host task (they follow barriers on the queues the memory was handed out on): a random
    // machine run crashed in such a copy, run after the free.
    let (a, qa) = queue(true, false);
    let buffer = Buffer::alloc(&qa, MemKind::Host, 64).unwrap();
    buffer.mark_exported();
    buffer.enqueue_fill(1).unwrap();
    drop(buffer);
    crate::buffer::ordering::release::wait_for_release_thread();
    assert_eq!(a.freed_on.lock().as_deref(), Some("devbuf-release"));
}

#[test]
fn queues_no_other_library_enqueues_on_are_not_recorded() {
    let ((_, qa), (s, qs)) = (queue(false, true), queue(false, true));
    let buffer = Buffer::alloc(&qa, MemKind::Host, 64).unwrap();
    buffer.hand_out_on(&qs);
    assert!(!buffer.needs_synchronize() && !buffer.needs_ordering_on_own_queue());
    buffer.synchronize().unwrap();
    assert_eq!(count(&s.fences), 0);
}
