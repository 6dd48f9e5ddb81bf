//! The driver's rules for initialization, devices, contexts, memory, pointer attributes, error
//! strings and `cuGetProcAddress`: one test per rule, each through the exported C ABI.

mod common;

use std::ffi::{CStr, c_char, c_void};
use std::ptr;

use common::*;
use cudarc::driver::sys::{CUdevice_attribute as A, CUpointer_attribute as P};

fn attribute(attribute: A, device: i32) -> i32 {
    let mut value = -1;
    // SAFETY: a valid out-pointer.
    ok(unsafe { sys::cuDeviceGetAttribute(&mut value, attribute, device) });
    value
}

child_test!(only_init_and_version_work_before_cuinit {
    let (mut count, mut version, mut text) = (0, 0, ptr::null());
    // SAFETY: valid out-pointers throughout.
    unsafe {
        assert_eq!(sys::cuDeviceGetCount(&mut count), CUresult::CUDA_ERROR_NOT_INITIALIZED);
        let mut device = 0;
        assert_eq!(sys::cuDeviceGet(&mut device, 0), CUresult::CUDA_ERROR_NOT_INITIALIZED);
        ok(sys::cuDriverGetVersion(&mut version));
        ok(sys::cuGetErrorString(CUresult::CUDA_ERROR_NOT_INITIALIZED, &mut text));
        assert_eq!(sys::cuInit(1), CUresult::CUDA_ERROR_INVALID_VALUE);
        ok(sys::cuInit(0));
        ok(sys::cuDeviceGetCount(&mut count));
    }
    assert_eq!((count, version), (2, 13000));
});

child_test!(cuinit_fails_with_the_injected_code ["DEVBUF_CUDA_TEST_INIT_ERROR" = "CUDA_ERROR_NO_DEVICE"] {
    let mut count = 0;
    // SAFETY: valid out-pointers.
    unsafe {
        assert_eq!(sys::cuInit(0), CUresult::CUDA_ERROR_NO_DEVICE);
        assert_eq!(sys::cuDeviceGetCount(&mut count), CUresult::CUDA_ERROR_NOT_INITIALIZED);
    }
});

child_test!(a_malformed_setting_fails_cuinit ["DEVBUF_CUDA_TEST_DEVICES" = "two"] {
    // SAFETY: cuInit takes no pointers.
    assert_eq!(unsafe { sys::cuInit(0) }, CUresult::CUDA_ERROR_INVALID_VALUE);
});

child_test!(devices_have_names_that_say_test_driver_and_the_documented_attributes
    ["DEVBUF_CUDA_TEST_DEVICES" = "3"] {
    init();
    let mut count = 0;
    // SAFETY: a valid out-pointer.
    ok(unsafe { sys::cuDeviceGetCount(&mut count) });
    assert_eq!(count, 3);
    for ordinal in 0..3 {
        let mut device = -1;
        let mut name = [0 as c_char; 64];
        let mut total = 0;
        // SAFETY: valid out-pointers; the name buffer holds 64 bytes.
        unsafe {
            ok(sys::cuDeviceGet(&mut device, ordinal));
            ok(sys::cuDeviceGetName(name.as_mut_ptr(), 64, device));
            ok(sys::cuDeviceTotalMem_v2(&mut total, device));
        }
        // SAFETY: the driver NUL-terminated the name.
        let name = unsafe { CStr::from_ptr(name.as_ptr()) }.to_str().unwrap();
        assert_eq!(name, format!("devbuf CUDA test driver (device {ordinal})"));
        assert_eq!(total, 16 << 30);
        assert_eq!(attribute(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device), 9);
        assert_eq!(attribute(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device), 0);
        for yes in [
            A::CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING,
            A::CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY,
            A::CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS,
            A::CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED,
            A::CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY,
        ] {
            assert_eq!(attribute(yes, device), 1, "{yes:?}");
        }
        assert_eq!(attribute(A::CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS, device), 0);
    }
    let mut device = 0;
    // SAFETY: a valid out-pointer.
    unsafe {
        assert_eq!(sys::cuDeviceGet(&mut device, 3), CUresult::CUDA_ERROR_INVALID_DEVICE);
        assert_eq!(sys::cuDeviceGet(&mut device, -1), CUresult::CUDA_ERROR_INVALID_DEVICE);
    }
});

child_test!(managed_access_and_pools_can_be_switched_off
    ["DEVBUF_CUDA_TEST_CONCURRENT_MANAGED_ACCESS" = "0", "DEVBUF_CUDA_TEST_MEMORY_POOLS" = "0"] {
    setup();
    assert_eq!(attribute(A::CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS, 0), 0);
    assert_eq!(attribute(A::CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED, 0), 0);
    let mut ptr = 0;
    // SAFETY: a valid out-pointer; the legacy stream of the current context.
    let result = unsafe { sys::cuMemAllocAsync(&mut ptr, 64, ptr::null_mut()) };
    assert_eq!(result, CUresult::CUDA_ERROR_NOT_SUPPORTED);
});

child_test!(primary_contexts_are_reference_counted_and_destroyed_with_their_contents {
    init();
    let (mut first, mut second) = (ptr::null_mut(), ptr::null_mut());
    let (mut flags, mut active) = (0, 0);
    // SAFETY: valid out-pointers throughout.
    unsafe {
        ok(sys::cuDevicePrimaryCtxGetState(0, &mut flags, &mut active));
        assert_eq!(active, 0);
        ok(sys::cuDevicePrimaryCtxRetain(&mut first, 0));
        ok(sys::cuDevicePrimaryCtxRetain(&mut second, 0));
        assert_eq!(first, second);
        ok(sys::cuDevicePrimaryCtxGetState(0, &mut flags, &mut active));
        assert_eq!(active, 1);
        ok(sys::cuCtxPushCurrent_v2(first));
        let buffer = device_alloc(64);
        let stream = stream(0);
        ok(sys::cuDevicePrimaryCtxRelease_v2(0));
        ok(sys::cuDevicePrimaryCtxGetState(0, &mut flags, &mut active));
        assert_eq!(active, 1, "one retain is left");
        ok(sys::cuStreamSynchronize(stream));
        ok(sys::cuDevicePrimaryCtxRelease_v2(0));
        ok(sys::cuDevicePrimaryCtxGetState(0, &mut flags, &mut active));
        assert_eq!(active, 0);
        assert_eq!(sys::cuDevicePrimaryCtxRelease_v2(0), CUresult::CUDA_ERROR_INVALID_CONTEXT);
        // Still current, but destroyed: its memory and streams are gone.
        let mut ptr = 0;
        assert_eq!(sys::cuMemAlloc_v2(&mut ptr, 64), CUresult::CUDA_ERROR_CONTEXT_IS_DESTROYED);
        ok(sys::cuDevicePrimaryCtxRetain(&mut first, 0));
        assert_eq!(sys::cuStreamSynchronize(stream), CUresult::CUDA_ERROR_INVALID_HANDLE);
        let mut kind = 0u32;
        let result = sys::cuPointerGetAttribute(
            (&raw mut kind).cast(),
            P::CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
            buffer,
        );
        assert_eq!(result, CUresult::CUDA_ERROR_INVALID_VALUE);
    }
});

child_test!(calls_that_need_a_context_fail_without_one_and_the_stack_is_per_thread {
    init();
    let mut ptr = 0;
    let mut current = ptr::null_mut();
    // SAFETY: valid out-pointers throughout.
    unsafe {
        assert_eq!(sys::cuMemAlloc_v2(&mut ptr, 64), CUresult::CUDA_ERROR_INVALID_CONTEXT);
        assert_eq!(sys::cuCtxSynchronize(), CUresult::CUDA_ERROR_INVALID_CONTEXT);
        let mut stream = ptr::null_mut();
        assert_eq!(sys::cuStreamCreate(&mut stream, 0), CUresult::CUDA_ERROR_INVALID_CONTEXT);
        assert_eq!(sys::cuCtxPopCurrent_v2(&mut current), CUresult::CUDA_ERROR_INVALID_CONTEXT);
        let zero = enter(0);
        let one = enter(1);
        assert_ne!(zero, one);
        ok(sys::cuCtxGetCurrent(&mut current));
        assert_eq!(current, one);
        let mut device = -1;
        ok(sys::cuCtxGetDevice(&mut device));
        assert_eq!(device, 1);
        std::thread::spawn(|| {
            let mut current = ptr::null_mut();
            ok(sys::cuCtxGetCurrent(&mut current));
            assert!(current.is_null(), "a new thread has no current context");
        })
        .join()
        .unwrap();
        ok(sys::cuCtxPopCurrent_v2(&mut current));
        assert_eq!(current, one);
        ok(sys::cuCtxGetCurrent(&mut current));
        assert_eq!(current, zero);
        ok(sys::cuCtxSetCurrent(ptr::null_mut()));
        ok(sys::cuCtxGetCurrent(&mut current));
        assert!(current.is_null());
    }
});

child_test!(a_device_can_be_made_unavailable ["DEVBUF_CUDA_TEST_UNAVAILABLE_DEVICES" = "0"] {
    init();
    let mut context = ptr::null_mut();
    // SAFETY: a valid out-pointer.
    unsafe {
        let result = sys::cuDevicePrimaryCtxRetain(&mut context, 0);
        assert_eq!(result, CUresult::CUDA_ERROR_DEVICE_UNAVAILABLE);
        ok(sys::cuDevicePrimaryCtxRetain(&mut context, 1));
    }
});

/// Reading device memory (or freed pinned memory) on the host must crash, as on a GPU.
fn host_read_crashes(test: &str, body: impl FnOnce() -> *const u8) {
    host_read_crashes_with(test, &[], body)
}

fn host_read_crashes_with(
    test: &str,
    variables: &[(&str, &str)],
    body: impl FnOnce() -> *const u8,
) {
    if common::child::is_child() {
        let ptr = body();
        // SAFETY: deliberately not: this read must fault, which is the rule under test.
        let byte = unsafe { ptr.read_volatile() };
        panic!("the host read {ptr:?} ({byte}) without a fault");
    }
    use std::os::unix::process::ExitStatusExt;
    let output = common::run_child(test, variables);
    assert_eq!(
        output.status.signal(),
        Some(libc::SIGSEGV),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
fn a_host_read_of_device_memory_segfaults() {
    host_read_crashes("a_host_read_of_device_memory_segfaults", || {
        setup();
        device_alloc(4096) as *const u8
    });
}

#[test]
fn a_host_read_of_freed_pinned_memory_segfaults() {
    host_read_crashes("a_host_read_of_freed_pinned_memory_segfaults", || {
        setup();
        let pinned = pinned_alloc(4096);
        // SAFETY: freed once, nothing pending on it.
        ok(unsafe { sys::cuMemFreeHost(pinned.cast()) });
        pinned
    });
}

static MANAGED_GATE: Gate = Gate::new();

#[test]
fn without_concurrent_managed_access_the_host_faults_on_managed_memory_in_use() {
    let test = "without_concurrent_managed_access_the_host_faults_on_managed_memory_in_use";
    let variables = [("DEVBUF_CUDA_TEST_CONCURRENT_MANAGED_ACCESS", "0")];
    host_read_crashes_with(test, &variables, || {
        setup();
        let mut managed = 0;
        let stream = stream(NON_BLOCKING);
        // SAFETY: a valid out-pointer; the fill covers the allocation.
        unsafe {
            ok(sys::cuMemAllocManaged(&mut managed, 4096, 1));
            (managed as *mut u8).write(1);
            MANAGED_GATE.hold(stream);
            ok(sys::cuMemsetD8Async(managed, 2, 4096, stream));
        }
        managed as *const u8
    });
}

child_test!(without_concurrent_managed_access_managed_memory_is_host_accessible_when_idle
    ["DEVBUF_CUDA_TEST_CONCURRENT_MANAGED_ACCESS" = "0"] {
    setup();
    let mut managed = 0;
    let stream = stream(NON_BLOCKING);
    // SAFETY: a valid out-pointer; host accesses happen only while no work on it is pending.
    unsafe {
        ok(sys::cuMemAllocManaged(&mut managed, 4096, 1));
        (managed as *mut u8).write_bytes(1, 4096);
        ok(sys::cuMemsetD8Async(managed + 100, 2, 100, stream));
        ok(sys::cuStreamSynchronize(stream));
        let bytes = std::slice::from_raw_parts(managed as *const u8, 4096);
        assert_eq!((bytes[99], bytes[100], bytes[199], bytes[200]), (1, 2, 2, 1));
    }
});

child_test!(pinned_and_managed_memory_are_host_accessible {
    setup();
    let pinned = pinned_alloc(256);
    let mut managed = 0;
    // SAFETY: valid out-pointers and live ranges of 256 bytes; every copy is synchronous.
    unsafe {
        ok(sys::cuMemAllocManaged(&mut managed, 256, 1));
        pinned.write_bytes(0x11, 256);
        (managed as *mut u8).write_bytes(0x22, 256);
        let device = device_alloc(256);
        ok(sys::cuMemcpyHtoD_v2(device, pinned.cast(), 256));
        ok(sys::cuMemcpyDtoD_v2(managed, device, 128));
        ok(sys::cuCtxSynchronize());
        let managed = std::slice::from_raw_parts(managed as *const u8, 256);
        assert!(managed[..128].iter().all(|&b| b == 0x11));
        assert!(managed[128..].iter().all(|&b| b == 0x22));
        let mut host = ptr::null_mut();
        ok(sys::cuMemAllocHost_v2(&mut host, 64));
        let mut mapped = 0;
        ok(sys::cuMemHostGetDevicePointer_v2(&mut mapped, host, 0));
        assert_eq!(mapped, host as u64);
    }
});

child_test!(double_frees_inner_and_foreign_pointers_are_invalid_values {
    setup();
    let heap = Box::new([0u8; 64]);
    let first = device_alloc(4096);
    let pinned = pinned_alloc(64);
    // SAFETY: the frees are the rule under test; none of them dereferences anything.
    unsafe {
        assert_eq!(sys::cuMemFree_v2(first + 16), CUresult::CUDA_ERROR_INVALID_VALUE);
        assert_eq!(sys::cuMemFreeHost(first as *mut c_void), CUresult::CUDA_ERROR_INVALID_VALUE);
        assert_eq!(sys::cuMemFree_v2(pinned as u64), CUresult::CUDA_ERROR_INVALID_VALUE);
        assert_eq!(sys::cuMemFree_v2(heap.as_ptr() as u64), CUresult::CUDA_ERROR_INVALID_VALUE);
        ok(sys::cuMemFree_v2(first));
        assert_eq!(sys::cuMemFree_v2(first), CUresult::CUDA_ERROR_INVALID_VALUE);
        ok(sys::cuMemFreeHost(pinned.cast()));
        assert_eq!(sys::cuMemFreeHost(pinned.cast()), CUresult::CUDA_ERROR_INVALID_VALUE);
        // A copy from a freed device pointer is refused, and its address is not handed out again.
        let mut byte = 0u8;
        let result = sys::cuMemcpyDtoH_v2((&raw mut byte).cast(), first, 1);
        assert_eq!(result, CUresult::CUDA_ERROR_INVALID_VALUE);
    }
    for _ in 0..100 {
        assert_ne!(device_alloc(4096), first);
    }
});

child_test!(the_nth_allocation_fails_when_asked ["DEVBUF_CUDA_TEST_FAIL_ALLOCATIONS" = "2"] {
    setup();
    device_alloc(64);
    let mut ptr = ptr::null_mut();
    // SAFETY: a valid out-pointer.
    let result = unsafe { sys::cuMemHostAlloc(&mut ptr, 64, 0) };
    assert_eq!(result, CUresult::CUDA_ERROR_OUT_OF_MEMORY);
    device_alloc(64);
    let mut used = 0;
    let mut total = 0;
    // SAFETY: valid out-pointers.
    ok(unsafe { sys::cuMemGetInfo_v2(&mut used, &mut total) });
    let mut huge = 0;
    // SAFETY: a valid out-pointer.
    let result = unsafe { sys::cuMemAlloc_v2(&mut huge, total + 1) };
    assert_eq!(result, CUresult::CUDA_ERROR_OUT_OF_MEMORY);
});

child_test!(an_allocation_fails_with_the_code_asked_for ["DEVBUF_CUDA_TEST_FAIL_ALLOCATIONS" = "1:NOT_SUPPORTED,2:INVALID_CONTEXT"] {
    setup();
    let mut ptr = 0;
    // SAFETY: a valid out-pointer; the stream is the legacy default stream.
    let result = unsafe { sys::cuMemAllocAsync(&mut ptr, 64, 1 as CUstream) };
    assert_eq!(result, CUresult::CUDA_ERROR_NOT_SUPPORTED);
    // SAFETY: a valid out-pointer.
    let result = unsafe { sys::cuMemAlloc_v2(&mut ptr, 64) };
    assert_eq!(result, CUresult::CUDA_ERROR_INVALID_CONTEXT);
    device_alloc(64);
});

fn attributes(ptr: u64) -> (u32, bool, i32, CUcontext) {
    let (mut kind, mut managed, mut ordinal, mut context) =
        (0u32, 0u8, -1i32, ptr::null_mut::<sys::CUctx_st>());
    let mut asked = [
        P::CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
        P::CU_POINTER_ATTRIBUTE_IS_MANAGED,
        P::CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
        P::CU_POINTER_ATTRIBUTE_CONTEXT,
    ];
    let mut values: [*mut c_void; 4] = [
        (&raw mut kind).cast(),
        (&raw mut managed).cast(),
        (&raw mut ordinal).cast(),
        (&raw mut context).cast(),
    ];
    // SAFETY: each value points at a local of its attribute's type.
    ok(unsafe { sys::cuPointerGetAttributes(4, asked.as_mut_ptr(), values.as_mut_ptr(), ptr) });
    (kind, managed != 0, ordinal, context)
}

child_test!(pointer_attributes_describe_memory_as_documented {
    init();
    enter(0);
    let one = enter(1);
    let device = device_alloc(1000);
    let pinned = pinned_alloc(1000) as u64;
    let mut managed = 0;
    // SAFETY: a valid out-pointer.
    ok(unsafe { sys::cuMemAllocManaged(&mut managed, 1000, 1) });
    assert_eq!(attributes(device + 999), (2, false, 1, one));
    assert_eq!(attributes(pinned), (1, false, 1, one));
    assert_eq!(attributes(managed + 10), (2, true, 1, one));
    // Memory the driver does not know: success, with the null answers.
    let heap = Box::new([0u8; 16]);
    for unknown in [heap.as_ptr() as u64, 0, device + 1000] {
        assert_eq!(attributes(unknown), (0, false, -2, ptr::null_mut()));
    }
    let (mut start, mut size, mut kind) = (0u64, 0usize, 0u32);
    // SAFETY: valid out-pointers of each attribute's type.
    unsafe {
        ok(sys::cuPointerGetAttribute((&raw mut start).cast(), P::CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, device + 7));
        ok(sys::cuPointerGetAttribute((&raw mut size).cast(), P::CU_POINTER_ATTRIBUTE_RANGE_SIZE, device + 7));
        let result = sys::cuPointerGetAttribute((&raw mut kind).cast(), P::CU_POINTER_ATTRIBUTE_MEMORY_TYPE, heap.as_ptr() as u64);
        assert_eq!(result, CUresult::CUDA_ERROR_INVALID_VALUE);
        let mut host = ptr::null_mut::<c_void>();
        let result = sys::cuPointerGetAttribute((&raw mut host).cast(), P::CU_POINTER_ATTRIBUTE_HOST_POINTER, device);
        assert_eq!(result, CUresult::CUDA_ERROR_INVALID_VALUE);
        let (mut base, mut length) = (0, 0);
        ok(sys::cuMemGetAddressRange_v2(&mut base, &mut length, device + 500));
        assert_eq!((base, length), (device, 1000));
    }
    assert_eq!((start, size), (device, 1000));
});

// NVIDIA's cuda-bindings test `test_all_CUresult_codes`: every CUresult has a name and a string.
child_test!(every_returned_code_has_a_name_and_a_description {
    for code in [
        CUresult::CUDA_ERROR_LAUNCH_FAILED,
        CUresult::CUDA_ERROR_PEER_ACCESS_UNSUPPORTED,
        CUresult::CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,
        CUresult::CUDA_ERROR_INVALID_VALUE,
        CUresult::CUDA_ERROR_NOT_INITIALIZED,
        CUresult::CUDA_ERROR_INVALID_CONTEXT,
        CUresult::CUDA_ERROR_ILLEGAL_ADDRESS,
        CUresult::CUDA_ERROR_NOT_READY,
        CUresult::CUDA_ERROR_NOT_SUPPORTED,
        CUresult::CUDA_ERROR_CONTEXT_IS_DESTROYED,
        CUresult::CUDA_ERROR_DEVICE_UNAVAILABLE,
    ] {
        let (mut name, mut description) = (ptr::null(), ptr::null());
        // SAFETY: valid out-pointers; the strings are static.
        unsafe {
            ok(sys::cuGetErrorName(code, &mut name));
            ok(sys::cuGetErrorString(code, &mut description));
            assert_eq!(CStr::from_ptr(name).to_str().unwrap(), format!("{code:?}"));
            assert!(!CStr::from_ptr(description).to_bytes().is_empty());
        }
    }
});

// NVIDIA's cuda-bindings test `test_get_error_name_and_string`: cuGetErrorString says "no error"
// for CUDA_SUCCESS and "invalid device ordinal" for the CUDA_ERROR_INVALID_DEVICE of
// cuDeviceGet(-1), the driver's own words with nothing added.
child_test!(error_strings_are_the_drivers_own_words {
    init();
    let mut device = 0;
    // SAFETY: a valid out-pointer.
    let invalid = unsafe { sys::cuDeviceGet(&mut device, -1) };
    assert_eq!(invalid, CUresult::CUDA_ERROR_INVALID_DEVICE);
    for (code, expected) in [
        (CUresult::CUDA_SUCCESS, "no error"),
        (invalid, "invalid device ordinal"),
        (CUresult::CUDA_ERROR_NOT_INITIALIZED, "initialization error"),
        (CUresult::CUDA_ERROR_NOT_SUPPORTED, "operation not supported"),
    ] {
        let mut description = ptr::null();
        // SAFETY: a valid out-pointer; the string is static.
        ok(unsafe { sys::cuGetErrorString(code, &mut description) });
        // SAFETY: the driver returned a NUL-terminated string.
        assert_eq!(unsafe { CStr::from_ptr(description) }.to_str().unwrap(), expected);
    }
});

type Status = sys::CUdriverProcAddressQueryResult;

/// `cuGetProcAddress_v2(name, version, flags)`: the result, the function and the status.
fn lookup(name: &CStr, version: i32, flags: u64) -> (CUresult, *mut c_void, Status) {
    let mut function = ptr::null_mut();
    let mut status = Status::CU_GET_PROC_ADDRESS_SUCCESS;
    // SAFETY: a NUL-terminated name and valid out-pointers.
    let result = unsafe {
        sys::cuGetProcAddress_v2(name.as_ptr(), &mut function, version, flags, &mut status)
    };
    (result, function, status)
}

fn exported(symbol: &str) -> *mut c_void {
    // SAFETY: looking a symbol up does not call it.
    *unsafe { sys::culib().get::<*mut c_void>(symbol.as_bytes()) }.unwrap()
}

// cuGetProcAddress: "if the specified CUDA version is greater than or equal to the CUDA version in
// which the driver symbol was introduced, this API will return the function pointer to the
// corresponding versioned function. If the specified CUDA version is greater than the driver
// version, the API will return CUDA_ERROR_INVALID_VALUE." "The API will return CUDA_SUCCESS and
// set the returned pfn to NULL if the requested driver function is not supported on the platform,
// no ABI compatible driver function exists for the specified cudaVersion or if the driver symbol
// is invalid", with CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND ("The requested symbol was not found") or
// CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT ("The requested symbol was found but is not supported
// by cudaVersion specified").
child_test!(get_proc_address_serves_versioned_entry_points_by_base_name
    ["DEVBUF_CUDA_TEST_HIDE" = "cuMemAllocAsync"] {
    // Works before cuInit, as loaders need.
    let (result, alloc, status) = lookup(c"cuMemAlloc", 12000, 0);
    ok(result);
    assert_eq!((alloc, status), (exported("cuMemAlloc_v2"), Status::CU_GET_PROC_ADDRESS_SUCCESS));
    let (result, function, status) = lookup(c"cuMemAlloc", 3000, 0);
    ok(result);
    assert!(function.is_null());
    assert_eq!(status, Status::CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
    for missing in [c"cuMemAllocAsync", c"cuModuleLoadData", c"cuNoSuchFunction"] {
        let (result, function, status) = lookup(missing, 12000, 0);
        ok(result);
        assert!(function.is_null(), "{missing:?}");
        assert_eq!(status, Status::CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND, "{missing:?}");
    }
    // The driver is CUDA 13.0.
    let (result, function, _) = lookup(c"cuMemAlloc", 13010, 0);
    assert_eq!(result, CUresult::CUDA_ERROR_INVALID_VALUE);
    assert!(function.is_null());
    ok(lookup(c"cuMemAlloc", 13000, 0).0);
});

// CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM: "This will enable the search for all driver
// symbols that match the requested driver symbol name including the per-thread versions. If a
// per-thread version is not found, the API will return the legacy version of the driver
// function." With the per-thread versions, stream 0 is the calling thread's per-thread stream.
child_test!(get_proc_address_serves_the_per_thread_default_stream_variants {
    const LEGACY: u64 = 1;
    const PER_THREAD: u64 = 2;
    for (name, legacy, per_thread) in [
        (c"cuMemcpyHtoD", "cuMemcpyHtoD_v2", "cuMemcpyHtoD_v2_ptds"),
        (c"cuMemcpyAsync", "cuMemcpyAsync", "cuMemcpyAsync_ptsz"),
        (c"cuMemAllocAsync", "cuMemAllocAsync", "cuMemAllocAsync_ptsz"),
        (c"cuStreamGetId", "cuStreamGetId", "cuStreamGetId_ptsz"),
        (c"cuStreamDestroy", "cuStreamDestroy_v2", "cuStreamDestroy_v2"),
    ] {
        assert_eq!(lookup(name, 13000, LEGACY).1, exported(legacy), "{name:?}");
        assert_eq!(lookup(name, 13000, 0).1, exported(legacy), "{name:?}");
        assert_eq!(lookup(name, 13000, PER_THREAD).1, exported(per_thread), "{name:?}");
    }
    setup();
    type GetId = unsafe extern "C" fn(CUstream, *mut u64) -> CUresult;
    let get_id = |flags: u64, stream: usize| {
        let function = lookup(c"cuStreamGetId", 13000, flags).1;
        // SAFETY: cuStreamGetId's ABI; a valid out-pointer.
        let function: GetId = unsafe { std::mem::transmute(function) };
        let mut id = 0;
        // SAFETY: a valid out-pointer; 0, 1 and 2 are streams of the current context.
        ok(unsafe { function(stream as CUstream, &mut id) });
        id
    };
    // CU_STREAM_LEGACY is 1, CU_STREAM_PER_THREAD 2.
    assert_eq!(get_id(LEGACY, 0), get_id(LEGACY, 1));
    assert_eq!(get_id(PER_THREAD, 0), get_id(LEGACY, 2));
    assert_ne!(get_id(PER_THREAD, 0), get_id(LEGACY, 0));
});

// Run with `cargo test -p devbuf-cuda-test-driver --features old-driver --test rules old_driver`.
#[cfg(feature = "old-driver")]
child_test!(the_old_driver_build_lacks_the_stream_ordered_allocator {
    init();
    let mut version = 0;
    // SAFETY: a valid out-pointer.
    ok(unsafe { sys::cuDriverGetVersion(&mut version) });
    assert_eq!(version, 11010);
    for name in ["cuMemAllocAsync", "cuMemFreeAsync", "cuDeviceGetDefaultMemPool"] {
        // SAFETY: looking a symbol up does not call it.
        let found = unsafe { sys::culib().get::<*const c_void>(name.as_bytes()) };
        assert!(found.is_err(), "{name} is exported");
    }
    let mut value = 0;
    // SAFETY: a valid out-pointer.
    let result = unsafe {
        sys::cuDeviceGetAttribute(&mut value, A::CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED, 0)
    };
    assert_eq!(result, CUresult::CUDA_ERROR_INVALID_VALUE);
});

child_test!(a_created_context_is_its_own_until_destroyed {
    let primary = setup();
    let mut created = ptr::null_mut();
    // SAFETY: a valid out-pointer; device 1 exists.
    ok(unsafe { sys::cuCtxCreate_v2(&mut created, 0, 1) });
    assert_ne!(created, primary);
    let mut current = ptr::null_mut();
    // SAFETY: a valid out-pointer.
    ok(unsafe { sys::cuCtxGetCurrent(&mut current) });
    assert_eq!(current, created, "a created context is current on its thread");
    let memory = device_alloc(64);
    let (_, _, ordinal, owner) = attributes(memory);
    assert_eq!((ordinal, owner), (1, created));
    let own_stream = stream(NON_BLOCKING);
    let mut stream_context = ptr::null_mut();
    // SAFETY: a live stream and a valid out-pointer.
    ok(unsafe { sys::cuStreamGetCtx(own_stream, &mut stream_context) });
    assert_eq!(stream_context, created);

    // SAFETY: the context created above, destroyed once; then a stale handle and the primary.
    unsafe {
        ok(sys::cuCtxDestroy_v2(created));
        ok(sys::cuCtxGetCurrent(&mut current));
        assert_eq!(current, primary, "destroying a current context pops it");
        assert_eq!(
            sys::cuCtxDestroy_v2(created),
            CUresult::CUDA_ERROR_CONTEXT_IS_DESTROYED
        );
        assert_eq!(sys::cuCtxDestroy_v2(primary), CUresult::CUDA_ERROR_INVALID_CONTEXT);
    }
    // Its memory went with it.
    let mut kind = 0u32;
    // SAFETY: a valid out-pointer for this attribute's type.
    let result = unsafe {
        sys::cuPointerGetAttribute(
            (&raw mut kind).cast(),
            P::CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
            memory,
        )
    };
    assert_eq!(result, CUresult::CUDA_ERROR_INVALID_VALUE);
});
