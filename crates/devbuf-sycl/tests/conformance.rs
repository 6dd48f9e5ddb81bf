//! The conformance kit on the default SYCL device (the first with USM: Intel's CPU runtime in CI),
//! for every kind it supports, and the descriptor checks on the backend.

devbuf_core::conformance_tests!("sycl", devbuf_sycl::default_queue());

mod descriptor {
    devbuf_core::descriptor_tests!(devbuf_sycl::SyclBackend::new());
}
