#![doc = include_str!("../README.md")]

// The guide's Rust examples run as doctests too (the guide is not part of the packaged crate).
#[cfg(doctest)]
#[doc = include_str!("../../../docs/guide/rust.md")]
struct GuideRustExamples;

pub mod matrix;
mod registry;
mod selection;
pub mod stream_allocator;
mod streams;

pub use registry::{
    backend, backend_for, backends, default_order, dlpack_kind_for, queue_for_device_object,
    queue_for_dlpack_device, queue_for_dlpack_memory, queue_for_pointer, queue_for_suai_context,
    speakers, speaks, split_selector,
};
pub use selection::{
    DEVICE_VARIABLE, DefaultDevice, default_device, default_queue, open, open_ipc,
};
pub use streams::{adopt_stream, open_stream};

pub use devbuf_core::*;
#[cfg(feature = "cuda")]
pub use devbuf_cuda as cuda;
#[cfg(feature = "opencl")]
pub use devbuf_opencl as opencl;
#[cfg(feature = "sycl")]
pub use devbuf_sycl as sycl;
