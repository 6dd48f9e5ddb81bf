//! Pending-work tracking is plain state: these tests drive it with a queue whose events only
//! complete when the queue is waited on, standing in for an asynchronous runtime.
use super::*;
use crate::{Event, ForeignQueue};
use crate::{HostQueue, QueueEvent};
use parking_lot::Mutex;
use std::any::Any;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

#[derive(Debug)]
struct ManualEvent {
    label: String,
    done: Arc<AtomicBool>,
    waits: Arc<AtomicUsize>,
    /// Waits fail while this is set (the runtime lost the device).
    fail: Arc<AtomicBool>,
}

fn lost() -> Error {
    Error::runtime("test", "wait", "the device was lost")
}

impl QueueEvent for ManualEvent {
    fn wait(&self) -> Result<()> {
        if self.fail.load(Ordering::SeqCst) {
            return Err(lost());
        }
        self.waits.fetch_add(1, Ordering::SeqCst);
        self.done.store(true, Ordering::SeqCst);
        Ok(())
    }
    fn is_complete(&self) -> Result<bool> {
        Ok(self.done.load(Ordering::SeqCst))
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// Host memory, but its work only "completes" when the queue is waited on.
#[derive(Debug)]
struct DeferredQueue {
    host: HostQueue,
    name: &'static str,
    recorded: Mutex<Vec<Arc<AtomicBool>>>,
    /// Labels of the events this queue was told to wait for.
    waited_for: Mutex<Vec<String>>,
    event_waits: Arc<AtomicUsize>,
    device_waits: AtomicUsize,
    deallocations: AtomicUsize,
    /// Copies enqueued (each one runtime command).
    copies: AtomicUsize,
    /// What `copy_rows` was asked, in turn (each row then one of `copies`).
    rows: Mutex<Vec<crate::Rows>>,
    fail: Arc<AtomicBool>,
}

impl DeferredQueue {
    fn new(name: &'static str) -> Arc<DeferredQueue> {
        Arc::new(DeferredQueue {
            host: HostQueue::new(),
            name,
            recorded: Mutex::new(Vec::new()),
            waited_for: Mutex::new(Vec::new()),
            event_waits: Arc::new(AtomicUsize::new(0)),
            device_waits: AtomicUsize::new(0),
            deallocations: AtomicUsize::new(0),
            copies: AtomicUsize::new(0),
            rows: Mutex::new(Vec::new()),
            fail: Arc::new(AtomicBool::new(false)),
        })
    }
}

impl Queue for DeferredQueue {
    fn device(&self) -> &DeviceInfo {
        self.host.device()
    }
    fn host_accessible(&self, _kind: MemKind) -> bool {
        true
    }
    fn allocate(&self, kind: MemKind, size: usize, align: usize) -> Result<NonNull<u8>> {
        self.host.allocate(kind, size, align)
    }
    unsafe fn deallocate(&self, ptr: NonNull<u8>, kind: MemKind, size: usize, align: usize) {
        self.deallocations.fetch_add(1, Ordering::SeqCst);
        // SAFETY: forwarded unchanged from the caller's contract.
        unsafe { self.host.deallocate(ptr, kind, size, align) }
    }
    unsafe fn copy(&self, dst: *mut u8, src: *const u8, len: usize) -> Result<()> {
        self.copies.fetch_add(1, Ordering::SeqCst);
        // SAFETY: forwarded unchanged from the caller's contract.
        unsafe { self.host.copy(dst, src, len) }
    }
    unsafe fn copy_rows(&self, dst: *mut u8, src: *const u8, rows: crate::Rows) -> Result<()> {
        self.rows.lock().push(rows);
        // SAFETY: forwarded unchanged from the caller's contract.
        unsafe { crate::copy_row_by_row(self, dst, src, rows) }
    }
    unsafe fn fill(&self, dst: *mut u8, byte: u8, len: usize) -> Result<()> {
        // SAFETY: forwarded unchanged from the caller's contract.
        unsafe { self.host.fill(dst, byte, len) }
    }
    fn wait(&self) -> Result<()> {
        if self.fail.load(Ordering::SeqCst) {
            return Err(lost());
        }
        for done in self.recorded.lock().drain(..) {
            done.store(true, Ordering::SeqCst);
        }
        Ok(())
    }
    fn wait_device(&self) -> Result<()> {
        self.device_waits.fetch_add(1, Ordering::SeqCst);
        self.wait()
    }
    fn record_event(&self) -> Result<Event> {
        let mut recorded = self.recorded.lock();
        let done = Arc::new(AtomicBool::new(false));
        recorded.push(Arc::clone(&done));
        Ok(Event::new(ManualEvent {
            label: format!("{}#{}", self.name, recorded.len()),
            done,
            waits: Arc::clone(&self.event_waits),
            fail: Arc::clone(&self.fail),
        }))
    }
    fn wait_event(&self, event: &Event) -> Result<()> {
        if self.fail.load(Ordering::SeqCst) {
            return Err(lost());
        }
        let label = event
            .downcast_ref::<ManualEvent>()
            .map_or_else(|| "foreign".to_string(), |e| e.label.clone());
        self.waited_for.lock().push(label);
        Ok(())
    }
    fn kind_of(&self, ptr: *const u8) -> MemKind {
        self.host.kind_of(ptr)
    }
    /// The host queue's: nothing here is handed to other libraries.
    fn interop(&self) -> &dyn crate::Interop {
        &self.host
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// A deferred queue, also as the trait object the buffer API takes.
type QueuePair = (Arc<DeferredQueue>, Arc<dyn Queue>);

/// Foreign memory over `memory`, on `queue`, whose deleter only raises the returned flag.
///
/// # Safety
/// `memory` outlives the buffer.
unsafe fn flagged_foreign(queue: &Arc<dyn Queue>, memory: &mut [u8]) -> (Buffer, Arc<AtomicBool>) {
    let deleted = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&deleted);
    // SAFETY: the caller keeps `memory` alive past the buffer; the deleter only sets a flag.
    let buffer = unsafe {
        Buffer::from_foreign(
            Arc::clone(queue),
            memory.as_mut_ptr(),
            memory.len(),
            MemKind::Unknown,
            Owner::deleter(move || flag.store(true, Ordering::SeqCst)),
        )
    };
    (buffer, deleted)
}

fn deferred(name: &'static str) -> QueuePair {
    let queue = DeferredQueue::new(name);
    (queue.clone(), queue)
}

#[test]
fn one_queue_with_pending_work_is_the_sync_queue_until_it_completes() {
    let ((_, qa), (_, qb)) = (deferred("a"), deferred("b"));
    let buffer = Buffer::alloc(&qa, MemKind::Device, 64).unwrap();
    assert!(buffer.sync_queue(&qa).unwrap().is_none());
    let src = Buffer::alloc(&qb, MemKind::Device, 64).unwrap();
    buffer.enqueue_copy_from(&src, &qb).unwrap();
    // Only b has work on it: b is the stream to export, even though a is the home queue.
    let sync = buffer.sync_queue(&qa).unwrap().unwrap();
    assert!(Arc::ptr_eq(&sync, &qb));
    qb.wait().unwrap();
    assert!(buffer.sync_queue(&qa).unwrap().is_none());
}

#[test]
fn work_on_several_queues_is_joined_on_the_home_queue() {
    let ((a, qa), (_, qb)) = (deferred("a"), deferred("b"));
    let buffer = Buffer::alloc(&qa, MemKind::Device, 64).unwrap();
    let other = Buffer::alloc(&qa, MemKind::Device, 64).unwrap();
    buffer.enqueue_fill(1).unwrap();
    other.enqueue_copy_from(&buffer, &qb).unwrap();
    let sync = buffer.sync_queue(&qa).unwrap().unwrap();
    assert!(Arc::ptr_eq(&sync, &qa));
    assert_eq!(*a.waited_for.lock(), vec!["b#1".to_string()]);
    // The join is itself recorded: one entry remains, on a.
    qa.wait().unwrap();
    assert!(buffer.sync_queue(&qa).unwrap().is_none());
}

#[test]
fn new_work_waits_for_other_queues_and_blocking_ops_forget_their_own() {
    let ((a, qa), (_, qb)) = (deferred("a"), deferred("b"));
    let buffer = Buffer::alloc(&qa, MemKind::Device, 8).unwrap();
    let src = Buffer::alloc(&qb, MemKind::Device, 8).unwrap();
    src.copy_from_host(&[5; 8]).unwrap();
    buffer.enqueue_copy_from(&src, &qb).unwrap();
    // A blocking fill on a must first wait for b's copy, device-side.
    buffer.fill(9).unwrap();
    assert_eq!(*a.waited_for.lock(), vec!["b#1".to_string()]);
    assert_eq!(buffer.to_vec().unwrap(), vec![9; 8]);
    buffer.synchronize().unwrap();
    assert!(buffer.sync_queue(&qa).unwrap().is_none());
}

#[test]
fn dropping_memory_with_pending_work_orders_the_release_after_it() {
    let ((a, qa), (_, qb)) = (deferred("a"), deferred("b"));
    let owned = Buffer::alloc(&qa, MemKind::Device, 8).unwrap();
    owned.enqueue_fill(3).unwrap();
    let src = Buffer::alloc(&qb, MemKind::Device, 8).unwrap();
    owned.enqueue_copy_from(&src, &qb).unwrap();
    drop(owned);
    // a frees its own allocation stream-ordered after waiting for b's work on it.
    assert_eq!(*a.waited_for.lock(), vec!["b#1".to_string()]);

    let mut memory = vec![0u8; 8];
    // SAFETY: `memory` outlives the buffer.
    let (foreign, deleted) = unsafe { flagged_foreign(&qa, &mut memory) };
    foreign.enqueue_fill(4).unwrap();
    let waits_before = a.event_waits.load(Ordering::SeqCst);
    drop(foreign);
    // Foreign memory has no ordered release: the host blocked on the event, then deleted.
    assert_eq!(a.event_waits.load(Ordering::SeqCst), waits_before + 1);
    assert!(deleted.load(Ordering::SeqCst));
}

/// An import that took ownership of foreign memory and then refused it never makes a
/// Buffer: its owner must still release the memory, once.
#[test]
fn an_owner_that_never_reaches_a_buffer_still_runs_its_deleter_once() {
    let runs = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = Arc::clone(&runs);
    let owner = Owner::deleter(move || {
        counter.fetch_add(1, Ordering::SeqCst);
    });
    drop(owner);
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

#[test]
fn exported_memory_is_released_only_after_the_whole_device_is_idle() {
    let (a, qa) = deferred("a");
    drop(Buffer::alloc(&qa, MemKind::Device, 8).unwrap());
    assert_eq!(a.device_waits.load(Ordering::SeqCst), 0);
    let exported = Buffer::alloc(&qa, MemKind::Device, 8).unwrap();
    let view = exported.slice(0..4).unwrap();
    view.mark_exported();
    drop(exported);
    assert_eq!(a.device_waits.load(Ordering::SeqCst), 0);
    drop(view);
    assert_eq!(a.device_waits.load(Ordering::SeqCst), 1);
}

#[test]
fn memory_a_command_may_still_use_is_leaked_when_waiting_fails() {
    let ((a, qa), (b, qb)) = (deferred("a"), deferred("b"));
    let owned = Buffer::alloc(&qa, MemKind::Device, 8).unwrap();
    let src = Buffer::alloc(&qb, MemKind::Device, 8).unwrap();
    owned.enqueue_copy_from(&src, &qb).unwrap();
    a.fail.store(true, Ordering::SeqCst);
    b.fail.store(true, Ordering::SeqCst);
    drop(owned);
    assert_eq!(a.deallocations.load(Ordering::SeqCst), 0);

    let mut memory = vec![0u8; 8];
    a.fail.store(false, Ordering::SeqCst);
    // SAFETY: `memory` outlives the buffer.
    let (foreign, deleted) = unsafe { flagged_foreign(&qa, &mut memory) };
    foreign.enqueue_fill(4).unwrap();
    a.fail.store(true, Ordering::SeqCst);
    drop(foreign);
    assert!(!deleted.load(Ordering::SeqCst));
}

/// An event whose wait blocks until the test opens its gate.
#[derive(Debug, Default)]
struct GatedEvent {
    waiting: AtomicBool,
    open: Mutex<bool>,
    opened: parking_lot::Condvar,
}

impl QueueEvent for GatedEvent {
    fn wait(&self) -> Result<()> {
        self.waiting.store(true, Ordering::SeqCst);
        let mut open = self.open.lock();
        while !*open {
            self.opened.wait(&mut open);
        }
        Ok(())
    }
    fn is_complete(&self) -> Result<bool> {
        Ok(*self.open.lock())
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// Holds an `Arc<GatedEvent>` so that the test can open the gate the buffer waits on.
#[derive(Debug)]
struct SharedGate(Arc<GatedEvent>);

impl QueueEvent for SharedGate {
    fn wait(&self) -> Result<()> {
        self.0.wait()
    }
    fn is_complete(&self) -> Result<bool> {
        self.0.is_complete()
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

#[test]
fn work_stays_recorded_while_synchronize_waits_for_it() {
    let ((a, qa), (_, qb)) = (deferred("a"), deferred("b"));
    let buffer = Buffer::alloc(&qa, MemKind::Device, 8).unwrap();
    let gate = Arc::new(GatedEvent::default());
    buffer.record_work(&qb, Event::new(SharedGate(Arc::clone(&gate))));
    std::thread::scope(|scope| {
        let waiter = scope.spawn(|| buffer.synchronize());
        while !gate.waiting.load(Ordering::SeqCst) {
            std::thread::yield_now();
        }
        // A write on a, ordered while the host still waits for b's read: it must wait too.
        buffer.order_on(&qa).unwrap();
        *gate.open.lock() = true;
        gate.opened.notify_all();
        waiter.join().unwrap().unwrap();
    });
    assert_eq!(*a.waited_for.lock(), vec!["foreign".to_string()]);
    assert!(!buffer.has_pending_work());
}

/// Another library's queue: counts the events recorded on it.
#[derive(Debug, Default)]
struct Producer {
    recorded: AtomicUsize,
    waited: AtomicUsize,
    done: Arc<AtomicBool>,
}

impl ForeignQueue for Producer {
    fn record_event(&self) -> Result<Event> {
        self.recorded.fetch_add(1, Ordering::SeqCst);
        Ok(Event::new(ManualEvent {
            label: "producer".into(),
            done: Arc::clone(&self.done),
            waits: Arc::new(AtomicUsize::new(0)),
            fail: Arc::new(AtomicBool::new(false)),
        }))
    }
    fn wait_event(&self, _event: &Event) -> Result<()> {
        self.waited.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}

#[test]
fn a_held_back_producer_waits_for_work_enqueued_without_waiting() {
    let (_, qa) = deferred("a");
    let imported = Buffer::alloc(&qa, MemKind::Device, 8).unwrap();
    let producer = Arc::new(Producer::default());
    imported.hold_back(producer.clone());
    assert!(!imported.has_pending_work());
    imported.fill(1).unwrap();
    assert_eq!(producer.waited.load(Ordering::SeqCst), 0);
    imported.enqueue_fill(2).unwrap();
    let source = Buffer::alloc(&qa, MemKind::Device, 8).unwrap();
    imported.enqueue_copy_from(&source, &qa).unwrap();
    assert_eq!(producer.waited.load(Ordering::SeqCst), 2);
}

#[test]
fn re_exported_foreign_memory_lets_go_of_its_owner_after_the_device_is_idle() {
    let (a, qa) = deferred("a");
    let released = Arc::new(AtomicBool::new(false));
    let set = Arc::clone(&released);
    // SAFETY: nothing dereferences the made-up address.
    let imported = unsafe {
        Buffer::from_foreign(
            Arc::clone(&qa),
            0x1000 as *mut u8,
            8,
            MemKind::Device,
            Owner::deleter(move || set.store(true, Ordering::SeqCst)),
        )
    };
    imported.mark_exported();
    drop(imported);
    assert!(released.load(Ordering::SeqCst));
    assert_eq!(a.device_waits.load(Ordering::SeqCst), 1);
}

#[test]
fn the_producers_event_is_recorded_when_first_needed_and_ordered_before_ours() {
    let (a, qa) = deferred("a");
    let mut memory = vec![0u8; 8];
    // SAFETY: `memory` outlives the buffer.
    let imported = unsafe {
        Buffer::from_foreign(
            Arc::clone(&qa),
            memory.as_mut_ptr(),
            8,
            MemKind::Unknown,
            Owner::keep_alive(()),
        )
    };
    let producer = Arc::new(Producer::default());
    imported.record_producer(producer.clone()).unwrap();
    assert!(imported.has_pending_work());
    assert_eq!(producer.recorded.load(Ordering::SeqCst), 0);
    imported.fill(1).unwrap();
    assert_eq!(producer.recorded.load(Ordering::SeqCst), 1);
    assert_eq!(*a.waited_for.lock(), vec!["producer".to_string()]);
    // The fill waited for it on the device: once done, nothing is pending.
    producer.done.store(true, Ordering::SeqCst);
    qa.wait().unwrap();
    imported.synchronize().unwrap();
    assert!(!imported.has_pending_work());

    // Dropping an import with only the producer's work pending does not wait for it.
    let waits = a.event_waits.load(Ordering::SeqCst);
    imported
        .record_producer(Arc::new(Producer::default()))
        .unwrap();
    drop(imported);
    assert_eq!(a.event_waits.load(Ordering::SeqCst), waits);
}

#[test]
fn a_pending_copy_holds_its_source_so_dropping_the_source_does_not_wait() {
    let (a, qa) = deferred("a");
    let mut memory = vec![7u8; 8];
    // SAFETY: `memory` outlives the buffer.
    let (source, deleted) = unsafe { flagged_foreign(&qa, &mut memory) };
    let target = Buffer::alloc(&qa, MemKind::Device, 8).unwrap();
    target.enqueue_copy_from(&source, &qa).unwrap();
    let waits = a.event_waits.load(Ordering::SeqCst);
    drop(source);
    assert_eq!(a.event_waits.load(Ordering::SeqCst), waits);
    assert!(!deleted.load(Ordering::SeqCst));
    target.synchronize().unwrap();
    assert!(deleted.load(Ordering::SeqCst));
}

#[test]
fn waits_before_a_release_run_through_the_blocking_hook() {
    // The hook is the process's: count this thread's calls only, not those of the tests that
    // run beside this one.
    thread_local! {
        static CALLS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
    }
    fn counting(run: &mut dyn FnMut()) {
        CALLS.with(|calls| calls.set(calls.get().saturating_add(1)));
        run();
    }
    crate::set_blocking_hook(counting);
    let (_, qa) = deferred("a");
    drop(Buffer::alloc(&qa, MemKind::Device, 8).unwrap());
    assert_eq!(CALLS.with(std::cell::Cell::get), 0);
    let busy = Buffer::alloc(&qa, MemKind::Device, 8).unwrap();
    busy.enqueue_fill(1).unwrap();
    drop(busy);
    assert_eq!(CALLS.with(std::cell::Cell::get), 1);
}

#[test]
fn a_read_only_buffer_refuses_every_write_and_reads() {
    let queue = HostQueue::shared();
    let memory = [9u8; 16];
    // SAFETY: `memory` outlives the buffer and is only read through it.
    let read_only = unsafe {
        Buffer::from_foreign_read_only(
            Arc::clone(&queue),
            memory.as_ptr().cast_mut(),
            16,
            MemKind::Unknown,
            Owner::keep_alive(()),
        )
    };
    let part = read_only.slice(4..8).unwrap();
    assert!(part.is_read_only() && crate::Array::bytes(part.clone()).readonly());
    let other = Buffer::alloc(&queue, MemKind::Host, 4).unwrap();
    let refusals = [
        part.fill(1).map(drop),
        part.enqueue_fill(1).map(drop),
        part.copy_from(&other),
        part.enqueue_copy_from(&other, &queue).map(drop),
        part.copy_from_host(&[1; 4]),
    ];
    for refused in refusals {
        let err = refused.unwrap_err().to_string();
        assert!(
            err.starts_with("buffer: ") && err.contains("read-only"),
            "{err}"
        );
    }
    assert_eq!(part.to_vec().unwrap(), [9; 4]);
    other.copy_from(&part).unwrap();
    assert_eq!(memory, [9; 16]);
}

/// Another runtime's host memory is filled by a queue that says it reaches any host memory, not by
/// one whose device merely carries the host backend's name (the deferred queue's does, but its
/// runtime knows only its own allocations).
#[test]
fn only_a_queue_that_reaches_any_host_memory_fills_another_runtimes_host_memory() {
    let (_, named_host) = deferred("named host");
    let owner: Arc<dyn Queue> = Arc::new(HostQueue::new());
    let buffer = Buffer::alloc(&owner, MemKind::Host, 64).unwrap();
    assert_eq!(named_host.device().backend, crate::host::HOST);
    assert!(buffer.enqueue_fill_on(1, &named_host).is_err());
    let cpu: Arc<dyn Queue> = Arc::new(HostQueue::new());
    assert!(cpu.reaches_any_host_memory());
    buffer.enqueue_fill_on(7, &cpu).unwrap();
    assert_eq!(buffer.to_vec().unwrap(), vec![7; 64]);
}

#[test]
fn strided_writes_between_the_hosts_own_memory_run_on_the_host_after_the_work_on_it() {
    // The deferred queue's host memory is host-resident (the default answer); its device memory
    // is host-accessible but not the host's own.
    let (deferred, queue) = deferred("strided");
    let starts = [(0, 0), (4, 1), (8, 2)];
    let runs = Runs {
        len: 1,
        starts: &starts,
    };
    for (kind, on_the_host) in [(MemKind::Host, true), (MemKind::Device, false)] {
        let destination = Buffer::alloc(&queue, kind, 12).unwrap();
        let source = Buffer::alloc(&queue, kind, 3).unwrap();
        source.copy_from_host(&[7, 8, 9]).unwrap();
        destination.enqueue_fill_on(1, &queue).unwrap();
        assert!(destination.has_pending_work());
        let copies = deferred.copies.load(Ordering::SeqCst);
        destination.copy_runs_from(&source, runs).unwrap();
        let commands = deferred.copies.load(Ordering::SeqCst) - copies;
        assert_eq!(commands, if on_the_host { 0 } else { 3 }, "{kind}");
        // Waited for either way: the host's access waits for the fill, the commands are waited.
        assert!(!destination.has_pending_work(), "{kind}");
        assert_eq!(
            destination.to_vec().unwrap(),
            [7, 1, 1, 1, 8, 1, 1, 1, 9, 1, 1, 1],
            "{kind}"
        );
        // What a caller naming a stream asks before it lets a waited-for write run so.
        let layout = |shape: &[usize], strides: &[isize]| {
            crate::Layout::new(crate::DType::UINT8, shape, Some(strides), 0, false).unwrap()
        };
        let column = crate::Array::new(destination.clone(), layout(&[3], &[4])).unwrap();
        let row = crate::Array::new(source.clone(), layout(&[3], &[1])).unwrap();
        assert_eq!(column.writes_on_the_host(Some(&row)), on_the_host, "{kind}");
        assert_eq!(column.writes_on_the_host(None), on_the_host, "{kind}");
        let contiguous = crate::Array::new(destination, layout(&[3], &[1])).unwrap();
        assert!(!contiguous.writes_on_the_host(Some(&row)), "{kind}");
    }
}

#[test]
fn runs_a_fixed_step_apart_go_to_the_queue_as_rows() {
    let (deferred, queue) = deferred("rows");
    let src = Buffer::alloc(&queue, MemKind::Device, 64).unwrap();
    src.copy_from_host(&(0..64).collect::<Vec<u8>>()).unwrap();
    let dst = Buffer::alloc(&queue, MemKind::Device, 64).unwrap();
    let rows = |width, count, dst_pitch, src_pitch| crate::Rows {
        width,
        count,
        dst_pitch,
        src_pitch,
    };
    // Three rows 8 apart here and 3 apart there; a run that breaks the step; two rows 2 apart
    // here and 10 there; a run stepping back (no pitch is negative); a run whose step is shorter
    // than the run (rows would overlap).
    let starts = [
        (0, 0),
        (8, 3),
        (16, 6),
        (20, 40),
        (22, 50),
        (17, 60),
        (40, 61),
    ];
    let copies = || deferred.copies.load(Ordering::SeqCst);
    for enqueued in [false, true] {
        dst.fill(0xff).unwrap();
        deferred.rows.lock().clear();
        let before = copies();
        let runs = Runs {
            len: 2,
            starts: &starts[..5],
        };
        if enqueued {
            dst.enqueue_copy_runs_from(&src, runs, &queue).unwrap();
        } else {
            dst.copy_runs_from(&src, runs).unwrap();
        }
        assert_eq!(
            *deferred.rows.lock(),
            [rows(2, 3, 8, 3), rows(2, 2, 2, 10)],
            "enqueued: {enqueued}"
        );
        assert_eq!(copies() - before, 5, "a copy per row by default");
        let mut expected = vec![0xff; 64];
        for &(to, from) in &starts[..5] {
            expected[to..to + 2].copy_from_slice(&[from as u8, from as u8 + 1]);
        }
        assert_eq!(dst.to_vec().unwrap(), expected);
    }
    deferred.rows.lock().clear();
    let before = copies();
    let runs = Runs {
        len: 2,
        starts: &starts[4..],
    };
    dst.copy_runs_from(&src, runs).unwrap();
    // (22, 50) then (17, 60) steps back; (17, 60) then (40, 61) steps 1 < 2 in the source.
    assert!(deferred.rows.lock().is_empty());
    assert_eq!(copies() - before, 3);
}
