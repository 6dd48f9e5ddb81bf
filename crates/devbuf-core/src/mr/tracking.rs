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
    /// Where it was allocated in the caller's terms, when the resource has an [`Origin`] (the
    /// Python layer's: the Python file and line).
    pub origin: Option<Arc<str>>,
}

/// Describes where an allocation is being made, in the caller's own terms: a binding gives its
/// language's stack (the Python layer, the Python files and lines), which a Rust backtrace
/// through the binding would bury. Called on every allocation of a resource made with one.
pub type Origin = Arc<dyn Fn() -> Option<String> + Send + Sync>;

/// How a tracking resource records where each allocation was made.
enum Capture {
    Nothing,
    Backtrace,
    Origin(Origin),
}

impl std::fmt::Debug for Capture {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Capture::Nothing => "Nothing",
            Capture::Backtrace => "Backtrace",
            Capture::Origin(_) => "Origin",
        })
    }
}

/// Where a live allocation was made, as captured.
type Place = (Option<Arc<Backtrace>>, Option<Arc<str>>);

/// Size, kind and (optionally) where each live allocation was made, by address.
type LiveAllocations = HashMap<usize, (usize, MemKind, Place)>;

/// Keeps the address, size and kind (and optionally the backtrace) of every allocation made
/// through it until it is freed.
#[derive(Debug)]
pub struct TrackingResource {
    upstream: Arc<dyn MemoryResource>,
    capture: Capture,
    live: Mutex<LiveAllocations>,
}

impl TrackingResource {
    /// Tracks the allocations made through it from `upstream`; `capture_backtraces` records where
    /// each was made (slow: for hunting leaks).
    pub fn new(upstream: Arc<dyn MemoryResource>, capture_backtraces: bool) -> Arc<Self> {
        let capture = match capture_backtraces {
            true => Capture::Backtrace,
            false => Capture::Nothing,
        };
        Arc::new(TrackingResource {
            upstream,
            capture,
            live: Mutex::default(),
        })
    }

    /// Tracks the allocations made through it from `upstream`, each with what `origin` says of
    /// where it was made (instead of a Rust backtrace).
    pub fn with_origin(upstream: Arc<dyn MemoryResource>, origin: Origin) -> Arc<Self> {
        Arc::new(TrackingResource {
            upstream,
            capture: Capture::Origin(origin),
            live: Mutex::default(),
        })
    }

    /// The allocations not yet freed, in address order.
    pub fn outstanding(&self) -> Vec<OutstandingAllocation> {
        let mut all: Vec<_> = self
            .live
            .lock()
            .iter()
            .map(
                |(&ptr, (size, kind, (backtrace, origin)))| OutstandingAllocation {
                    ptr,
                    size: *size,
                    kind: *kind,
                    backtrace: backtrace.clone(),
                    origin: origin.clone(),
                },
            )
            .collect();
        all.sort_by_key(|a| a.ptr);
        all
    }

    /// Bytes allocated and not yet freed.
    pub fn outstanding_bytes(&self) -> usize {
        self.live.lock().values().map(|(size, ..)| size).sum()
    }

    /// A leak report: one line per outstanding allocation, each followed by where it was made
    /// (its [`Origin`]'s words, or its backtrace) when that was captured; empty when nothing is
    /// outstanding (RMM's answer, so that `if report:` asks whether anything leaked).
    pub fn outstanding_report(&self) -> String {
        let outstanding = self.outstanding();
        if outstanding.is_empty() {
            return String::new();
        }
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
            if let Some(origin) = allocation.origin {
                let _ = writeln!(report, "{}", origin.trim_end());
            }
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
        let place = match &self.capture {
            Capture::Nothing => (None, None),
            Capture::Backtrace => (Some(Arc::new(Backtrace::force_capture())), None),
            Capture::Origin(origin) => (None, origin().map(Arc::from)),
        };
        self.live
            .lock()
            .insert(ptr.as_ptr() as usize, (size, kind, place));
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mr::QueueResource;
    use crate::{Buffer, HostQueue};

    #[test]
    fn an_origin_says_where_each_allocation_was_made() {
        let upstream = QueueResource::new(Arc::new(HostQueue::new()));
        let origin: Origin = Arc::new(|| Some("  File \"leak.py\", line 3, in <module>\n".into()));
        let tracking = TrackingResource::with_origin(upstream, origin);
        let resource: Arc<dyn MemoryResource> = tracking.clone();
        let kept = Buffer::alloc_from(&resource, MemKind::Host, 64, 64).unwrap();
        let report = tracking.outstanding_report();
        assert!(
            report.ends_with("bytes of host memory\n  File \"leak.py\", line 3, in <module>\n"),
            "{report}"
        );
        assert!(tracking.outstanding()[0].backtrace.is_none());
        drop(kept);
        assert_eq!(tracking.outstanding_bytes(), 0);
    }
}
