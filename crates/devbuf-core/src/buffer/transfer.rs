//! Copies and fills of a [`Buffer`]: enqueued on a queue that reaches both ends, ordered after
//! the work pending on them, and recorded as pending work in turn.

use std::sync::Arc;

use super::Buffer;
use super::ordering::record_enqueued;
use crate::{Error, Event, MemKind, Queue, Result};

impl Buffer {
    /// Copies all of `src` into this view (same length) and waits for the copy. Works across
    /// kinds, queues and backends: the copy runs on whichever queue reaches both sides, or is
    /// staged through host memory when none does.
    ///
    /// ```
    /// use devbuf_core::{Backend, Buffer, HostBackend, MemKind};
    ///
    /// let queue = HostBackend.open("")?;
    /// let src = Buffer::alloc(&queue, MemKind::Host, 8)?;
    /// src.copy_from_host(b"devbuf!!")?;
    /// let dst = Buffer::alloc(&queue, MemKind::Device, 8)?;
    /// dst.copy_from(&src)?;
    /// let mut back = [0; 8];
    /// dst.copy_to_host(&mut back)?;
    /// assert_eq!(&back, b"devbuf!!");
    ///
    /// // Lengths must match: a view of the right size is a slice.
    /// assert!(dst.copy_from(&src.slice(0..4)?).is_err());
    /// dst.slice(4..8)?.copy_from(&src.slice(0..4)?)?;
    /// assert_eq!(dst.to_vec()?, b"devbdevb");
    /// # Ok::<(), devbuf_core::Error>(())
    /// ```
    pub fn copy_from(&self, src: &Buffer) -> Result<()> {
        self.check_writable()?;
        self.check_copy_source(src.len, || {
            self.same_allocation(src) && ranges_overlap(self, src)
        })?;
        if self.len == 0 {
            return Ok(());
        }
        let Some(queue) = copying_queue(self, src) else {
            let staged = src.to_vec()?;
            return self.copy_from_host(&staged).inspect_err(|_| {
                // The copy may still be reading the staging bytes.
                std::mem::forget(staged);
            });
        };
        self.order_on(queue)?;
        src.order_on(queue)?;
        // SAFETY: both views are alive (we hold them), in range and disjoint, the queue reaches
        // both, and we wait for the copy before returning.
        unsafe { queue.copy(self.ptr(), src.ptr(), self.len)? };
        self.finish_on(queue, &[src])
    }

    /// Enqueues a copy of `src` into this view on `queue` (which must reach both), ordered after
    /// pending work on both allocations, and returns without waiting. The work is recorded on both
    /// allocations: they stay alive until it completes (this one holds `src`, so that dropping
    /// `src` meanwhile does not wait), and [`Buffer::sync_queue`] reports it.
    pub fn enqueue_copy_from(&self, src: &Buffer, queue: &Arc<dyn Queue>) -> Result<Event> {
        self.check_writable()?;
        self.check_copy_source(src.len, || {
            self.same_allocation(src) && ranges_overlap(self, src)
        })?;
        for side in [self, src] {
            check_reaches(queue, side, Reach::Copy)?;
        }
        self.order_on(queue)?;
        src.order_on(queue)?;
        if self.len > 0 {
            // SAFETY: both views are in range, disjoint and reachable by `queue`; both
            // allocations record the work and outlive it (Allocation::drop waits for it).
            unsafe { queue.copy(self.ptr(), src.ptr(), self.len)? };
        }
        let source = (!self.same_allocation(src)).then(|| src.clone());
        record_enqueued(queue, &[self, src], source)
    }

    /// Copies `src` (host memory, same length) into this view and waits for the copy.
    pub fn copy_from_host(&self, src: &[u8]) -> Result<()> {
        self.check_writable()?;
        self.check_copy_source(src.len(), || false)?;
        if self.len == 0 {
            return Ok(());
        }
        let queue = self.queue();
        self.order_on(queue)?;
        // SAFETY: `src` is borrowed host memory and the view is alive; we wait before returning,
        // so `src` outlives the copy.
        unsafe { queue.copy(self.ptr(), src.as_ptr(), self.len)? };
        self.finish_on(queue, &[])
    }

    /// Copies this view into `dst` (host memory, same length) and waits for the copy.
    pub fn copy_to_host(&self, dst: &mut [u8]) -> Result<()> {
        if dst.len() != self.len {
            return Err(Error::invalid(
                "nbytes",
                format!(
                    "destination has {} bytes, source has {}",
                    dst.len(),
                    self.len
                ),
            ));
        }
        if self.len == 0 {
            return Ok(());
        }
        let queue = self.queue();
        self.order_on(queue)?;
        // SAFETY: `dst` is exclusively borrowed host memory; we wait before returning.
        unsafe { queue.copy(dst.as_mut_ptr(), self.ptr(), self.len)? };
        self.finish_on(queue, &[])
    }

    /// The bytes of this view, copied to a new host vector.
    pub fn to_vec(&self) -> Result<Vec<u8>> {
        let mut bytes = vec![0; self.len];
        match self.copy_to_host(&mut bytes) {
            Ok(()) => Ok(bytes),
            Err(err) => {
                // The copy may still be writing into the vector.
                std::mem::forget(bytes);
                Err(err)
            }
        }
    }

    /// Sets every byte of this view to `byte` and waits.
    pub fn fill(&self, byte: u8) -> Result<()> {
        self.check_writable()?;
        if self.len == 0 {
            return Ok(());
        }
        let queue = self.queue();
        self.order_on(queue)?;
        // SAFETY: the view is alive and in range; we wait before returning.
        unsafe { queue.fill(self.ptr(), byte, self.len)? };
        self.finish_on(queue, &[])
    }

    /// Enqueues setting this view to `byte` on its own queue and returns without waiting; the
    /// work is recorded like [`Buffer::enqueue_copy_from`]'s.
    pub fn enqueue_fill(&self, byte: u8) -> Result<Event> {
        self.check_writable()?;
        let queue = self.queue();
        self.order_on(queue)?;
        if self.len > 0 {
            // SAFETY: the view is in range; the allocation records the work and outlives it.
            unsafe { queue.fill(self.ptr(), byte, self.len)? };
        }
        record_enqueued(queue, &[self], None)
    }

    pub(super) fn check_writable(&self) -> Result<()> {
        if self.alloc.read_only {
            return Err(Error::invalid(
                "buffer",
                format!(
                    "the {} bytes at {:p} are read-only (mapped for reading only)",
                    self.len,
                    self.ptr()
                ),
            ));
        }
        Ok(())
    }

    fn check_copy_source(&self, src_len: usize, overlaps: impl FnOnce() -> bool) -> Result<()> {
        if src_len != self.len {
            return Err(Error::invalid(
                "nbytes",
                format!("source has {src_len} bytes, destination has {}", self.len),
            ));
        }
        if overlaps() {
            return Err(Error::invalid(
                "src",
                "source and destination views overlap",
            ));
        }
        Ok(())
    }
}

/// Whether `queue` can address `buffer` in a copy: its own memory, memory its context knows, or
/// memory the host can dereference (which every runtime's copy treats as host memory).
/// The queue a copy from `src` into `dst` runs on: `dst`'s where it reaches `src`, else `src`'s
/// where it reaches `dst`; `None` where neither does (the copy is staged through the host).
pub(super) fn copying_queue<'a>(dst: &'a Buffer, src: &'a Buffer) -> Option<&'a Arc<dyn Queue>> {
    let (dst_queue, src_queue) = (dst.queue(), src.queue());
    if reaches(dst_queue, src) {
        Some(dst_queue)
    } else if reaches(src_queue, dst) {
        Some(src_queue)
    } else {
        None
    }
}

pub(super) fn reaches(queue: &Arc<dyn Queue>, buffer: &Buffer) -> bool {
    // No bytes to reach (and perhaps a null pointer, which no runtime is asked about).
    buffer.is_empty()
        || Arc::ptr_eq(queue, buffer.queue())
        || buffer.is_host_accessible()
        || queue.kind_of(buffer.ptr()) != MemKind::Unknown
        || queue.copies_reach(buffer.ptr())
}

/// Whether `queue` is of the device (and so of the backend) whose memory `buffer` is.
fn on_own_device(queue: &Arc<dyn Queue>, buffer: &Buffer) -> bool {
    Arc::ptr_eq(queue, buffer.queue())
        || queue.device().selector == buffer.queue().device().selector
}

/// Whether `queue` can fill `buffer`: a device runtime's fill takes only memory it knows, so host
/// memory of another runtime is filled only by a queue that reaches any host memory
/// ([`Queue::reaches_any_host_memory`]).
fn fills(queue: &Arc<dyn Queue>, buffer: &Buffer) -> bool {
    // No bytes to reach (and perhaps a null pointer, which no runtime is asked about).
    buffer.is_empty()
        || Arc::ptr_eq(queue, buffer.queue())
        || queue.kind_of(buffer.ptr()) != MemKind::Unknown
        || (queue.reaches_any_host_memory() && buffer.is_host_accessible())
}

/// What a queue is asked to do with a buffer it did not make.
#[derive(Clone, Copy)]
pub(super) enum Reach {
    Fill,
    Copy,
    CopyToHost,
    Prefetch,
}

/// Whether `queue` can do `access` on `buffer`; if not, an error saying which memory it is and
/// which stream can (key "stream": the argument Python's and the protocols' callers pass it as).
pub(super) fn check_reaches(queue: &Arc<dyn Queue>, buffer: &Buffer, access: Reach) -> Result<()> {
    let (reached, what) = match access {
        Reach::Fill => (fills(queue, buffer), "a fill"),
        Reach::Copy => (reaches(queue, buffer), "a copy"),
        Reach::CopyToHost => (reaches(queue, buffer), "a copy to the host"),
        // A prefetch hands the memory to the runtime's own migration (`cuMemPrefetchAsync`, SYCL's
        // `prefetch`): only a stream of the buffer's own backend and device may run it, not one
        // that merely reaches the bytes as host memory.
        Reach::Prefetch => (on_own_device(queue, buffer), "a prefetch"),
    };
    if reached {
        return Ok(());
    }
    let own = &buffer.queue().device().selector;
    Err(Error::invalid(
        "stream",
        format!(
            "a stream of {:?} cannot reach the {} bytes of {} memory on {own:?} for {what}; pass a \
             stream of {own:?}, or none",
            queue.device().selector,
            buffer.len(),
            buffer.kind(),
        ),
    ))
}

fn ranges_overlap(a: &Buffer, b: &Buffer) -> bool {
    // Views of one allocation: their ends lie inside it, so neither sum wraps.
    a.offset < b.offset.saturating_add(b.len) && b.offset < a.offset.saturating_add(a.len)
}
