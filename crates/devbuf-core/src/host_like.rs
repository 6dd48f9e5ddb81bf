//! The answers every host-like backend shares (its work runs on the calling thread, over memory
//! the host dereferences: the host backend, the skeleton), provided once so that such a backend
//! states them in one named line each instead of writing them again (docs/architecture.md,
//! "Adding a backend"). As with `hands_nothing_out!`, these are not trait defaults: a device
//! backend inheriting them would be silently wrong, so a backend names the macro and so says what
//! it is, and the conformance kit holds the answers against the queue as it holds written ones.

/// [`crate::Queue`]'s work for a queue whose copies and fills run on the calling thread before
/// they return, over memory of every kind that the host dereferences: every kind is
/// host-accessible, a copy is `std::ptr::copy`, a fill `std::ptr::write_bytes`, nothing is ever
/// pending (`wait` returns at once, events are recorded completed), and waiting for another
/// queue's event is the host's wait, since work runs when it is enqueued.
///
/// Written inside `impl Queue for ...`, where `host_accessible` would be; stands for
/// `host_accessible`, `on_the_host_processor`, `copy`, `fill`, `wait`, `record_event` and `wait_event`.
#[macro_export]
macro_rules! works_on_the_calling_thread {
    () => {
        /// Every kind is host memory.
        fn host_accessible(&self, _kind: $crate::MemKind) -> bool {
            true
        }

        /// Its work runs on the host's processor, over the host's own memory.
        fn on_the_host_processor(&self) -> bool {
            true
        }

        /// A copy on the calling thread.
        unsafe fn copy(&self, dst: *mut u8, src: *const u8, len: usize) -> $crate::Result<()> {
            // SAFETY: the caller guarantees both ranges are valid host memory for `len` bytes.
            unsafe { ::core::ptr::copy(src, dst, len) };
            ::core::result::Result::Ok(())
        }

        /// A fill on the calling thread.
        unsafe fn fill(&self, dst: *mut u8, byte: u8, len: usize) -> $crate::Result<()> {
            // SAFETY: the caller guarantees `dst` is valid host memory for `len` bytes.
            unsafe { ::core::ptr::write_bytes(dst, byte, len) };
            ::core::result::Result::Ok(())
        }

        /// Nothing is ever pending.
        fn wait(&self) -> $crate::Result<()> {
            ::core::result::Result::Ok(())
        }

        /// All work enqueued so far has completed.
        fn record_event(&self) -> $crate::Result<$crate::Event> {
            ::core::result::Result::Ok($crate::Event::new($crate::CompletedEvent))
        }

        /// Work runs when it is enqueued: the host waits for another queue's event first.
        fn wait_event(&self, event: &$crate::Event) -> $crate::Result<()> {
            event.wait()
        }
    };
}

/// [`crate::Interop`]'s DLPack device for a queue whose every kind of memory is host memory of
/// the process: DLPack's CPU device (`kDLCPU`, 0), with nothing refused (a host address is what
/// DLPack's `data` is on the CPU).
///
/// Written inside `impl Interop for ...` where `dlpack_device` and `dlpack_export_refusal` would
/// be.
#[macro_export]
macro_rules! exports_host_memory {
    () => {
        /// DLPack's CPU device, for every kind.
        fn dlpack_device(&self, _kind: $crate::MemKind) -> $crate::dlpark::ffi::DLDevice {
            $crate::dlpack::export_plan::CPU
        }

        /// A host address is DLPack's `data` on the CPU.
        fn dlpack_export_refusal(&self) -> ::core::option::Option<::std::string::String> {
            ::core::option::Option::None
        }
    };
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use crate::{Buffer, HostQueue, MemKind, Queue};

    /// The host backend states both macros: its memory of every kind is host memory the host
    /// writes and reads at once, its events are complete when recorded, and it exports as the
    /// CPU.
    #[test]
    fn a_queue_that_works_on_the_calling_thread_answers_as_one() {
        let queue: Arc<dyn Queue> = Arc::new(HostQueue::default());
        for kind in [MemKind::Host, MemKind::Device, MemKind::Shared] {
            assert!(queue.host_accessible(kind), "{kind:?}");
            let buffer = Buffer::alloc(&queue, kind, 64).unwrap();
            buffer.fill(7).unwrap();
            // SAFETY: 64 bytes of host memory the buffer owns, filled above.
            let bytes = unsafe { std::slice::from_raw_parts(buffer.ptr(), 64) };
            assert!(bytes.iter().all(|&b| b == 7), "{kind:?}");
            let device = queue.interop().dlpack_device(kind);
            assert_eq!(device, crate::dlpack::export_plan::CPU);
        }
        let event = queue.record_event().unwrap();
        assert!(event.is_complete().unwrap());
        queue.wait_event(&event).unwrap();
        queue.wait().unwrap();
        assert!(queue.interop().dlpack_export_refusal().is_none());
    }
}
