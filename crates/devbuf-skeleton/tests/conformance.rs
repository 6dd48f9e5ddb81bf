//! The conformance kit on the skeleton backend's queue, and the descriptor checks on the backend:
//! what every backend's `tests/conformance.rs` holds.

devbuf_core::conformance_tests!("skeleton", devbuf_skeleton::default_queue());

mod descriptor {
    devbuf_core::descriptor_tests!(devbuf_skeleton::SkeletonBackend);
}
