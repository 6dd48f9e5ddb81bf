//! Copies of scattered byte runs between two [`Buffer`]s: what a copy between arrays of
//! different layouts moves (a strided slice, a transpose), and nothing else. One runtime copy per
//! run, all on one queue and waited for once; a memory copy per run on the host when both sides
//! are the host's own memory; staged through the host, run by run, when no queue reaches both
//! sides.

use std::sync::Arc;

use super::Buffer;
use super::ordering::{Access, record_enqueued};
use super::transfer::{Reach, check_reaches, copying_queue};
use crate::{Error, Event, Queue, Result};

/// `len`-byte runs to copy: each `(destination offset, source offset)`, relative to the start
/// of each view.
#[derive(Debug, Clone, Copy)]
pub struct Runs<'a> {
    /// Bytes per run.
    pub len: usize,
    /// Where each run starts in the destination and in the source.
    pub starts: &'a [(usize, usize)],
}

impl Runs<'_> {
    /// Checks that every run lies inside both views, and that the runs of one allocation do not
    /// meet (compared by their spans: disjoint interleaved runs are refused too).
    fn check(&self, dst: &Buffer, src: &Buffer) -> Result<()> {
        let span = |pick: fn(&(usize, usize)) -> usize| {
            let low = self.starts.iter().map(pick).min().unwrap_or(0);
            let last = self.starts.iter().map(pick).max().unwrap_or(0);
            // A run that would end past the address space ends past any view.
            (low, last.saturating_add(self.len))
        };
        let (dst_span, src_span) = (span(|r| r.0), span(|r| r.1));
        for (side, view, (_, end)) in [("destination", dst, dst_span), ("source", src, src_span)] {
            if end > view.len {
                return Err(Error::invalid(
                    "src",
                    format!(
                        "a run ends at byte {end}, past the {side}'s {} bytes",
                        view.len
                    ),
                ));
            }
        }
        // Inside the views (checked above), so inside their allocations: no sum wraps.
        let (dst_low, dst_high) = (
            dst.offset.saturating_add(dst_span.0),
            dst.offset.saturating_add(dst_span.1),
        );
        let (src_low, src_high) = (
            src.offset.saturating_add(src_span.0),
            src.offset.saturating_add(src_span.1),
        );
        if dst.same_allocation(src) && dst_low < src_high && src_low < dst_high {
            return Err(Error::invalid(
                "src",
                "source and destination share bytes of one allocation; copy the source first",
            ));
        }
        Ok(())
    }
}

impl Buffer {
    /// Copies `runs` of `src` into this view and waits: on a queue that reaches both sides, or
    /// staged through host memory when none does (only the runs' bytes move either way).
    pub fn copy_runs_from(&self, src: &Buffer, runs: Runs<'_>) -> Result<()> {
        self.check_writable()?;
        runs.check(self, src)?;
        if runs.len == 0 || runs.starts.is_empty() {
            return Ok(());
        }
        if self.is_host_resident() && src.is_host_resident() {
            return self.copy_runs_on_host(src, runs);
        }
        let Some(queue) = copying_queue(self, src) else {
            return self.copy_runs_staged(src, runs);
        };
        self.order_on(queue)?;
        src.order_on(queue)?;
        for &(to, from) in runs.starts {
            // SAFETY: both runs lie inside their views (checked), which we hold; the queue
            // reaches both and we wait for it before returning.
            unsafe { queue.copy(self.ptr().add(to), src.ptr().add(from), runs.len)? };
        }
        self.finish_on(queue, &[src])
    }

    /// Enqueues copies of `runs` of `src` into this view on `queue` (which must reach both) and
    /// returns without waiting; the work is recorded as [`Buffer::enqueue_copy_from`]'s is.
    pub fn enqueue_copy_runs_from(
        &self,
        src: &Buffer,
        runs: Runs<'_>,
        queue: &Arc<dyn Queue>,
    ) -> Result<Event> {
        self.check_writable()?;
        runs.check(self, src)?;
        for side in [self, src] {
            check_reaches(queue, side, Reach::Copy)?;
        }
        self.order_on(queue)?;
        src.order_on(queue)?;
        if runs.len > 0 {
            for &(to, from) in runs.starts {
                // SAFETY: the runs lie inside their views (checked) and `queue` reaches both;
                // both allocations record the work and outlive it.
                unsafe { queue.copy(self.ptr().add(to), src.ptr().add(from), runs.len)? };
            }
        }
        let source = (!self.same_allocation(src)).then(|| src.clone());
        record_enqueued(queue, &[self, src], source)
    }

    /// [`Buffer::copy_runs_from`] between two views of the host's own memory
    /// ([`Buffer::is_host_resident`]): the host waits for the work that may still touch either
    /// (the ordering invariant's host access, as a host view's), then copies run by run, a memory
    /// copy a run where a runtime command a run costs microseconds each.
    fn copy_runs_on_host(&self, src: &Buffer, runs: Runs<'_>) -> Result<()> {
        src.order_access(Access::Host)?;
        self.order_access(Access::Host)?;
        for &(to, from) in runs.starts {
            // SAFETY: host-resident memory is host-accessible; both runs lie inside their views
            // (checked), which we hold, and no work is left on either (waited for above).
            unsafe { std::ptr::copy(src.ptr().add(from), self.ptr().add(to), runs.len) };
        }
        Ok(())
    }

    /// [`Buffer::copy_runs_from`] between queues that cannot reach each other's memory: the
    /// runs gathered into host memory on the source's queue, then scattered on this one's.
    fn copy_runs_staged(&self, src: &Buffer, runs: Runs<'_>) -> Result<()> {
        let bytes = runs.len.checked_mul(runs.starts.len()).ok_or_else(|| {
            Error::invalid(
                "src",
                format!(
                    "{} runs of {} bytes are more than the address space holds",
                    runs.starts.len(),
                    runs.len
                ),
            )
        })?;
        let mut staged = vec![0u8; bytes];
        let result = (|| {
            let queue = src.queue();
            src.order_on(queue)?;
            for (chunk, &(_, from)) in staged.chunks_exact_mut(runs.len).zip(runs.starts) {
                // SAFETY: the run lies inside the source view, the chunk is ours; waited below.
                unsafe { queue.copy(chunk.as_mut_ptr(), src.ptr().add(from), runs.len)? };
            }
            src.finish_on(queue, &[])?;
            let queue = self.queue();
            self.order_on(queue)?;
            for (chunk, &(to, _)) in staged.chunks_exact(runs.len).zip(runs.starts) {
                // SAFETY: the run lies inside this view, the chunk is ours; waited below.
                unsafe { queue.copy(self.ptr().add(to), chunk.as_ptr(), runs.len)? };
            }
            self.finish_on(queue, &[])
        })();
        if result.is_err() {
            // A copy may still be reading or writing the staging bytes.
            std::mem::forget(staged);
        }
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{HostQueue, MemKind};

    #[test]
    fn only_the_runs_move_and_overlaps_are_refused() {
        let home: Arc<dyn Queue> = Arc::new(HostQueue::new());
        let src = Buffer::alloc(&home, MemKind::Device, 16).unwrap();
        src.copy_from_host(&(0..16).collect::<Vec<u8>>()).unwrap();
        let dst = Buffer::alloc(&home, MemKind::Host, 6).unwrap();
        dst.fill(0xff).unwrap();
        let starts = [(0, 14), (2, 7), (4, 0)];
        dst.copy_runs_from(
            &src,
            Runs {
                len: 2,
                starts: &starts,
            },
        )
        .unwrap();
        assert_eq!(dst.to_vec().unwrap(), [14, 15, 7, 8, 0, 1]);
        let err = dst
            .copy_runs_from(
                &src,
                Runs {
                    len: 3,
                    starts: &[(4, 0)],
                },
            )
            .unwrap_err();
        assert!(
            err.to_string().contains("past the destination's 6 bytes"),
            "{err}"
        );
        let err = src
            .slice(0..8)
            .unwrap()
            .copy_runs_from(
                &src.slice(4..16).unwrap(),
                Runs {
                    len: 1,
                    starts: &[(6, 2)],
                },
            )
            .unwrap_err();
        assert!(err.to_string().contains("share bytes"), "{err}");
    }
}
