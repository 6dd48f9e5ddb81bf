//! The conformance kit on the default SYCL device (the first with USM: Intel's CPU runtime in CI),
//! for every kind it supports.

devbuf_core::conformance_tests!("sycl", devbuf_sycl::default_queue());
