//! Entry points third-party libraries need before they do anything (cuda.core's `Device`,
//! `Stream` and memory resources, numba-cuda's pinned memory and contexts), each as NVIDIA
//! documents it: stream priorities, ids and devices, context ids and the CUDA 13 variants, context
//! flags, interprocess events, registered host memory, managed-memory hints, the profiler,
//! `CUDA_VISIBLE_DEVICES` and fresh memory's contents. One test per rule, through the C ABI.

mod common;

use std::ptr;

use common::*;
use cudarc::driver::sys::CUpointer_attribute as P;

const LEN: usize = 4096;

/// An entry point cudarc's CUDA 12.8 bindings lack, by its exported name.
fn raw<T: Copy>(name: &str) -> T {
    // SAFETY: looking a symbol up does not call it; the caller names its ABI as `T`.
    *unsafe { sys::culib().get::<T>(name.as_bytes()) }.unwrap()
}

// cuCtxGetStreamPriorityRange: "Stream priorities follow a convention where lower numbers imply
// greater priorities. The range of meaningful stream priorities is given by [*greatestPriority,
// *leastPriority]." cuStreamCreateWithPriority: "If the specified priority is outside the
// numerical range returned by cuCtxGetStreamPriorityRange, it will automatically be clamped to the
// lowest or the highest number in the range."
child_test!(stream_priorities_are_clamped_to_the_range {
    setup();
    let (mut least, mut greatest) = (1, 1);
    // SAFETY: valid out-pointers; NULL may be passed "if the value is not desired".
    unsafe {
        ok(sys::cuCtxGetStreamPriorityRange(&mut least, &mut greatest));
        ok(sys::cuCtxGetStreamPriorityRange(ptr::null_mut(), &mut greatest));
    }
    assert!(greatest < least, "{greatest} {least}");
    for (asked, got) in [(least + 10, least), (greatest - 10, greatest), (greatest + 1, greatest + 1)] {
        let (mut stream, mut priority) = (ptr::null_mut(), 99);
        // SAFETY: valid out-pointers.
        unsafe {
            ok(sys::cuStreamCreateWithPriority(&mut stream, NON_BLOCKING, asked));
            ok(sys::cuStreamGetPriority(stream, &mut priority));
        }
        assert_eq!(priority, got, "asked for {asked}");
    }
});

// cuStreamGetId: "Returns in streamId the unique Id which is associated with the given stream
// handle. The Id is unique for the life of the program." cuCtxGetId: "The Id is unique for the
// life of the program for this instance of CUDA. If context is supplied as NULL and there is one
// current, the Id of the current context is returned." cuStreamGetDevice returns the stream's
// device; cuStreamGetCtx_v2 "the regular context in pCtx and NULL in pGreenCtx";
// cuStreamIsCapturing CU_STREAM_CAPTURE_STATUS_NONE outside a capture.
child_test!(streams_and_contexts_have_ids_devices_and_contexts {
    init();
    let zero = enter(0);
    let one = enter(1);
    let (first, second) = (stream(NON_BLOCKING), stream(0));
    let id = |stream: CUstream| {
        let mut id = 0;
        // SAFETY: a valid out-pointer; the stream is alive.
        ok(unsafe { sys::cuStreamGetId(stream, &mut id) });
        id
    };
    let ids = [id(first), id(second), id(ptr::null_mut()), id(2 as CUstream)];
    for (index, a) in ids.iter().enumerate() {
        assert!(ids[index + 1..].iter().all(|b| b != a), "{ids:?}");
    }
    assert_eq!(id(ptr::null_mut()), id(1 as CUstream), "0 is the legacy stream");
    let context_id = |context: CUcontext| {
        let mut id = 0;
        // SAFETY: a valid out-pointer.
        ok(unsafe { sys::cuCtxGetId(context, &mut id) });
        id
    };
    assert_ne!(context_id(zero), context_id(one));
    assert_eq!(context_id(ptr::null_mut()), context_id(one));
    let (mut device, mut context, mut green) = (-1, ptr::null_mut(), 1 as sys::CUgreenCtx);
    let mut status = sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_ACTIVE;
    // SAFETY: valid out-pointers; the stream is alive.
    unsafe {
        ok(sys::cuStreamGetDevice(first, &mut device));
        ok(sys::cuStreamGetCtx_v2(first, &mut context, &mut green));
        ok(sys::cuStreamIsCapturing(first, &mut status));
    }
    assert_eq!((device, context, green), (1, one, ptr::null_mut()));
    assert_eq!(status, sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE);
    // CUDA 13's cuCtxGetDevice_v2 and cuCtxSynchronize_v2: "If the specified context is NULL, the
    // API will return the current context's device" / "will operate on the current context".
    type GetDevice = unsafe extern "C" fn(*mut i32, CUcontext) -> CUresult;
    type Synchronize = unsafe extern "C" fn(CUcontext) -> CUresult;
    let (get_device, synchronize) =
        (raw::<GetDevice>("cuCtxGetDevice_v2"), raw::<Synchronize>("cuCtxSynchronize_v2"));
    // SAFETY: valid out-pointers; both contexts are alive.
    unsafe {
        ok(get_device(&mut device, zero));
        assert_eq!(device, 0);
        ok(get_device(&mut device, ptr::null_mut()));
        assert_eq!(device, 1);
        ok(synchronize(zero));
        ok(synchronize(ptr::null_mut()));
    }
});

// cuCtxCreate (CUDA 12.5's _v4, CUDA 13's cuCtxCreate): "A regular CUDA context can be created by
// setting ctxCreateParams to NULL"; execution affinity "is only supported under Volta+ MPS".
// "Only one of the scheduling flags can be set when creating a context"; CU_CTX_MAP_HOST and
// CU_CTX_SYNC_MEMOPS are flags cuCtxCreate documents, and cuDevicePrimaryCtxSetFlags documents
// CU_CTX_SYNC_MEMOPS.
child_test!(contexts_take_the_documented_flags_and_one_scheduling_flag {
    const SPIN: u32 = 0x1;
    const YIELD: u32 = 0x2;
    const MAP_HOST: u32 = 0x8;
    const SYNC_MEMOPS: u32 = 0x80;
    init();
    let mut context = ptr::null_mut();
    let mut flags = 0;
    // SAFETY: valid out-pointers; each created context is destroyed once.
    unsafe {
        ok(sys::cuCtxCreate_v4(&mut context, ptr::null_mut(), MAP_HOST | SYNC_MEMOPS | SPIN, 0));
        ok(sys::cuCtxGetFlags(&mut flags));
        assert_eq!(flags, MAP_HOST | SYNC_MEMOPS | SPIN);
        ok(sys::cuCtxDestroy_v2(context));
        let result = sys::cuCtxCreate_v2(&mut context, SPIN | YIELD, 0);
        assert_eq!(result, CUresult::CUDA_ERROR_INVALID_VALUE);
        let mut affinity: sys::CUexecAffinityParam = std::mem::zeroed();
        let mut params = sys::CUctxCreateParams {
            execAffinityParams: &mut affinity,
            numExecAffinityParams: 1,
            cigParams: ptr::null_mut(),
        };
        let result = sys::cuCtxCreate_v4(&mut context, &mut params, 0, 0);
        assert_eq!(result, CUresult::CUDA_ERROR_NOT_SUPPORTED);
        ok(sys::cuDevicePrimaryCtxSetFlags_v2(0, SYNC_MEMOPS | YIELD));
        let result = sys::cuDevicePrimaryCtxSetFlags_v2(0, SPIN | YIELD);
        assert_eq!(result, CUresult::CUDA_ERROR_INVALID_VALUE);
    }
});

// cuEventCreate: "CU_EVENT_INTERPROCESS must be specified along with CU_EVENT_DISABLE_TIMING."
child_test!(an_interprocess_event_must_disable_timing {
    const DISABLE_TIMING: u32 = 0x2;
    const INTERPROCESS: u32 = 0x4;
    setup();
    let mut event = ptr::null_mut();
    // SAFETY: a valid out-pointer.
    unsafe {
        assert_eq!(sys::cuEventCreate(&mut event, INTERPROCESS), CUresult::CUDA_ERROR_INVALID_VALUE);
        ok(sys::cuEventCreate(&mut event, INTERPROCESS | DISABLE_TIMING));
    }
});

// CU_POINTER_ATTRIBUTE_DEVICE_POINTER: "If there is no current CUcontext then
// CUDA_ERROR_INVALID_CONTEXT is returned."
child_test!(a_device_pointer_needs_a_current_context {
    setup();
    let memory = device_alloc(LEN);
    let mut device_pointer = 0u64;
    let query = |out: &mut u64| {
        // SAFETY: a valid out-pointer of the attribute's type.
        unsafe {
            sys::cuPointerGetAttribute((out as *mut u64).cast(), P::CU_POINTER_ATTRIBUTE_DEVICE_POINTER, memory)
        }
    };
    ok(query(&mut device_pointer));
    assert_eq!(device_pointer, memory);
    // SAFETY: NULL unbinds the current context.
    ok(unsafe { sys::cuCtxSetCurrent(ptr::null_mut()) });
    assert_eq!(query(&mut device_pointer), CUresult::CUDA_ERROR_INVALID_CONTEXT);
});

// cuMemHostRegister "Page-locks the memory range specified by p and bytesize and maps it for the
// device(s)": from then on it is pinned host memory to the driver (CU_MEMORYTYPE_HOST, read by an
// asynchronous copy when its stream gets there). Overlapping registered memory is
// CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED; cuMemHostUnregister: "The base address must be the
// same one specified to cuMemHostRegister()" (else CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED); after
// it, the memory is pageable again, unknown to the driver.
child_test!(registered_host_memory_is_pinned_until_unregistered {
    setup();
    let mut host = vec![1u8; 2 * LEN];
    let base = host.as_mut_ptr();
    let kind = |address: *mut u8| {
        let mut kind = 0u32;
        // SAFETY: a valid out-pointer of the attribute's type.
        let result = unsafe {
            sys::cuPointerGetAttribute((&raw mut kind).cast(), P::CU_POINTER_ATTRIBUTE_MEMORY_TYPE, address as u64)
        };
        (result, kind)
    };
    let stream = stream(NON_BLOCKING);
    let device = device_alloc(LEN);
    // SAFETY: `host` outlives the registration and holds 2 * LEN bytes; the stream is drained
    // before the host writes again and before the unregistration.
    unsafe {
        ok(sys::cuMemHostRegister_v2(base.cast(), 2 * LEN, 0));
        assert_eq!(kind(base.add(LEN)), (CUresult::CUDA_SUCCESS, 1));
        let result = sys::cuMemHostRegister_v2(base.add(LEN).cast(), LEN, 0);
        assert_eq!(result, CUresult::CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED);
        let mut mapped = 0;
        ok(sys::cuMemHostGetDevicePointer_v2(&mut mapped, base.cast(), 0));
        assert_eq!(mapped, base as u64);
        ok(sys::cuMemcpyDtoHAsync_v2(base.cast(), device, LEN, stream));
        ok(sys::cuStreamSynchronize(stream));
        assert_ne!(host[0], 1, "the copy wrote the registered memory");
        let result = sys::cuMemHostUnregister(base.add(1).cast());
        assert_eq!(result, CUresult::CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED);
        ok(sys::cuMemHostUnregister(base.cast()));
    }
    assert_eq!(kind(base).0, CUresult::CUDA_ERROR_INVALID_VALUE, "pageable again");
    host[0] = 2;
});

// cuMemPrefetchAsync and cuMemAdvise: "The memory range must refer to managed memory allocated
// via cuMemAllocManaged" (or system memory with CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS, 0
// here); the advice is one of CUmem_advise's.
child_test!(prefetches_and_advice_take_managed_memory {
    setup();
    let stream = stream(NON_BLOCKING);
    let device = device_alloc(LEN);
    let mut managed = 0;
    let location = |ordinal: i32| sys::CUmemLocation {
        type_: sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE,
        id: ordinal,
    };
    type Prefetch = unsafe extern "C" fn(CUdeviceptr, usize, i32, CUstream) -> CUresult;
    type Advise = unsafe extern "C" fn(CUdeviceptr, usize, u32, i32) -> CUresult;
    let (prefetch_v1, advise_v1) = (raw::<Prefetch>("cuMemPrefetchAsync"), raw::<Advise>("cuMemAdvise"));
    const CPU: i32 = -1;
    const SET_READ_MOSTLY: u32 = 1;
    // SAFETY: valid out-pointers; the ranges are allocated and the stream alive.
    unsafe {
        ok(sys::cuMemAllocManaged(&mut managed, LEN, 1));
        ok(sys::cuMemPrefetchAsync_v2(managed, LEN, location(1), 0, stream));
        ok(prefetch_v1(managed, LEN, CPU, stream));
        ok(sys::cuMemAdvise_v2(managed, LEN, sys::CUmem_advise::CU_MEM_ADVISE_SET_PREFERRED_LOCATION, location(0)));
        ok(advise_v1(managed, LEN, SET_READ_MOSTLY, CPU));
        let invalid = CUresult::CUDA_ERROR_INVALID_VALUE;
        assert_eq!(sys::cuMemPrefetchAsync_v2(device, LEN, location(0), 0, stream), invalid);
        assert_eq!(prefetch_v1(managed, 2 * LEN, 0, stream), invalid);
        assert_eq!(advise_v1(device, LEN, SET_READ_MOSTLY, 0), invalid);
        assert_eq!(advise_v1(managed, LEN, 99, 0), invalid);
        assert_eq!(prefetch_v1(managed, LEN, 7, stream), CUresult::CUDA_ERROR_INVALID_DEVICE);
        ok(sys::cuStreamSynchronize(stream));
    }
});

// cuProfilerStart: "Enables profile collection by the active profiling tool for the current
// context" (CUDA_SUCCESS, or CUDA_ERROR_INVALID_CONTEXT); no tool is attached to the test driver.
child_test!(the_profiler_starts_and_stops_in_a_context {
    init();
    // SAFETY: no arguments.
    unsafe {
        assert_eq!(sys::cuProfilerStart(), CUresult::CUDA_ERROR_INVALID_CONTEXT);
        enter(0);
        ok(sys::cuProfilerStart());
        ok(sys::cuProfilerStop());
    }
});

// CUDA_VISIBLE_DEVICES, read when the driver initializes: NVIDIA's numba-cuda test
// `test_visible_devices_set_after_import` sets it after loading the driver and expects one device.
child_test!(cuda_visible_devices_narrows_the_devices
    ["DEVBUF_CUDA_TEST_DEVICES" = "3", "CUDA_VISIBLE_DEVICES" = "2,0,9,1"] {
    init();
    let mut count = 0;
    // SAFETY: a valid out-pointer.
    ok(unsafe { sys::cuDeviceGetCount(&mut count) });
    assert_eq!(count, 2, "the devices before the first invalid index");
});

// A real allocation holds whatever was there before: fresh device, pinned and managed memory is
// not zeroed. The test driver fills it with 0xFF bytes.
child_test!(fresh_memory_is_never_zeros {
    setup();
    let device = device_alloc(LEN);
    assert!(read(device, LEN).iter().all(|&byte| byte == 0xff));
    let pinned = pinned_alloc(LEN);
    let mut managed = 0;
    // SAFETY: a valid out-pointer; both are LEN bytes the host may read.
    unsafe {
        ok(sys::cuMemAllocManaged(&mut managed, LEN, 1));
        for memory in [pinned, managed as *mut u8] {
            assert!(std::slice::from_raw_parts(memory, LEN).iter().all(|&byte| byte == 0xff));
        }
    }
});
