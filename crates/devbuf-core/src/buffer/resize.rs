//! What RMM's `DeviceBuffer` does to change its size, on a [`Buffer`]: the bytes it may grow to
//! in place ([`Buffer::capacity`]), a longer or shorter view of its own allocation
//! ([`Buffer::resized_in_place`]), and a copy of it in a larger allocation from the same resource
//! ([`Buffer::grown`]), stream-ordered through the buffer's own copy path.

use std::sync::Arc;

use super::Buffer;
use super::allocation::Release;
use crate::{Error, Event, Queue, Result};

impl Buffer {
    /// The bytes from this view's start to the end of its allocation: what it may grow to without
    /// new memory. For foreign memory, the end of what its owner gave devbuf (its extent past
    /// that is not devbuf's to know).
    ///
    /// ```
    /// use devbuf_core::{Backend, Buffer, HostBackend, MemKind};
    ///
    /// let queue = HostBackend.open("")?;
    /// let buffer = Buffer::alloc(&queue, MemKind::Host, 100)?;
    /// assert_eq!(buffer.slice(10..20)?.capacity(), 90);
    /// assert_eq!(buffer.resized_in_place(3)?.capacity(), 100);
    /// # Ok::<(), devbuf_core::Error>(())
    /// ```
    pub fn capacity(&self) -> usize {
        match &self.alloc.release {
            Release::Queue { size, .. }
            | Release::Resource { size, .. }
            | Release::Foreign { size, .. } => size.saturating_sub(self.offset).max(self.len),
        }
    }

    /// This view made `len` bytes long, from the same start, within [`Buffer::capacity`]: no
    /// memory is allocated or copied (the bytes past the old end are as the allocation holds them).
    pub fn resized_in_place(&self, len: usize) -> Result<Buffer> {
        if len > self.capacity() {
            return Err(Error::invalid(
                "len",
                format!(
                    "{len} bytes is more than the buffer's capacity, {} bytes",
                    self.capacity()
                ),
            ));
        }
        Ok(Buffer {
            alloc: self.alloc.clone(),
            offset: self.offset,
            len,
        })
    }

    /// A new buffer of `len` bytes (more than [`Buffer::capacity`] or not) of this buffer's kind,
    /// from the resource or queue this buffer's memory came from, holding a copy of this buffer's
    /// first bytes (as many as fit), enqueued on `queue` (default: this buffer's queue) through
    /// [`Buffer::enqueue_copy_from`]: ordered after the work pending on this buffer, and recorded
    /// on both, so that later work on either waits for it. A ValueError-kind error for memory
    /// devbuf did not allocate from a resource or queue, which it cannot allocate more of (an
    /// IPC-shareable allocation grows through [`crate::ipc::grown`]).
    pub fn grown(&self, len: usize, queue: Option<&Arc<dyn Queue>>) -> Result<(Buffer, Event)> {
        let kind = self.kind();
        let grown = match &self.alloc.release {
            Release::Resource {
                resource, align, ..
            } => Self::alloc_from(resource, kind, len, *align)?,
            Release::Queue { queue, align, .. } => Self::alloc_on_queue(queue, kind, len, *align)?,
            Release::Foreign { .. } => {
                return Err(Error::invalid(
                    "buffer",
                    "it views memory devbuf did not allocate, so devbuf cannot allocate more of \
                     it: make a new buffer and copy into it",
                ));
            }
        };
        self.copied_into(grown, queue)
    }

    /// `grown` (new memory, of this buffer's kind and device) holding a copy of this buffer's
    /// first bytes, as [`Buffer::grown`] makes it: for memory that comes from elsewhere than a
    /// resource or queue (an IPC-shareable allocation: [`crate::ipc::grown`]).
    pub fn copied_into(
        &self,
        grown: Buffer,
        queue: Option<&Arc<dyn Queue>>,
    ) -> Result<(Buffer, Event)> {
        let len = grown.len();
        let kept = len.min(self.len);
        let queue = queue.unwrap_or_else(|| self.queue());
        let copied = grown
            .slice(0..kept)?
            .enqueue_copy_from(&self.slice(0..kept)?, queue)?;
        Ok((grown, copied))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use crate::mr::{MemoryResource, QueueResource, StatisticsResource};
    use crate::{Backend, Buffer, DEFAULT_ALIGNMENT, HostBackend, MemKind};

    #[test]
    fn a_buffer_shrinks_and_grows_back_in_place_up_to_its_allocation() {
        let queue = HostBackend.open("").unwrap();
        let buffer = Buffer::alloc(&queue, MemKind::Device, 64).unwrap();
        buffer.copy_from_host(&[7; 64]).unwrap();
        let short = buffer.resized_in_place(8).unwrap();
        assert_eq!(
            (short.len(), short.capacity(), short.ptr()),
            (8, 64, buffer.ptr())
        );
        let back = short.resized_in_place(64).unwrap();
        assert_eq!(back.to_vec().unwrap(), vec![7; 64]);
        assert!(short.resized_in_place(65).is_err());
        assert_eq!(buffer.slice(60..62).unwrap().capacity(), 4);
    }

    #[test]
    fn a_grown_buffer_comes_from_the_same_resource_with_the_old_bytes_first() {
        let queue = HostBackend.open("").unwrap();
        let stats = StatisticsResource::new(QueueResource::new(Arc::clone(&queue)));
        let resource: Arc<dyn MemoryResource> = stats.clone();
        let buffer = Buffer::alloc_from(&resource, MemKind::Host, 4, DEFAULT_ALIGNMENT).unwrap();
        buffer.copy_from_host(b"abcd").unwrap();
        let (grown, copied) = buffer.grown(1000, None).unwrap();
        copied.wait().unwrap();
        assert_eq!((grown.len(), grown.kind()), (1000, MemKind::Host));
        assert_eq!(&grown.to_vec().unwrap()[..4], b"abcd");
        assert_eq!(
            stats.statistics().total_bytes,
            1004,
            "both from the resource"
        );
        let (shorter, copied) = grown.grown(2, Some(&queue)).unwrap();
        copied.wait().unwrap();
        assert_eq!(shorter.to_vec().unwrap(), b"ab");
    }

    #[test]
    fn foreign_memory_cannot_grow() {
        let queue = HostBackend.open("").unwrap();
        let mut bytes = vec![0u8; 16];
        // SAFETY: `bytes` outlives the buffer, which is dropped in this test.
        let foreign = unsafe {
            Buffer::from_foreign(
                Arc::clone(&queue),
                bytes.as_mut_ptr(),
                16,
                MemKind::Host,
                crate::Owner::keep_alive(()),
            )
        };
        assert_eq!(foreign.capacity(), 16);
        let refused = foreign.grown(32, None).unwrap_err();
        assert!(
            refused.to_string().contains("did not allocate"),
            "{refused}"
        );
        drop(foreign);
    }
}
