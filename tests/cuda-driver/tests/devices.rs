//! Rules of a machine with more than one device: events, copies, peer access and memory pools
//! across the double's two devices. One test per rule, each through the exported C ABI.

mod common;

use std::ptr;

use common::*;

fn timed_event(stream: CUstream) -> sys::CUevent {
    let mut event = ptr::null_mut();
    // SAFETY: a valid out-pointer; the stream is alive in the current context.
    unsafe {
        ok(sys::cuEventCreate(&mut event, 0));
        ok(sys::cuEventRecord(event, stream));
        ok(sys::cuEventSynchronize(event));
    }
    event
}

fn pop() {
    let mut popped = ptr::null_mut();
    // SAFETY: a valid out-pointer; a context is current.
    ok(unsafe { sys::cuCtxPopCurrent_v2(&mut popped) });
}

child_test!(events_of_two_devices_have_no_elapsed_time {
    // "cudaEventElapsedTime() will fail if the two input events are associated to different
    // devices" (CUDA Programming Guide, multi-device "Stream and Event Behavior").
    setup();
    let on_device_0 = timed_event(stream(0));
    let also_on_device_0 = timed_event(stream(0));
    pop();
    enter(1);
    let on_device_1 = timed_event(stream(0));
    let mut elapsed = 0.0f32;
    // SAFETY: the events are alive; `elapsed` is a valid out-pointer.
    unsafe {
        assert_eq!(
            sys::cuEventElapsedTime(&mut elapsed, on_device_0, on_device_1),
            CUresult::CUDA_ERROR_INVALID_HANDLE
        );
        assert_eq!(
            sys::cuEventElapsedTime(&mut elapsed, on_device_1, on_device_0),
            CUresult::CUDA_ERROR_INVALID_HANDLE
        );
        ok(sys::cuEventElapsedTime(&mut elapsed, on_device_0, also_on_device_0));
    }
});
