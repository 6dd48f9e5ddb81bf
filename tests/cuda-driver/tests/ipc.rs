//! The driver's rules for CUDA IPC of device memory, one test per rule, each through the exported
//! C ABI. Where a rule involves two processes the test (itself in a child process) starts a helper,
//! an `#[ignore]`d test below, as the other process, passing the handle in the environment.

mod common;

use std::ffi::{CStr, c_void};
use std::os::unix::process::ExitStatusExt;
use std::process::Output;
use std::ptr;

use common::*;
use cudarc::driver::sys::{CUipcMemHandle, CUpointer_attribute as P};

const HANDLE_VAR: &str = "DEVBUF_CUDA_TEST_IPC_HANDLE";
/// `CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS`.
const LAZY: u32 = 1;
/// The size of every exported allocation here.
const SIZE: usize = 1 << 20;
const HALF: usize = SIZE / 2;
/// `CU_MEMORYTYPE_DEVICE`.
const MEMORY_TYPE_DEVICE: u32 = 2;

fn get_handle(pointer: CUdeviceptr) -> Result<CUipcMemHandle, CUresult> {
    // SAFETY: an all-zero handle is a valid out-value.
    let mut handle: CUipcMemHandle = unsafe { std::mem::zeroed() };
    // SAFETY: a valid out-pointer.
    match unsafe { sys::cuIpcGetMemHandle(&mut handle, pointer) } {
        CUresult::CUDA_SUCCESS => Ok(handle),
        error => Err(error),
    }
}

fn bytes(handle: &CUipcMemHandle) -> Vec<u8> {
    handle.reserved.iter().map(|&byte| byte as u8).collect()
}

fn hex(handle: &CUipcMemHandle) -> String {
    bytes(handle)
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect()
}

fn unhex(text: &str) -> CUipcMemHandle {
    // SAFETY: an all-zero handle is a valid value.
    let mut handle: CUipcMemHandle = unsafe { std::mem::zeroed() };
    for (index, out) in handle.reserved.iter_mut().enumerate() {
        *out = u8::from_str_radix(text.get(2 * index..2 * index + 2).unwrap(), 16).unwrap() as _;
    }
    handle
}

/// The handle a helper was given.
fn handle_from_environment() -> CUipcMemHandle {
    unhex(&std::env::var(HANDLE_VAR).expect("run by a test that passes a handle"))
}

fn open(handle: CUipcMemHandle, flags: u32) -> Result<CUdeviceptr, CUresult> {
    let mut pointer = 0;
    // SAFETY: a valid out-pointer; the handle is passed by value.
    match unsafe { sys::cuIpcOpenMemHandle_v2(&mut pointer, handle, flags) } {
        CUresult::CUDA_SUCCESS => Ok(pointer),
        error => Err(error),
    }
}

fn close(pointer: CUdeviceptr) -> CUresult {
    // SAFETY: takes no pointers it dereferences.
    unsafe { sys::cuIpcCloseMemHandle(pointer) }
}

fn memset(pointer: CUdeviceptr, value: u8, len: usize) {
    // SAFETY: a synchronous fill of device memory the caller owns.
    ok(unsafe { sys::cuMemsetD8_v2(pointer, value, len) });
    // SAFETY: takes no pointers.
    ok(unsafe { sys::cuCtxSynchronize() });
}

fn address_range(pointer: CUdeviceptr) -> (CUdeviceptr, usize) {
    let (mut base, mut size) = (0, 0);
    // SAFETY: valid out-pointers.
    ok(unsafe { sys::cuMemGetAddressRange_v2(&mut base, &mut size, pointer) });
    (base, size)
}

fn attribute<T: Default>(attribute: P, pointer: CUdeviceptr) -> T {
    let mut value = T::default();
    // SAFETY: `value` has the attribute's C type (the caller picks it).
    ok(unsafe { sys::cuPointerGetAttribute((&mut value as *mut T).cast(), attribute, pointer) });
    value
}

/// Runs `helper` as the other process with `handle`, and asserts that it passed.
fn run_importer(helper: &str, handle: &CUipcMemHandle) {
    let output = run_helper(helper, &[(HANDLE_VAR, &hex(handle))]);
    assert!(
        output.status.success(),
        "{helper} failed:\n{}",
        describe(&output)
    );
}

fn describe(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

child_test!(only_memory_from_cumemalloc_has_an_ipc_handle {
    let context = setup();
    let device = device_alloc(SIZE);
    assert!(get_handle(device).is_ok());
    assert!(attribute::<bool>(P::CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE, device));
    let pinned = pinned_alloc(64) as CUdeviceptr;
    let (mut managed, mut pooled) = (0, 0);
    // SAFETY: valid out-pointers; the legacy stream of the current context.
    unsafe {
        ok(sys::cuMemAllocManaged(&mut managed, 64, 1));
        ok(sys::cuMemAllocAsync(&mut pooled, 64, ptr::null_mut()));
        ok(sys::cuCtxSynchronize());
    }
    assert!(!attribute::<bool>(P::CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE, pooled));
    let freed = device_alloc(64);
    // SAFETY: freed once, nothing pending on it.
    ok(unsafe { sys::cuMemFree_v2(freed) });
    let pageable = [0u8; 64];
    for pointer in [pinned, managed, pooled, freed, pageable.as_ptr() as CUdeviceptr, 0] {
        assert_eq!(get_handle(pointer).err(), Some(CUresult::CUDA_ERROR_INVALID_VALUE));
    }
    // SAFETY: a null out-pointer is refused, not written.
    let result = unsafe { sys::cuIpcGetMemHandle(ptr::null_mut(), device) };
    assert_eq!(result, CUresult::CUDA_ERROR_INVALID_VALUE);
    // SAFETY: pops the context pushed by setup.
    ok(unsafe { sys::cuCtxPopCurrent_v2(ptr::null_mut()) });
    assert_eq!(get_handle(device).err(), Some(CUresult::CUDA_ERROR_INVALID_CONTEXT));
    // SAFETY: the context retained by setup.
    ok(unsafe { sys::cuCtxPushCurrent_v2(context) });
});

child_test!(a_handle_names_the_whole_allocation_from_any_pointer_into_it {
    setup();
    let base = device_alloc(SIZE);
    let handle = bytes(&get_handle(base).unwrap());
    // The real driver answers an interior pointer with the allocation's handle, every time.
    assert_eq!(bytes(&get_handle(base + 4096).unwrap()), handle);
    assert_eq!(bytes(&get_handle(base).unwrap()), handle);
    assert_eq!(handle.len(), 64);
    // What a caller computes the base and the offset with.
    assert_eq!(address_range(base + 4096), (base, SIZE));
    let other = device_alloc(SIZE);
    assert_ne!(bytes(&get_handle(other).unwrap()), handle);
});

child_test!(a_handle_does_not_open_in_the_exporting_process {
    setup();
    let handle = get_handle(device_alloc(SIZE)).unwrap();
    assert_eq!(open(handle, LAZY).err(), Some(CUresult::CUDA_ERROR_INVALID_CONTEXT));
});

child_test!(opening_needs_a_context_the_documented_flag_and_a_handle_of_the_driver {
    init();
    // SAFETY: an all-zero handle is a valid value, just not one the driver made.
    let zeros: CUipcMemHandle = unsafe { std::mem::zeroed() };
    assert_eq!(open(zeros, LAZY).err(), Some(CUresult::CUDA_ERROR_INVALID_CONTEXT));
    enter(0);
    assert_eq!(open(zeros, LAZY).err(), Some(CUresult::CUDA_ERROR_INVALID_VALUE));
    let handle = get_handle(device_alloc(SIZE)).unwrap();
    for flags in [0, 2, 3] {
        assert_eq!(open(handle, flags).err(), Some(CUresult::CUDA_ERROR_INVALID_VALUE));
    }
    // SAFETY: a null out-pointer is refused, not written.
    let result = unsafe { sys::cuIpcOpenMemHandle_v2(ptr::null_mut(), handle, LAZY) };
    assert_eq!(result, CUresult::CUDA_ERROR_INVALID_VALUE);
});

static EXPORT_GATE: Gate = Gate::new();

child_test!(another_process_maps_the_same_bytes_as_device_memory {
    setup();
    let base = device_alloc(SIZE);
    // Written before the first export: the bytes move with the allocation.
    memset(base, 1, SIZE);
    // Queued when the allocation is first exported: lands in the shared bytes.
    let stream = stream(NON_BLOCKING);
    EXPORT_GATE.hold(stream);
    // SAFETY: device memory of SIZE bytes; the stream is synchronized below.
    ok(unsafe { sys::cuMemsetD8Async(base, 7, HALF, stream) });
    let handle = get_handle(base + 4096).unwrap();
    EXPORT_GATE.open();
    // SAFETY: a stream of the current context.
    ok(unsafe { sys::cuStreamSynchronize(stream) });
    run_importer("importer_reads_7_1_and_writes_9_at_4096", &handle);
    let bytes = read(base, SIZE);
    assert!(bytes[..4096].iter().all(|&b| b == 7));
    assert!(bytes[4096..8192].iter().all(|&b| b == 9), "the importer's write is not here");
    assert!(bytes[8192..HALF].iter().all(|&b| b == 7));
    assert!(bytes[HALF..].iter().all(|&b| b == 1));
});

/// The importer of `another_process_maps_the_same_bytes_as_device_memory`.
#[test]
#[ignore = "run by another_process_maps_the_same_bytes_as_device_memory"]
fn importer_reads_7_1_and_writes_9_at_4096() {
    let context = setup();
    let pointer = open(handle_from_environment(), LAZY).unwrap();
    // The mapping is the whole allocation, device memory of this process's context.
    assert_eq!(address_range(pointer), (pointer, SIZE));
    let memory_type: u32 = attribute(P::CU_POINTER_ATTRIBUTE_MEMORY_TYPE, pointer);
    assert_eq!(memory_type, MEMORY_TYPE_DEVICE);
    let ordinal: i32 = attribute(P::CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, pointer);
    assert_eq!(ordinal, 0);
    let owner: *mut c_void = attribute(P::CU_POINTER_ATTRIBUTE_CONTEXT, pointer);
    assert_eq!(owner, context.cast());
    assert!(!attribute::<bool>(
        P::CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE,
        pointer
    ));
    let bytes = read(pointer, SIZE);
    assert!(bytes[..HALF].iter().all(|&b| b == 7));
    assert!(bytes[HALF..].iter().all(|&b| b == 1));
    let stream = stream(NON_BLOCKING);
    // SAFETY: inside the mapping; the stream is synchronized before the close.
    unsafe {
        ok(sys::cuMemsetD8Async(pointer + 4096, 9, 4096, stream));
        ok(sys::cuStreamSynchronize(stream));
    }
    assert_eq!(close(pointer), CUresult::CUDA_SUCCESS);
}

child_test!(the_host_cannot_touch_an_opened_mapping {
    setup();
    let handle = get_handle(device_alloc(SIZE)).unwrap();
    let helper = "importer_reads_the_mapping_on_the_host";
    let output = run_helper(helper, &[(HANDLE_VAR, &hex(&handle))]);
    assert_eq!(output.status.signal(), Some(libc::SIGSEGV), "{}", describe(&output));
});

/// The importer of `the_host_cannot_touch_an_opened_mapping`: it must crash.
#[test]
#[ignore = "run by the_host_cannot_touch_an_opened_mapping"]
fn importer_reads_the_mapping_on_the_host() {
    setup();
    let pointer = open(handle_from_environment(), LAZY).unwrap() as *const u8;
    // SAFETY: deliberately not: this read must fault, which is the rule under test.
    let byte = unsafe { pointer.read_volatile() };
    panic!("the host read {pointer:?} ({byte}) without a fault");
}

child_test!(opens_are_counted_and_the_last_close_unmaps {
    setup();
    let base = device_alloc(SIZE);
    memset(base, 7, SIZE);
    run_importer("importer_opens_twice_and_closes_twice", &get_handle(base).unwrap());
    // Closing the mapping left the exporter's memory alone.
    assert!(read(base, SIZE).iter().all(|&b| b == 7));
});

/// The importer of `opens_are_counted_and_the_last_close_unmaps`.
#[test]
#[ignore = "run by opens_are_counted_and_the_last_close_unmaps"]
fn importer_opens_twice_and_closes_twice() {
    setup();
    let handle = handle_from_environment();
    let pointer = open(handle, LAZY).unwrap();
    assert_eq!(open(handle, LAZY), Ok(pointer), "a second open maps again");
    // The mapping is not an allocation of this process.
    // SAFETY: the driver refuses it; nothing is freed.
    let freed = unsafe { sys::cuMemFree_v2(pointer) };
    assert_eq!(freed, CUresult::CUDA_ERROR_INVALID_VALUE);
    assert_eq!(close(pointer), CUresult::CUDA_SUCCESS);
    assert!(
        read(pointer, 64).iter().all(|&b| b == 7),
        "one open is left"
    );
    assert_eq!(close(pointer), CUresult::CUDA_SUCCESS);
    let mut byte = 0u8;
    // SAFETY: a one-byte destination; the source is refused.
    let result = unsafe { sys::cuMemcpyDtoH_v2((&mut byte as *mut u8).cast(), pointer, 1) };
    assert_eq!(
        result,
        CUresult::CUDA_ERROR_INVALID_VALUE,
        "the mapping is still there"
    );
    assert_eq!(close(pointer), CUresult::CUDA_ERROR_INVALID_VALUE);
    // Opened afresh after the last close: a new mapping of the same bytes.
    let again = open(handle, LAZY).unwrap();
    assert!(read(again, 64).iter().all(|&b| b == 7));
    assert_eq!(close(again), CUresult::CUDA_SUCCESS);
}

child_test!(closing_needs_a_context_and_an_opened_pointer {
    let context = setup();
    let device = device_alloc(SIZE);
    assert_eq!(close(device), CUresult::CUDA_ERROR_INVALID_VALUE);
    assert_eq!(close(0), CUresult::CUDA_ERROR_INVALID_VALUE);
    // SAFETY: pops the context pushed by setup, and pushes it back.
    unsafe {
        ok(sys::cuCtxPopCurrent_v2(ptr::null_mut()));
        assert_eq!(close(device), CUresult::CUDA_ERROR_INVALID_CONTEXT);
        ok(sys::cuCtxPushCurrent_v2(context));
    }
});

child_test!(a_handle_no_longer_opens_once_the_exporter_freed_the_memory {
    setup();
    let base = device_alloc(SIZE);
    let handle = get_handle(base).unwrap();
    // SAFETY: freed once, nothing pending on it.
    ok(unsafe { sys::cuMemFree_v2(base) });
    // Another allocation exported since must not be what the stale handle opens.
    get_handle(device_alloc(SIZE)).unwrap();
    run_importer("importer_finds_the_handle_stale", &handle);
});

child_test!(a_handle_no_longer_opens_once_the_exporter_exited {
    let output = run_helper("exporter_prints_a_handle_and_exits", &[]);
    assert!(output.status.success(), "{}", describe(&output));
    let stdout = String::from_utf8_lossy(&output.stdout);
    let handle = stdout
        .lines()
        // The harness prints the test's name on the same line.
        .find_map(|line| line.split_once("handle=").map(|(_, handle)| handle))
        .expect("the exporter printed its handle");
    setup();
    assert_eq!(open(unhex(handle), LAZY).err(), Some(CUresult::CUDA_ERROR_INVALID_VALUE));
});

/// The exporter of `a_handle_no_longer_opens_once_the_exporter_exited`.
#[test]
#[ignore = "run by a_handle_no_longer_opens_once_the_exporter_exited"]
fn exporter_prints_a_handle_and_exits() {
    setup();
    println!("handle={}", hex(&get_handle(device_alloc(SIZE)).unwrap()));
}

/// The importer of `a_handle_no_longer_opens_once_the_exporter_freed_the_memory`.
#[test]
#[ignore = "run by a_handle_no_longer_opens_once_the_exporter_freed_the_memory"]
fn importer_finds_the_handle_stale() {
    setup();
    let result = open(handle_from_environment(), LAZY);
    assert_eq!(result.err(), Some(CUresult::CUDA_ERROR_INVALID_VALUE));
}

child_test!(get_proc_address_serves_the_ipc_entry_points {
    let lookup = |name: &CStr, version: i32| {
        let mut function = ptr::null_mut();
        // SAFETY: a NUL-terminated name and a valid out-pointer.
        ok(unsafe {
            sys::cuGetProcAddress_v2(name.as_ptr(), &mut function, version, 0, ptr::null_mut())
        });
        function
    };
    let exported = |symbol: &[u8]| {
        // SAFETY: looking a symbol up does not call it.
        *unsafe { sys::culib().get::<*mut c_void>(symbol) }.unwrap()
    };
    assert_eq!(lookup(c"cuIpcOpenMemHandle", 4010), exported(b"cuIpcOpenMemHandle"));
    assert_eq!(lookup(c"cuIpcOpenMemHandle", 12000), exported(b"cuIpcOpenMemHandle_v2"));
    assert_eq!(lookup(c"cuIpcGetMemHandle", 12000), exported(b"cuIpcGetMemHandle"));
    assert_eq!(lookup(c"cuIpcCloseMemHandle", 12000), exported(b"cuIpcCloseMemHandle"));
    // IPC events are not modelled: not found, as documented for a missing function.
    assert!(lookup(c"cuIpcGetEventHandle", 12000).is_null());
});

/// Runs `helper` as the other process with `handle` and `variables`; whether it passed.
fn importer_passes(helper: &str, handle: &CUipcMemHandle, variables: &[(&str, &str)]) -> bool {
    let hex = hex(handle);
    let mut all = vec![(HANDLE_VAR, hex.as_str())];
    all.extend_from_slice(variables);
    let output = run_helper(helper, &all);
    if !output.status.success() {
        eprintln!("{helper} with {variables:?}:\n{}", describe(&output));
    }
    output.status.success()
}

// cuIpcOpenMemHandle: "For contexts on different devices cuIpcOpenMemHandle can attempt to enable
// peer access between the devices as if the user called cuCtxEnablePeerAccess ...
// cuDeviceCanAccessPeer can determine if a mapping is possible", and it "can open handles to
// devices that may not be visible in the process calling the API". Device 0's handle opens in a
// context of device 1 where the two are peers, also when device 0 is hidden; not where they are not.
child_test!(a_handle_opens_on_another_device_only_where_the_devices_are_peers {
    setup();
    let device = device_alloc(SIZE);
    memset(device, 0x5A, SIZE);
    let handle = get_handle(device).unwrap();
    let no_peers = ("DEVBUF_CUDA_TEST_NO_PEER_ACCESS", "0-1");
    let only_device_1 = ("CUDA_VISIBLE_DEVICES", "1");
    assert!(importer_passes("importer_on_another_device_reads_5a", &handle, &[]));
    assert!(importer_passes("importer_on_another_device_reads_5a", &handle, &[only_device_1]));
    assert!(importer_passes("importer_on_another_device_cannot_map", &handle, &[no_peers]));
    assert!(importer_passes("importer_on_another_device_cannot_map", &handle, &[no_peers, only_device_1]));
});

/// The device of the exporter's device 1: its last ordinal (device 1, or 0 when it sees one).
fn enter_last_device() {
    init();
    let mut count = 0;
    // SAFETY: a valid out-pointer.
    ok(unsafe { sys::cuDeviceGetCount(&mut count) });
    enter(count - 1);
}

#[test]
#[ignore = "run by a_handle_opens_on_another_device_only_where_the_devices_are_peers"]
fn importer_on_another_device_reads_5a() {
    enter_last_device();
    let pointer = open(handle_from_environment(), LAZY).unwrap();
    assert!(read(pointer, SIZE).iter().all(|&b| b == 0x5A));
    ok(close(pointer));
}

#[test]
#[ignore = "run by a_handle_opens_on_another_device_only_where_the_devices_are_peers"]
fn importer_on_another_device_cannot_map() {
    enter_last_device();
    assert_eq!(
        open(handle_from_environment(), LAZY),
        Err(CUresult::CUDA_ERROR_MAP_FAILED)
    );
}

// cuIpcOpenMemHandle: "CUipcMemHandles from each CUdevice in a given process may only be opened by
// one CUcontext per CUdevice per other process." While the primary context of device 0 has the
// exporter's handle open, a created context of device 0 cannot open it; once closed, it can.
child_test!(one_context_per_device_opens_an_exporter_s_handles {
    setup();
    let device = device_alloc(SIZE);
    memset(device, 0x3C, SIZE);
    assert!(importer_passes("importer_opens_in_one_context_per_device", &get_handle(device).unwrap(), &[]));
});

#[test]
#[ignore = "run by one_context_per_device_opens_an_exporter_s_handles"]
fn importer_opens_in_one_context_per_device() {
    setup();
    let handle = handle_from_environment();
    let in_primary = open(handle, LAZY).unwrap();
    let mut created = ptr::null_mut();
    // SAFETY: a valid out-pointer; device 0 exists. The created context becomes current.
    ok(unsafe { sys::cuCtxCreate_v2(&mut created, 0, 0) });
    assert_eq!(
        open(handle, LAZY),
        Err(CUresult::CUDA_ERROR_INVALID_CONTEXT)
    );
    // SAFETY: pops the created context; the primary one is current again.
    ok(unsafe { sys::cuCtxPopCurrent_v2(ptr::null_mut()) });
    ok(close(in_primary));
    // SAFETY: the created context, alive.
    ok(unsafe { sys::cuCtxPushCurrent_v2(created) });
    let in_created = open(handle, LAZY).unwrap();
    assert!(read(in_created, SIZE).iter().all(|&b| b == 0x3C));
    ok(close(in_created));
}

// CUDA Programming Guide, "Interprocess Communication": cudaMalloc may sub-allocate from a larger
// block and IPC shares the whole block, so "only share allocations with a 2MiB aligned size". The
// double gives an allocation of such a size blocks of its own: it starts on a 2 MiB boundary.
child_test!(an_allocation_of_whole_ipc_blocks_starts_a_block {
    setup();
    let _small = device_alloc(4096);
    for size in [2 << 20, 6 << 20] {
        let pointer = device_alloc(size);
        assert_eq!(pointer % (2 << 20), 0, "{size} bytes at {pointer:#x}");
        assert_eq!(address_range(pointer), (pointer, size));
        let _after = device_alloc(4096);
    }
});
