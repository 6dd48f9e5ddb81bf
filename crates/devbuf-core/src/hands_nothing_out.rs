//! The exchange answers of a queue that hands nothing out, provided once so that a backend states
//! them in one named line instead of fourteen methods (docs/architecture.md, "The backend
//! contract"). Each macro is written inside an `impl Interop for ...` block, at the place of the
//! methods it stands for in the trait's order, so an impl still reads side by side with the
//! others (`ci/test_interop_order.py` expands them). The answers are not trait defaults: a
//! backend that hands a handle out writes its own, and one that names a macro says what it is.
//! The conformance kit holds them against the queue as it holds written ones.

/// [`crate::Interop`]'s handles for a queue that hands none to other libraries: no native stream,
/// no DLPack work stream (DLPack's null stream), no exported queue handle.
///
/// Written where `native_stream`, `dlpack_work_stream` and `export_handle` would be.
#[macro_export]
macro_rules! hands_out_no_handle {
    () => {
        /// No native stream is handed out.
        fn native_stream(&self) -> ::core::option::Option<$crate::StreamHandle> {
            ::core::option::Option::None
        }

        /// DLPack's exchange API is told the null stream.
        fn dlpack_work_stream(&self) -> ::core::option::Option<usize> {
            ::core::option::Option::None
        }

        /// No queue handle is handed out.
        fn export_handle(&self) -> ::core::option::Option<$crate::ExportedHandle> {
            ::core::option::Option::None
        }
    };
}

/// [`crate::Interop`]'s stream rules for memory whose protocols carry no stream or queue of this
/// backend: a DLPack consumer's `stream` takes the generic rule (waiting for pending work), and a
/// producer's stream orders nothing.
///
/// Written where `dlpack_consumer`, `dlpack_orders_streamless_export` and `order_after_producer`
/// would be.
#[macro_export]
macro_rules! takes_no_foreign_stream {
    () => {
        /// No consumer stream is this backend's: the generic rule applies.
        unsafe fn dlpack_consumer(
            &self,
            _device: $crate::dlpark::ffi::DLDevice,
            _stream: &$crate::ForeignObject<'_>,
        ) -> ::core::option::Option<$crate::Result<$crate::interop::ConsumerOrder>> {
            ::core::option::Option::None
        }

        /// No rule for a consumer without a stream either.
        fn dlpack_orders_streamless_export(&self, _device: $crate::dlpark::ffi::DLDevice) -> bool {
            false
        }

        /// No producer stream is this backend's: nothing to follow.
        unsafe fn order_after_producer(
            &self,
            _stream: $crate::interop::ProducerStream<'_>,
            _sync: bool,
        ) -> $crate::Result<$crate::interop::ProducerWork> {
            ::core::result::Result::Ok(::core::default::Default::default())
        }
    };
}

/// Every answer of [`crate::Interop`] about handles and ordering, for a queue that hands nothing
/// out to other libraries (the host's, OpenCL's): no other library enqueues on it, so devbuf's own
/// work is all its work; its events are [`crate::Queue::record_event`]'s, ordering after an event
/// is [`crate::Queue::wait_event`], and [`crate::Queue::wait_device`] sees every queue its memory
/// is used on. [`hands_out_no_handle!`], the ordering answers, then
/// [`takes_no_foreign_stream!`]. Needs `Self: Queue`, as every backend's queue is.
///
/// Written where the methods from `native_stream` to `order_after_producer` would be; the
/// backend writes the rest (`dlpack_device`, `dlpack_export_refusal`, `holder_of`, `ipc`).
#[macro_export]
macro_rules! hands_nothing_out {
    () => {
        $crate::hands_out_no_handle!();

        /// Nothing is handed out: no other library enqueues work devbuf does not track.
        fn untracked_foreign_work(&self) -> bool {
            false
        }

        /// No foreign work to order after.
        fn order_after_foreign_work(&self) -> $crate::Result<()> {
            ::core::result::Result::Ok(())
        }

        /// No foreign work to wait for.
        fn foreign_work_event(&self) -> $crate::Result<::core::option::Option<$crate::Event>> {
            ::core::result::Result::Ok(::core::option::Option::None)
        }

        /// All work on the queue is devbuf's: its own event.
        fn handed_out_event(&self) -> $crate::Result<$crate::Event> {
            $crate::Queue::record_event(self)
        }

        /// Nothing is handed out but the queue itself.
        fn hands_out_command_queue(&self) -> bool {
            true
        }

        /// The queue itself waits, as devbuf's next command on it does.
        fn order_handed_out_after(&self, event: &$crate::Event) -> $crate::Result<()> {
            $crate::Queue::wait_event(self, event)
        }

        /// Nothing but this queue works on its memory.
        fn wait_device_covers_every_queue(&self) -> bool {
            true
        }

        $crate::takes_no_foreign_stream!();
    };
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use crate::interop::{ForeignObject, ProducerStream};
    use crate::{Buffer, HostQueue, MemKind, Queue};

    /// The answers as the ordering module reads them: a queue that hands nothing out is never a
    /// foreign queue, its handed-out event covers its own work, and it takes no stream.
    #[test]
    fn a_queue_that_hands_nothing_out_answers_as_one() {
        let queue: Arc<dyn Queue> = Arc::new(HostQueue::default());
        let interop = queue.interop();
        assert!(crate::ordering::as_foreign_queue(&queue).is_none());
        assert!(interop.native_stream().is_none());
        assert!(interop.dlpack_work_stream().is_none());
        assert!(interop.export_handle().is_none());
        assert!(interop.hands_out_command_queue());
        assert!(interop.wait_device_covers_every_queue());
        assert!(interop.foreign_work_event().unwrap().is_none());
        let buffer = Buffer::alloc(&queue, MemKind::Host, 64).unwrap();
        buffer.fill(5).unwrap();
        assert!(interop.handed_out_event().unwrap().is_complete().unwrap());
        let device = interop.dlpack_device(MemKind::Host);
        assert!(!interop.dlpack_orders_streamless_export(device));
        // SAFETY: no stream handle is passed.
        unsafe {
            assert!(
                interop
                    .dlpack_consumer(device, &ForeignObject::Nothing)
                    .is_none()
            );
            let work = interop
                .order_after_producer(ProducerStream::CaiEntry(ForeignObject::Nothing), true)
                .unwrap();
            assert!(work.ordered.is_none() && work.hold_back.is_none());
        }
    }
}
