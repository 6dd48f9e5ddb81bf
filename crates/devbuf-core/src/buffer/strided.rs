//! Copies of scattered byte runs between two [`Buffer`]s: what a copy between arrays of
//! different layouts moves (a strided slice, a transpose), and nothing else. Runs a fixed step
//! apart on both sides go to the queue as rows ([`Queue::copy_rows`]: one 2-D copy where the
//! runtime has one, a copy per run where not), all on one queue and waited for once; a memory
//! copy per run on the host when both sides are the host's own memory; staged through the host
//! when no queue reaches both sides.

use std::sync::Arc;

use super::Buffer;
use super::ordering::{Access, record_enqueued};
use super::transfer::{Reach, check_reaches, copying_queue};
use crate::{Error, Event, Queue, Result, Rows};

/// `len`-byte runs to copy: each `(destination offset, source offset)`, relative to the start
/// of each view.
#[derive(Debug, Clone, Copy)]
pub struct Runs<'a> {
    /// Bytes per run.
    pub len: usize,
    /// Where each run starts in the destination and in the source.
    pub starts: &'a [(usize, usize)],
}

/// Where runs start and end on each side: (destination, source), each `(low, end)`.
type Spans = ((usize, usize), (usize, usize));

impl Runs<'_> {
    /// Enqueues the runs from `src` to `dst` on `queue`: each stretch of runs a fixed step apart
    /// on both sides (at least a run's length, forward) as one [`Queue::copy_rows`], any other run
    /// as one [`Queue::copy`].
    ///
    /// # Safety
    /// Every run lies inside memory at `dst` and `src` that `queue` reaches and that stays alive
    /// until the copies complete; the runs of one side do not overlap.
    #[allow(
        clippy::arithmetic_side_effects,
        reason = "offsets of runs inside the views (the caller's), so no sum or step wraps"
    )]
    unsafe fn enqueue(&self, queue: &dyn Queue, dst: *mut u8, src: *const u8) -> Result<()> {
        let starts = self.starts;
        let mut first = 0;
        while let Some(&(to, from)) = starts.get(first) {
            let (mut count, mut dst_pitch, mut src_pitch) = (1, 0, 0);
            if let Some(&(next_to, next_from)) = starts.get(first + 1)
                && next_to >= to + self.len
                && next_from >= from + self.len
            {
                (dst_pitch, src_pitch) = (next_to - to, next_from - from);
                count = 2;
                while starts.get(first + count)
                    == Some(&(to + count * dst_pitch, from + count * src_pitch))
                {
                    count += 1;
                }
            }
            // SAFETY: the caller's; rows a step of at least their length apart do not overlap.
            unsafe {
                if count == 1 {
                    queue.copy(dst.add(to), src.add(from), self.len)?;
                } else {
                    let rows = Rows {
                        width: self.len,
                        count,
                        dst_pitch,
                        src_pitch,
                    };
                    queue.copy_rows(dst.add(to), src.add(from), rows)?;
                }
            }
            first += count;
        }
        Ok(())
    }

    /// Copies the runs from `src` to `dst` on the host, a memory copy each (which allows a run's
    /// two sides to be the same bytes).
    ///
    /// # Safety
    /// Every run lies inside host memory at `dst` and `src` that the host may read and write now,
    /// with no work left on it.
    #[allow(
        clippy::arithmetic_side_effects,
        reason = "offsets of runs inside the views (the caller's)"
    )]
    unsafe fn copy_on_the_host(&self, dst: *mut u8, src: *const u8) {
        for &(to, from) in self.starts {
            // SAFETY: the caller's.
            unsafe { std::ptr::copy(src.add(from), dst.add(to), self.len) };
        }
    }

    /// Where the runs start and end on each side: (destination, source), each `(low, end)`.
    fn spans(&self) -> Spans {
        let span = |pick: fn(&(usize, usize)) -> usize| {
            let low = self.starts.iter().map(pick).min().unwrap_or(0);
            let last = self.starts.iter().map(pick).max().unwrap_or(0);
            // A run that would end past the address space ends past any view.
            (low, last.saturating_add(self.len))
        };
        (span(|r| r.0), span(|r| r.1))
    }

    /// Checks that every run ends inside a destination of `dst_len` bytes and a source of
    /// `src_len`, given the runs' [`Runs::spans`]; returns them.
    fn check_ends(&self, dst_len: usize, src_len: usize) -> Result<Spans> {
        let spans = self.spans();
        let ((_, dst_end), (_, src_end)) = spans;
        for (side, len, end) in [
            ("destination", dst_len, dst_end),
            ("source", src_len, src_end),
        ] {
            if end > len {
                return Err(Error::invalid(
                    "src",
                    format!("a run ends at byte {end}, past the {side}'s {len} bytes"),
                ));
            }
        }
        Ok(spans)
    }

    /// Checks that every run lies inside both views, and that the runs of one allocation do not
    /// meet (compared by their spans: disjoint interleaved runs are refused too).
    fn check(&self, dst: &Buffer, src: &Buffer) -> Result<()> {
        let (dst_span, src_span) = self.check_ends(dst.len, src.len)?;
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
        // SAFETY: the runs lie inside their views (checked), which we hold, and those of one
        // allocation do not meet (checked); the queue reaches both and we wait for it below.
        unsafe { runs.enqueue(queue.as_ref(), self.ptr(), src.ptr())? };
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
            // SAFETY: the runs lie inside their views (checked) and do not meet, and `queue`
            // reaches both; both allocations record the work and outlive it.
            unsafe { runs.enqueue(queue.as_ref(), self.ptr(), src.ptr())? };
        }
        let source = (!self.same_allocation(src)).then(|| src.clone());
        record_enqueued(queue, &[self, src], source)
    }

    /// Copies `runs` of this view into `dst`, host memory the caller holds (the runs' destination
    /// offsets index it), on `queue`, and waits: a gather of a strided view's elements with no
    /// staging copy, as rows where they are ([`Queue::copy_rows`]: one 2-D copy on CUDA). Memory
    /// that is the host's own ([`Buffer::is_host_resident`]) is read on the host, after the host's
    /// wait for the work on it.
    pub fn copy_runs_to_host_on(
        &self,
        dst: &mut [u8],
        runs: Runs<'_>,
        queue: &Arc<dyn Queue>,
    ) -> Result<()> {
        check_reaches(queue, self, Reach::CopyToHost)?;
        runs.check_ends(dst.len(), self.len)?;
        if runs.len == 0 || runs.starts.is_empty() {
            return Ok(());
        }
        if self.is_host_resident() {
            self.order_access(Access::Host)?;
            // SAFETY: the runs lie inside this view (checked), host memory the host may read with
            // no work left on it (waited for above), and inside `dst`, which we borrow (and which
            // may be these very bytes).
            unsafe { runs.copy_on_the_host(dst.as_mut_ptr(), self.ptr()) };
            return Ok(());
        }
        self.order_on(queue)?;
        // SAFETY: the runs lie inside this view and inside `dst` (checked), which we borrow until
        // the copies are waited for below; `queue` reaches both (checked, and host memory).
        unsafe { runs.enqueue(queue.as_ref(), dst.as_mut_ptr(), self.ptr())? };
        self.finish_on(queue, &[])
    }

    /// [`Buffer::copy_runs_from`] between two views of the host's own memory
    /// ([`Buffer::is_host_resident`]): the host waits for the work that may still touch either
    /// (the ordering invariant's host access, as a host view's), then copies run by run, a memory
    /// copy a run where a runtime command a run costs microseconds each.
    fn copy_runs_on_host(&self, src: &Buffer, runs: Runs<'_>) -> Result<()> {
        src.order_access(Access::Host)?;
        self.order_access(Access::Host)?;
        // SAFETY: host-resident memory is host-accessible; the runs lie inside their views
        // (checked), which we hold, and no work is left on either (waited for above).
        unsafe { runs.copy_on_the_host(self.ptr(), src.ptr()) };
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
        // The runs packed one after another in `staged`: gathered there, then scattered.
        let chunks = || (0..).step_by(runs.len);
        let gather: Vec<_> = chunks().zip(runs.starts.iter().map(|run| run.1)).collect();
        let scatter: Vec<_> = runs.starts.iter().map(|run| run.0).zip(chunks()).collect();
        let result = (|| {
            let gather = Runs {
                len: runs.len,
                starts: &gather,
            };
            src.copy_runs_to_host_on(&mut staged, gather, src.queue())?;
            let queue = self.queue();
            self.order_on(queue)?;
            let scatter = Runs {
                len: runs.len,
                starts: &scatter,
            };
            // SAFETY: each run lies inside this view and each chunk inside `staged`; the
            // runs were checked not to meet; waited below.
            unsafe { scatter.enqueue(queue.as_ref(), self.ptr(), staged.as_ptr())? };
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
