//! Streams: each one a worker thread that runs its operations in order, asynchronously to the
//! host (after `DEVBUF_CUDA_TEST_DELAY_US` each, when set).
//!
//! Ordering between streams is a list of dependencies per operation: "stream S has completed its
//! operation number N". The legacy default stream (handles 0 and 1) waits for everything enqueued
//! before on the context's blocking streams, and blocking streams wait for what was enqueued
//! before on the legacy stream; non-blocking streams (`CU_STREAM_NON_BLOCKING`) do neither. The
//! per-thread default stream (handle 2) is a blocking stream of the calling thread.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

use cudarc::driver::sys::{CUresult, CUstream};
use parking_lot::{Condvar, Mutex};

use crate::context::{self, Context};
use crate::device::entry;
use crate::errors::{DriverResult, write_out};
use crate::ops::{Op, execute};

/// `CU_STREAM_LEGACY`.
const LEGACY: usize = 1;
/// `CU_STREAM_PER_THREAD`.
const PER_THREAD: usize = 2;
/// `CU_STREAM_NON_BLOCKING`.
const NON_BLOCKING: u32 = 1;
/// Handles of created streams count up from here: never 0, 1 or 2, and recognisable in a dump.
const FIRST_HANDLE: usize = 0x5_7000_0000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Flavor {
    Legacy,
    PerThread,
    Blocking,
    NonBlocking,
}

/// What stream 0 (NULL) means to an entry point: the legacy default stream, or, in the
/// `_ptsz`/`_ptds` variants (`CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM`, or a program built
/// with `CUDA_API_PER_THREAD_DEFAULT_STREAM`), the calling thread's per-thread default stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NullStream {
    Legacy,
    PerThread,
}

/// "Stream `stream` has completed its operation number `sequence`."
#[derive(Clone)]
pub(crate) struct Dependency {
    pub stream: Arc<Stream>,
    pub sequence: u64,
}

impl Dependency {
    pub fn is_met(&self) -> bool {
        self.stream.completed() >= self.sequence
    }

    pub fn wait(&self) {
        self.stream.wait_for(self.sequence);
    }
}

struct Queued {
    sequence: u64,
    op: Op,
    after: Vec<Dependency>,
}

#[derive(Default)]
struct Queue {
    waiting: VecDeque<Queued>,
    enqueued: u64,
    closed: bool,
}

pub(crate) struct Stream {
    pub handle: usize,
    /// `cuStreamGetId`: unique among the process's streams, default streams included.
    pub id: u64,
    pub context: &'static Context,
    pub generation: u64,
    pub flavor: Flavor,
    pub flags: u32,
    pub priority: i32,
    /// Destroyed (`cuStreamDestroy`, or its thread exited): its handle no longer names it, but
    /// the work it had queued still runs and still counts (see [`retire`]).
    retired: AtomicBool,
    queue: Mutex<Queue>,
    work: Condvar,
    completed: Mutex<u64>,
    advanced: Condvar,
}

static NEXT_HANDLE: AtomicUsize = AtomicUsize::new(FIRST_HANDLE);
static NEXT_ID: AtomicU64 = AtomicU64::new(1);
/// Created streams by handle, and every stream of each context (for synchronization).
static STREAMS: Mutex<Vec<Arc<Stream>>> = Mutex::new(Vec::new());

impl Stream {
    fn start(context: &'static Context, flavor: Flavor, flags: u32, priority: i32) -> Arc<Stream> {
        let stream = Arc::new(Stream {
            handle: NEXT_HANDLE.fetch_add(0x10, Ordering::Relaxed),
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            context,
            generation: context.generation(),
            flavor,
            flags,
            priority,
            retired: AtomicBool::new(false),
            queue: Mutex::default(),
            work: Condvar::new(),
            completed: Mutex::new(0),
            advanced: Condvar::new(),
        });
        let worker = Arc::clone(&stream);
        std::thread::Builder::new()
            .name(format!("devbuf-cuda-test-stream-{:#x}", stream.handle))
            .spawn(move || worker.run())
            .expect("devbuf CUDA test driver: cannot start a stream's worker thread");
        STREAMS.lock().push(Arc::clone(&stream));
        stream
    }

    fn is_blocking(&self) -> bool {
        matches!(self.flavor, Flavor::Blocking | Flavor::PerThread)
    }

    pub fn completed(&self) -> u64 {
        *self.completed.lock()
    }

    /// The number of the last operation enqueued so far.
    pub fn enqueued(&self) -> u64 {
        self.queue.lock().enqueued
    }

    pub fn wait_for(&self, sequence: u64) {
        let mut completed = self.completed.lock();
        while *completed < sequence {
            self.advanced.wait(&mut completed);
        }
    }

    /// Blocks until everything enqueued so far has completed.
    pub fn drain(&self) {
        self.wait_for(self.enqueued());
    }

    /// The point a stream's next operation must wait for so that it follows all of this
    /// stream's work so far; `None` when there is nothing to wait for.
    pub fn tail(self: &Arc<Self>) -> Option<Dependency> {
        let sequence = self.enqueued();
        (self.completed() < sequence).then(|| Dependency {
            stream: Arc::clone(self),
            sequence,
        })
    }

    /// Appends `op`, to run once `after` are met and this stream's earlier work is done, and
    /// returns its number (an event recorded now completes with it).
    pub fn enqueue(self: &Arc<Self>, op: Op, mut after: Vec<Dependency>) -> u64 {
        after.extend(self.implicit_dependencies());
        let mut queue = self.queue.lock();
        queue.enqueued += 1;
        let sequence = queue.enqueued;
        queue.waiting.push_back(Queued {
            sequence,
            op,
            after,
        });
        self.work.notify_one();
        sequence
    }

    /// The legacy default stream's implicit synchronization with blocking streams.
    fn implicit_dependencies(self: &Arc<Self>) -> Vec<Dependency> {
        if self.flavor == Flavor::NonBlocking {
            return vec![];
        }
        let others: Vec<Arc<Stream>> = STREAMS
            .lock()
            .iter()
            .filter(|other| {
                std::ptr::eq(other.context, self.context)
                    && !Arc::ptr_eq(other, self)
                    && if self.flavor == Flavor::Legacy {
                        other.is_blocking()
                    } else {
                        other.flavor == Flavor::Legacy
                    }
            })
            .cloned()
            .collect();
        others.iter().filter_map(Stream::tail).collect()
    }

    fn run(self: Arc<Self>) {
        loop {
            let queued = {
                let mut queue = self.queue.lock();
                loop {
                    if let Some(queued) = queue.waiting.pop_front() {
                        break queued;
                    }
                    if queue.closed {
                        // Its last work has run: nothing needs to wait for it any more.
                        STREAMS.lock().retain(|other| !Arc::ptr_eq(other, &self));
                        return;
                    }
                    self.work.wait(&mut queue);
                }
            };
            for dependency in &queued.after {
                dependency.wait();
            }
            execute(self.context, queued.op);
            let mut completed = self.completed.lock();
            *completed = queued.sequence;
            self.advanced.notify_all();
        }
    }

    /// No more work: the worker finishes what is queued and exits.
    fn close(&self) {
        self.queue.lock().closed = true;
        self.work.notify_all();
    }
}

thread_local! {
    /// The calling thread's per-thread default streams, one per context; closed when the thread
    /// exits.
    static PER_THREAD_STREAMS: RefCell<PerThreadStreams> = RefCell::default();
}

#[derive(Default)]
struct PerThreadStreams(Vec<Arc<Stream>>);

impl Drop for PerThreadStreams {
    fn drop(&mut self) {
        for stream in self.0.drain(..) {
            retire(&stream);
        }
    }
}

/// Destroys a stream: its handle stops naming it at once, but it stays among its context's
/// streams until its worker has run what was queued. cuStreamDestroy: "In case the device is still
/// doing work in the stream hStream when cuStreamDestroy() is called, the function will return
/// immediately and the resources associated with hStream will be released automatically once the
/// device has completed all work in hStream"; that work is still "preceding requested tasks" that
/// cuCtxSynchronize "blocks until the device has completed", and still work of a blocking stream
/// that the legacy default stream waits for.
fn retire(stream: &Arc<Stream>) {
    stream.retired.store(true, Ordering::Release);
    stream.close();
}

fn default_stream(context: &'static Context, flavor: Flavor) -> Arc<Stream> {
    let generation = context.generation();
    let current = |stream: &Arc<Stream>| {
        std::ptr::eq(stream.context, context)
            && stream.generation == generation
            && stream.flavor == flavor
            && !stream.retired.load(Ordering::Acquire)
    };
    if flavor == Flavor::PerThread {
        return PER_THREAD_STREAMS.with(|streams| {
            let mut streams = streams.borrow_mut();
            if let Some(stream) = streams.0.iter().find(|stream| current(stream)) {
                return Arc::clone(stream);
            }
            let stream = Stream::start(context, flavor, 0, 0);
            streams.0.push(Arc::clone(&stream));
            stream
        });
    }
    let mut streams = STREAMS.lock();
    if let Some(stream) = streams.iter().find(|stream| current(stream)) {
        return Arc::clone(stream);
    }
    drop(streams);
    let stream = Stream::start(context, flavor, 0, 0);
    // Another thread may have started one meanwhile: keep the first.
    streams = STREAMS.lock();
    let first = streams.iter().find(|other| current(other)).cloned();
    drop(streams);
    match first {
        Some(first) if !Arc::ptr_eq(&first, &stream) => {
            retire(&stream);
            first
        }
        _ => stream,
    }
}

/// `context`'s legacy default stream, for work that must be ordered with it from another
/// context (a synchronous copy between devices); `None` when the context is not alive.
pub(crate) fn legacy_of(context: &'static Context) -> Option<Arc<Stream>> {
    context
        .is_active()
        .then(|| default_stream(context, Flavor::Legacy))
}

/// The stream a handle names, in a usable context: 0 and 1 are the current context's legacy
/// stream, 2 its per-thread stream.
pub(crate) fn resolve(handle: CUstream) -> DriverResult<Arc<Stream>> {
    resolve_as(handle, NullStream::Legacy)
}

/// [`resolve`], with 0 meaning what `null` says.
pub(crate) fn resolve_as(handle: CUstream, null: NullStream) -> DriverResult<Arc<Stream>> {
    let stream = match (handle as usize, null) {
        (0, NullStream::Legacy) | (LEGACY, _) => {
            default_stream(context::current()?, Flavor::Legacy)
        }
        (0, NullStream::PerThread) | (PER_THREAD, _) => {
            default_stream(context::current()?, Flavor::PerThread)
        }
        (handle, _) => STREAMS
            .lock()
            .iter()
            .find(|stream| {
                stream.handle == handle
                    && stream.flavor != Flavor::PerThread
                    && !stream.retired.load(Ordering::Acquire)
            })
            .cloned()
            .ok_or(CUresult::CUDA_ERROR_INVALID_HANDLE)?,
    };
    if stream.generation != stream.context.generation() {
        return Err(CUresult::CUDA_ERROR_INVALID_HANDLE);
    }
    stream.context.usable()?;
    Ok(stream)
}

/// Waits for every stream of `context`.
pub(crate) fn synchronize_context(context: &Context) {
    let streams: Vec<Arc<Stream>> = STREAMS
        .lock()
        .iter()
        .filter(|stream| std::ptr::eq(stream.context, context))
        .cloned()
        .collect();
    for stream in streams {
        stream.drain();
    }
}

/// Drains and closes every stream of a context that is being destroyed.
pub(crate) fn destroy_context_streams(context: &Context) {
    synchronize_context(context);
    let streams: Vec<Arc<Stream>> = STREAMS
        .lock()
        .iter()
        .filter(|stream| std::ptr::eq(stream.context, context))
        .cloned()
        .collect();
    for stream in streams {
        retire(&stream);
    }
}

/// The range of stream priorities, [greatest, least]: a GPU's (Hopper's is [-5, 0]).
pub(crate) const GREATEST_PRIORITY: i32 = -5;
pub(crate) const LEAST_PRIORITY: i32 = 0;

fn create(stream: *mut CUstream, flags: u32, priority: i32) -> CUresult {
    entry("cuStreamCreate", || {
        if flags & !NON_BLOCKING != 0 {
            return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
        }
        let context = context::current()?;
        let flavor = if flags & NON_BLOCKING != 0 {
            Flavor::NonBlocking
        } else {
            Flavor::Blocking
        };
        if stream.is_null() {
            return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
        }
        // "If the specified priority is outside the numerical range returned by
        // cuCtxGetStreamPriorityRange, it will automatically be clamped to the lowest or the
        // highest number in the range."
        let priority = priority.clamp(GREATEST_PRIORITY, LEAST_PRIORITY);
        let created = Stream::start(context, flavor, flags, priority);
        // SAFETY: the caller's out-pointer, checked non-null.
        unsafe { write_out(stream, created.handle as CUstream) }
    })
}

/// # Safety
/// `stream` is null or valid for writing a CUstream.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuStreamCreate(stream: *mut CUstream, flags: u32) -> CUresult {
    create(stream, flags, 0)
}

/// Priorities are kept (`cuStreamGetPriority`), not acted on: the double runs every stream at
/// its own pace, which the documentation allows ("Priorities provide a hint ... but do not
/// preempt already-running work or provide any other functional guarantee on execution order").
///
/// # Safety
/// `stream` is null or valid for writing a CUstream.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuStreamCreateWithPriority(
    stream: *mut CUstream,
    flags: u32,
    priority: i32,
) -> CUresult {
    create(stream, flags, priority)
}

fn destroy(handle: CUstream) -> CUresult {
    entry("cuStreamDestroy", || {
        if (handle as usize) <= PER_THREAD {
            return Err(CUresult::CUDA_ERROR_INVALID_HANDLE);
        }
        // The worker finishes the work already queued, then exits: the documented behaviour.
        retire(&resolve(handle)?);
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn cuStreamDestroy_v2(stream: CUstream) -> CUresult {
    destroy(stream)
}

#[unsafe(no_mangle)]
pub extern "C" fn cuStreamDestroy(stream: CUstream) -> CUresult {
    destroy(stream)
}
