//! [`StatisticsResource`]: counts bytes and allocations, overall and in nested regions.

use std::ptr::NonNull;
use std::sync::Arc;

use parking_lot::Mutex;

use super::{Adaptor, MemoryResource};
use crate::MemKind;

/// Counters of one statistics region (RMM's `Statistics`). Signed, as RMM's: a region counts
/// the frees of memory allocated before it began too, so its `current_*` go below zero when it
/// frees more than it allocated (the whole run's never do).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Statistics {
    /// Bytes allocated less bytes freed.
    pub current_bytes: i64,
    /// The most `current_bytes` has been (0 at least: the region's start).
    pub peak_bytes: i64,
    /// Bytes allocated in all.
    pub total_bytes: i64,
    /// Allocations made less allocations freed.
    pub current_count: i64,
    /// The most `current_count` has been (0 at least).
    pub peak_count: i64,
    /// Allocations made in all.
    pub total_count: i64,
}

impl Statistics {
    fn allocated(&mut self, size: i64) {
        // Totals over a long run may pass what an `i64` holds: they stop at its largest value.
        self.current_bytes = self.current_bytes.saturating_add(size);
        self.peak_bytes = self.peak_bytes.max(self.current_bytes);
        self.total_bytes = self.total_bytes.saturating_add(size);
        self.current_count = self.current_count.saturating_add(1);
        self.peak_count = self.peak_count.max(self.current_count);
        self.total_count = self.total_count.saturating_add(1);
    }

    fn freed(&mut self, size: i64) {
        self.current_bytes = self.current_bytes.saturating_sub(size);
        self.current_count = self.current_count.saturating_sub(1);
    }
}

/// An allocation's size as the counters count it: no allocation reaches `isize::MAX` bytes.
fn counted(size: usize) -> i64 {
    i64::try_from(size).unwrap_or(i64::MAX)
}

/// Counts what passes through it to `upstream`. Regions ([`StatisticsResource::push_region`])
/// count from their start, like RMM's `statistics()` context manager; the outermost counts all.
#[derive(Debug)]
pub struct StatisticsResource {
    upstream: Arc<dyn MemoryResource>,
    /// The whole run first, then the open regions, innermost last.
    regions: Mutex<Vec<Statistics>>,
}

impl StatisticsResource {
    /// Counts the allocations made through it from `upstream`.
    pub fn new(upstream: Arc<dyn MemoryResource>) -> Arc<Self> {
        Arc::new(StatisticsResource {
            upstream,
            regions: Mutex::new(vec![Statistics::default()]),
        })
    }

    /// The counters since this adaptor was made.
    pub fn statistics(&self) -> Statistics {
        self.regions.lock()[0]
    }

    /// The counters of the innermost open region (of the whole run when none is open).
    pub fn region_statistics(&self) -> Statistics {
        *self
            .regions
            .lock()
            .last()
            .expect("the whole run is always there")
    }

    /// Opens a region that counts from now on.
    pub fn push_region(&self) {
        self.regions.lock().push(Statistics::default());
    }

    /// Closes the innermost region and returns its counters (`None` when none is open).
    pub fn pop_region(&self) -> Option<Statistics> {
        let mut regions = self.regions.lock();
        (regions.len() > 1).then(|| regions.pop()).flatten()
    }
}

impl Adaptor for StatisticsResource {
    fn upstream(&self) -> &Arc<dyn MemoryResource> {
        &self.upstream
    }

    fn allocated(&self, ptr: Option<NonNull<u8>>, _kind: MemKind, size: usize, _align: usize) {
        if ptr.is_some() {
            self.regions
                .lock()
                .iter_mut()
                .for_each(|region| region.allocated(counted(size)));
        }
    }

    fn freed(&self, _ptr: NonNull<u8>, _kind: MemKind, size: usize, _align: usize) {
        self.regions
            .lock()
            .iter_mut()
            .for_each(|region| region.freed(counted(size)));
    }
}
