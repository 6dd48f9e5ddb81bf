//! The conformance kit every backend passes, on the default CUDA device, and the descriptor
//! checks on the backend; each check is skipped, with the reason, where CUDA is unavailable
//! (`DEVBUF_REQUIRE=cuda` makes a skip a failure).

devbuf_core::conformance_tests!("cuda", devbuf_cuda::default_queue());

mod descriptor {
    devbuf_core::descriptor_tests!(devbuf_cuda::CudaBackend);
}
