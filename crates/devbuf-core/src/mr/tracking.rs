//! [`TrackingResource`]: remembers every live allocation, for a leak report.

use std::backtrace::Backtrace;
use std::collections::HashMap;
use std::fmt::Write;
use std::ptr::NonNull;
use std::sync::Arc;

use parking_lot::Mutex;

use super::{Adaptor, FreeAfter, MemoryResource};
use crate::MemKind;

/// One allocation made through a [`TrackingResource`] and not yet freed.
#[derive(Debug)]
pub struct OutstandingAllocation {
    /// Its address.
    pub ptr: usize,
    /// Its size in bytes.
    pub size: usize,
    /// Its kind.
    pub kind: MemKind,
    /// Where it was allocated, when the resource captures backtraces.
    pub backtrace: Option<Arc<Backtrace>>,
}

/// Size, kind and (optionally) the backtrace of each live allocation, by address.
type LiveAllocations = HashMap<usize, (usize, MemKind, Option<Arc<Backtrace>>)>;

/// Keeps the address, size and kind (and optionally the backtrace) of every allocation made
/// through it until it is freed.
#[derive(Debug)]
pub struct TrackingResource {
    upstream: Arc<dyn MemoryResource>,
    capture_backtraces: bool,
    live: Mutex<LiveAllocations>,
}

impl TrackingResource {
    /// Tracks the allocations made through it from `upstream`; `capture_backtraces` records where
    /// each was made (slow: for hunting leaks).
    pub fn new(upstream: Arc<dyn MemoryResource>, capture_backtraces: bool) -> Arc<Self> {
        Arc::new(TrackingResource {
            upstream,
            capture_backtraces,
            live: Mutex::default(),
        })
    }

    /// The allocations not yet freed, in address order.
    pub fn outstanding(&self) -> Vec<OutstandingAllocation> {
        let mut all: Vec<_> = self
            .live
            .lock()
            .iter()
            .map(|(&ptr, (size, kind, backtrace))| OutstandingAllocation {
                ptr,
                size: *size,
                kind: *kind,
                backtrace: backtrace.clone(),
            })
            .collect();
        all.sort_by_key(|a| a.ptr);
        all
    }

    /// Bytes allocated and not yet freed.
    pub fn outstanding_bytes(&self) -> usize {
        self.live.lock().values().map(|(size, ..)| size).sum()
    }

    /// A leak report: one line per outstanding allocation, each followed by its backtrace when
    /// one was captured.
    pub fn outstanding_report(&self) -> String {
        let outstanding = self.outstanding();
        let mut report = format!(
            "{} outstanding allocations on {}:\n",
            outstanding.len(),
            self.queue().device().selector
        );
        for allocation in outstanding {
            let _ = writeln!(
                report,
                "{:#x}: {} bytes of {} memory",
                allocation.ptr, allocation.size, allocation.kind
            );
            if let Some(backtrace) = allocation.backtrace {
                let _ = writeln!(report, "{backtrace}");
            }
        }
        report
    }
}

impl Adaptor for TrackingResource {
    fn upstream(&self) -> &Arc<dyn MemoryResource> {
        &self.upstream
    }

    fn allocated(&self, ptr: Option<NonNull<u8>>, kind: MemKind, size: usize, _align: usize) {
        let Some(ptr) = ptr else { return };
        let backtrace = self
            .capture_backtraces
            .then(|| Arc::new(Backtrace::force_capture()));
        self.live
            .lock()
            .insert(ptr.as_ptr() as usize, (size, kind, backtrace));
    }

    // Forgotten before upstream has it back: upstream may hand the address out again at once.
    fn freeing(
        &self,
        ptr: NonNull<u8>,
        _kind: MemKind,
        _size: usize,
        _align: usize,
        _after: &FreeAfter,
    ) {
        self.live.lock().remove(&(ptr.as_ptr() as usize));
    }
}
