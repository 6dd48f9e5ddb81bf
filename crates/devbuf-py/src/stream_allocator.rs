//! The C entry points of devbuf's allocator for PyTorch
//! (`torch.cuda.memory.CUDAPluggableAllocator(<this library>, "devbuf_torch_alloc",
//! "devbuf_torch_free")`): exported by the extension module itself, so that they share its
//! current resources. The work is `devbuf::stream_allocator`'s; these only translate, and never
//! let a panic or an error cross into C (an error is a null pointer, which PyTorch reports as out
//! of memory, and a message on stderr).

use std::ffi::c_void;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::ptr;

use devbuf::stream_allocator::{allocate_on_stream, free_on_stream};

/// PyTorch's `void* alloc(ssize_t size, int device, cudaStream_t stream)`.
#[unsafe(no_mangle)]
pub extern "C" fn devbuf_torch_alloc(size: isize, device: i32, stream: *mut c_void) -> *mut c_void {
    let allocated = catch_unwind(AssertUnwindSafe(|| {
        let size = usize::try_from(size).map_err(|_| format!("size {size} is negative"))?;
        // SAFETY: PyTorch passes a live stream of `device` for the call.
        unsafe { allocate_on_stream(&format!("cuda:{device}"), size, stream as usize) }
            .map_err(|err| err.to_string())
    }));
    match allocated {
        Ok(Ok(ptr)) => ptr.as_ptr().cast(),
        Ok(Err(why)) => {
            eprintln!("devbuf_torch_alloc: {why}");
            ptr::null_mut()
        }
        Err(_) => {
            eprintln!("devbuf_torch_alloc: panicked");
            ptr::null_mut()
        }
    }
}

/// PyTorch's `void free(void* ptr, ssize_t size, int device, cudaStream_t stream)`.
#[unsafe(no_mangle)]
pub extern "C" fn devbuf_torch_free(
    ptr: *mut c_void,
    _size: isize,
    _device: i32,
    stream: *mut c_void,
) {
    let freed = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: PyTorch passes a live stream for the call, the one its work on the memory ran on.
        unsafe { free_on_stream(ptr as usize, stream as usize) }
    }));
    match freed {
        Ok(Ok(())) => {}
        Ok(Err(err)) => eprintln!("devbuf_torch_free: {err}"),
        Err(_) => eprintln!("devbuf_torch_free: panicked"),
    }
}
