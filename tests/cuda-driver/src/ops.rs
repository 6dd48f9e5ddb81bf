//! The operations a stream runs, and what running one checks: memory a copy or fill touches must
//! be allocated, in stream order, when the operation runs; otherwise it is an illegal address.

use std::ffi::c_void;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use cudarc::driver::sys::{CUresult, CUstream};
use parking_lot::{Mutex, RwLockReadGuard};

use crate::config::config;
use crate::context::Context;
use crate::device::run_host_function;
use crate::memory::{self, Record, State};

/// Memory an operation reads or writes.
pub(crate) enum Place {
    /// Memory the driver allocated. Counts as pending work on the record until dropped.
    Memory {
        record: Arc<Record>,
        offset: usize,
        /// The operation was enqueued after its memory's `cuMemFreeAsync`: nothing can order it
        /// before that free, so running it is a use-after-free.
        after_free: bool,
        /// A synchronous call (`cuMemcpyHtoD`, `cuMemsetD8`, ...) enqueued it.
        synchronous: bool,
    },
    /// Pageable host memory; the enqueuing call waits for the operation, so it stays valid.
    Pageable(usize),
    /// A snapshot of pageable host memory taken when the operation was enqueued.
    Staged(Box<[u8]>),
}

impl Place {
    pub fn memory(record: Arc<Record>, offset: usize, synchronous: bool) -> Place {
        record.pending.fetch_add(1, Ordering::AcqRel);
        if synchronous {
            *record.synchronous.lock() += 1;
        }
        record.storage.begin_device_use();
        let after_free = record.free_requested.load(Ordering::Acquire);
        Place::Memory {
            record,
            offset,
            after_free,
            synchronous,
        }
    }

    /// The record, if this is driver memory.
    pub fn record(&self) -> Option<&Arc<Record>> {
        match self {
            Place::Memory { record, .. } => Some(record),
            _ => None,
        }
    }

    /// The address to touch, with the record's state held so that it cannot be freed meanwhile;
    /// the reason when touching it now is illegal.
    fn open(&self) -> Result<(*mut u8, Option<RwLockReadGuard<'_, State>>), String> {
        match self {
            Place::Memory {
                record,
                offset,
                after_free,
                ..
            } => {
                let state = record.state.read_recursive();
                let address = record.start + *offset as u64;
                let why = match *state {
                    _ if *after_free => "it was enqueued after the memory's cuMemFreeAsync",
                    State::Live => return Ok((record.data(*offset), Some(state))),
                    State::AllocationPending => {
                        "its stream-ordered allocation (cuMemAllocAsync) had not been reached in \
                         stream order yet"
                    }
                    State::Freed => "the memory had been freed",
                };
                Err(format!("{address:#x}: {why}"))
            }
            Place::Pageable(address) => Ok((*address as *mut u8, None)),
            Place::Staged(bytes) => Ok((bytes.as_ptr().cast_mut(), None)),
        }
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        if let Place::Memory {
            record,
            synchronous,
            ..
        } = self
        {
            record.storage.end_device_use();
            record.pending.fetch_sub(1, Ordering::AcqRel);
            if *synchronous {
                *record.synchronous.lock() -= 1;
                record.synchronous_done.notify_all();
            }
        }
    }
}

/// When a stream reached a recorded event (the operation [`Op::Mark`]).
#[derive(Default)]
pub(crate) struct Mark {
    reached: Mutex<Option<Instant>>,
}

impl Mark {
    pub fn reach(&self) {
        self.reached.lock().get_or_insert_with(Instant::now);
    }

    /// When the stream reached it; `None` until then.
    pub fn reached(&self) -> Option<Instant> {
        *self.reached.lock()
    }
}

/// A host function and its argument (`cuLaunchHostFunc`).
pub(crate) struct HostFunction {
    pub function: unsafe extern "C" fn(*mut c_void),
    pub data: usize,
}

/// A stream callback and its argument (`cuStreamAddCallback`).
pub(crate) struct Callback {
    pub function: unsafe extern "C" fn(CUstream, CUresult, *mut c_void),
    pub stream: usize,
    pub data: usize,
}

pub(crate) enum Op {
    Copy {
        operation: &'static str,
        destination: Place,
        source: Place,
        len: usize,
    },
    /// `height` rows of `width` bytes, row `i` from `source + i * source_pitch` to
    /// `destination + i * destination_pitch` (`cuMemcpy2DAsync`).
    Copy2D {
        operation: &'static str,
        destination: Place,
        source: Place,
        width: usize,
        height: usize,
        destination_pitch: usize,
        source_pitch: usize,
    },
    Fill {
        operation: &'static str,
        destination: Place,
        /// The value in its width's bytes, little-endian.
        value: u32,
        width: usize,
        count: usize,
    },
    /// An operation that reads nothing and writes nothing but needs its memory allocated when it
    /// runs (`cuMemPrefetchAsync`).
    Touch {
        operation: &'static str,
        place: Place,
    },
    /// An event's point in the stream.
    Mark(Arc<Mark>),
    HostFunction(HostFunction),
    Callback(Callback),
    /// A stream-ordered allocation becomes usable here.
    Allocate(Arc<Record>),
    /// A stream-ordered free happens here.
    Free(Arc<Record>),
    /// Nothing but the operation's dependencies (`cuStreamWaitEvent`).
    Wait,
}

/// Runs one operation on the stream's worker. After a fault in the context nothing runs but the
/// bookkeeping (events complete, callbacks hear the error), as on a GPU.
pub(crate) fn execute(context: &Context, op: Op) {
    let sticky = context.sticky_error();
    match op {
        Op::Mark(mark) => mark.reach(),
        Op::Callback(callback) => {
            let status = sticky.err().unwrap_or(CUresult::CUDA_SUCCESS);
            // SAFETY: the caller of cuStreamAddCallback promised a callable function and data
            // that stay valid until the callback runs.
            run_host_function(|| unsafe {
                (callback.function)(
                    callback.stream as CUstream,
                    status,
                    callback.data as *mut c_void,
                )
            });
        }
        _ if sticky.is_err() => {}
        Op::HostFunction(host) => {
            // SAFETY: the caller of cuLaunchHostFunc promised a callable function and data that
            // stay valid until it runs.
            run_host_function(|| unsafe { (host.function)(host.data as *mut c_void) });
        }
        Op::Allocate(record) => {
            let mut state = record.state.write();
            if *state == State::AllocationPending {
                *state = State::Live;
            }
        }
        Op::Free(record) => {
            // A fault, if any, is reported by the release itself.
            let _ = memory::release(&record, "cuMemFreeAsync", context);
        }
        Op::Wait => {}
        Op::Touch { operation, place } => {
            if let Err(why) = place.open() {
                context.fault(operation, &why);
            }
        }
        Op::Copy {
            operation,
            destination,
            source,
            len,
        } => {
            delay();
            match open_both(&source, &destination) {
                // SAFETY: both ranges are `len` bytes of live memory (checked when enqueued, and
                // held allocated by the state guards); `copy` allows them to overlap.
                Ok(((from, _source), (to, _destination))) => unsafe {
                    std::ptr::copy(from, to, len)
                },
                Err(why) => context.fault(operation, &why),
            }
        }
        Op::Copy2D {
            operation,
            destination,
            source,
            width,
            height,
            destination_pitch,
            source_pitch,
        } => {
            delay();
            match open_both(&source, &destination) {
                Ok(((from, _source), (to, _destination))) => {
                    for row in 0..height {
                        // SAFETY: every row lies in live memory (the spans were checked when
                        // enqueued and the state guards keep them allocated); `copy` allows
                        // overlap, which the documentation leaves undefined.
                        unsafe {
                            std::ptr::copy(
                                from.add(row * source_pitch),
                                to.add(row * destination_pitch),
                                width,
                            )
                        };
                    }
                }
                Err(why) => context.fault(operation, &why),
            }
        }
        Op::Fill {
            operation,
            destination,
            value,
            width,
            count,
        } => {
            delay();
            match destination.open() {
                // SAFETY: the range holds `count` bytes (checked when enqueued) and the state
                // guard keeps it allocated.
                Ok((to, _destination)) if width == 1 => unsafe {
                    std::ptr::write_bytes(to, value as u8, count)
                },
                Ok((to, _destination)) => {
                    let pattern = &value.to_le_bytes()[..width];
                    for element in 0..count {
                        // SAFETY: the range holds `count` elements of `width` bytes (checked when
                        // enqueued) and the state guard keeps it allocated.
                        unsafe {
                            std::ptr::copy_nonoverlapping(
                                pattern.as_ptr(),
                                to.add(element * width),
                                width,
                            )
                        };
                    }
                }
                Err(why) => context.fault(operation, &why),
            }
        }
    }
}

/// A copy's two places opened ([`Place::open`]): the source's, then the destination's.
type Opened<'a> = (*mut u8, Option<RwLockReadGuard<'a, State>>);

fn open_both<'a>(
    source: &'a Place,
    destination: &'a Place,
) -> Result<(Opened<'a>, Opened<'a>), String> {
    Ok((source.open()?, destination.open()?))
}

/// `DEVBUF_CUDA_TEST_DELAY_US`: makes every copy and fill take a while, so that a missing wait
/// reads bytes that are not there yet.
fn delay() {
    let delay = config().delay;
    if !delay.is_zero() {
        std::thread::sleep(delay);
    }
}
