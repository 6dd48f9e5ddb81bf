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

fn uuid_of(ordinal: i32) -> [u8; 16] {
    let mut uuid = sys::CUuuid { bytes: [0; 16] };
    // SAFETY: a valid out-pointer.
    ok(unsafe { sys::cuDeviceGetUuid(&mut uuid, ordinal) });
    uuid.bytes.map(|byte| byte as u8)
}

fn device_count() -> i32 {
    let mut count = 0;
    // SAFETY: a valid out-pointer.
    ok(unsafe { sys::cuDeviceGetCount(&mut count) });
    count
}

// CUDA Programming Guide, "CUDA Environment Variables", CUDA_VISIBLE_DEVICES: "GPU identifiers are
// given as integer indices or as UUID strings"; the devices "are enumerated in the order of the
// sequence". A UUID (cuDeviceGetUuid) belongs to the device, not to its ordinal.
child_test!(visible_devices_reorder_ordinals_and_uuids_stay_with_their_device
    ["CUDA_VISIBLE_DEVICES" = "1,0"] {
    init();
    assert_eq!(device_count(), 2);
    assert_eq!(&uuid_of(0), b"devbuf-test-dev\x01");
    assert_eq!(&uuid_of(1), b"devbuf-test-dev\x00");
});

child_test!(a_device_s_uuid_in_visible_devices_names_it
    ["CUDA_VISIBLE_DEVICES" = "GPU-64657662-7566-2d74-6573-742d64657601"] {
    init();
    assert_eq!(device_count(), 1);
    assert_eq!(&uuid_of(0), b"devbuf-test-dev\x01");
});

fn pci_bus_id(ordinal: i32) -> String {
    let mut text = [0 as std::ffi::c_char; 16];
    // SAFETY: `text` holds 16 bytes.
    ok(unsafe { sys::cuDeviceGetPCIBusId(text.as_mut_ptr(), 16, ordinal) });
    // SAFETY: the driver NUL-terminates what it writes.
    unsafe { std::ffi::CStr::from_ptr(text.as_ptr()) }
        .to_str()
        .unwrap()
        .to_string()
}

fn device_by_pci_bus_id(text: &std::ffi::CStr) -> Result<i32, CUresult> {
    let mut device = -1;
    // SAFETY: a valid out-pointer and a NUL-terminated string.
    match unsafe { sys::cuDeviceGetByPCIBusId(&mut device, text.as_ptr()) } {
        CUresult::CUDA_SUCCESS => Ok(device),
        code => Err(code),
    }
}

// A PCI bus id, like a UUID, belongs to the device, whatever its ordinal under
// CUDA_VISIBLE_DEVICES (numba-cuda finds an IPC handle's device by its PCI domain, bus and
// device), and cuDeviceGetByPCIBusId finds the device by it in each of its documented forms:
// "[domain]:[bus]:[device].[function] [domain]:[bus]:[device] [bus]:[device].[function]".
child_test!(pci_bus_ids_stay_with_their_device_and_name_it
    ["CUDA_VISIBLE_DEVICES" = "1,0"] {
    init();
    assert_eq!((pci_bus_id(0), pci_bus_id(1)), ("0000:11:00.0".into(), "0000:10:00.0".into()));
    let mut bus = -1;
    // SAFETY: a valid out-pointer.
    ok(unsafe {
        sys::cuDeviceGetAttribute(&mut bus, sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, 0)
    });
    assert_eq!(bus, 0x11);
    for form in [c"0000:11:00.0", c"0:11:0", c"11:00.0", c"0000:11:00"] {
        assert_eq!(device_by_pci_bus_id(form), Ok(0), "{form:?}");
    }
    assert_eq!(device_by_pci_bus_id(c"0000:10:00.0"), Ok(1));
    assert_eq!(device_by_pci_bus_id(c"0000:12:00.0"), Err(CUresult::CUDA_ERROR_INVALID_DEVICE));
    assert_eq!(device_by_pci_bus_id(c"0000:11:01.0"), Err(CUresult::CUDA_ERROR_INVALID_DEVICE));
    for malformed in [c"", c"11", c"11:00", c"0000:xx:00.0", c"0:11:00.0:0", c"0000:11:00."] {
        assert_eq!(
            device_by_pci_bus_id(malformed),
            Err(CUresult::CUDA_ERROR_INVALID_VALUE),
            "{malformed:?}"
        );
    }
    let mut device = -1;
    // SAFETY: a NULL string is refused before it is read.
    let null = unsafe { sys::cuDeviceGetByPCIBusId(&mut device, ptr::null()) };
    assert_eq!(null, CUresult::CUDA_ERROR_INVALID_VALUE);
});

fn can_access_peer(device: i32, peer: i32) -> i32 {
    let mut answer = -1;
    // SAFETY: a valid out-pointer.
    ok(unsafe { sys::cuDeviceCanAccessPeer(&mut answer, device, peer) });
    answer
}

// cuDeviceCanAccessPeer, cuCtxEnablePeerAccess, cuCtxDisablePeerAccess as documented (their
// codes quoted in src/peer.rs), between peers.
child_test!(peers_enable_and_disable_access_to_each_other_s_context {
    init();
    assert_eq!((can_access_peer(0, 1), can_access_peer(1, 0), can_access_peer(0, 0)), (1, 1, 0));
    let device_1 = enter(1);
    pop();
    let device_0 = enter(0);
    // SAFETY: contexts from the driver (or the current one, which it refuses).
    unsafe {
        assert_eq!(sys::cuCtxDisablePeerAccess(device_1), CUresult::CUDA_ERROR_PEER_ACCESS_NOT_ENABLED);
        assert_eq!(sys::cuCtxEnablePeerAccess(device_1, 1), CUresult::CUDA_ERROR_INVALID_VALUE);
        assert_eq!(sys::cuCtxEnablePeerAccess(device_0, 0), CUresult::CUDA_ERROR_INVALID_CONTEXT);
        ok(sys::cuCtxEnablePeerAccess(device_1, 0));
        assert_eq!(sys::cuCtxEnablePeerAccess(device_1, 0), CUresult::CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED);
        ok(sys::cuCtxDisablePeerAccess(device_1));
        assert_eq!(sys::cuCtxDisablePeerAccess(device_1), CUresult::CUDA_ERROR_PEER_ACCESS_NOT_ENABLED);
    }
});

// The same between devices that are not peers: "Returns CUDA_ERROR_PEER_ACCESS_UNSUPPORTED if
// cuDeviceCanAccessPeer() indicates that the CUdevice of the current context cannot directly
// access memory from the CUdevice of peerContext."
child_test!(devices_that_are_not_peers_refuse_peer_access
    ["DEVBUF_CUDA_TEST_NO_PEER_ACCESS" = "0-1"] {
    init();
    assert_eq!((can_access_peer(0, 1), can_access_peer(1, 0)), (0, 0));
    let device_1 = enter(1);
    pop();
    enter(0);
    // SAFETY: a context from the driver.
    assert_eq!(unsafe { sys::cuCtxEnablePeerAccess(device_1, 0) }, CUresult::CUDA_ERROR_PEER_ACCESS_UNSUPPORTED);
});

const LEN: usize = 1 << 12;

fn pool_alloc(ordinal: i32, stream: CUstream) -> (sys::CUmemoryPool, CUdeviceptr) {
    let (mut pool, mut ptr) = (ptr::null_mut(), 0);
    // SAFETY: valid out-pointers; the stream is alive.
    unsafe {
        ok(sys::cuDeviceGetDefaultMemPool(&mut pool, ordinal));
        ok(sys::cuMemAllocFromPoolAsync(&mut ptr, LEN, pool, stream));
        ok(sys::cuStreamSynchronize(stream));
    }
    (pool, ptr)
}

fn set_access(pool: sys::CUmemoryPool, ordinal: i32, flags: sys::CUmemAccess_flags) -> CUresult {
    let location = sys::CUmemLocation {
        type_: sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE,
        id: ordinal,
    };
    // SAFETY: one valid descriptor.
    unsafe { sys::cuMemPoolSetAccess(pool, &sys::CUmemAccessDesc { location, flags }, 1) }
}

// NVIDIA's cuda.core test_peer_access_basic: copying device 1's pool memory on a stream of device
// 0 is CUDA_ERROR_INVALID_VALUE until the pool gives device 0 access (cuMemPoolSetAccess), works
// then, and fails again once the access is revoked. Between devices that are not peers, access
// cannot be given.
child_test!(another_device_s_pool_memory_needs_the_pool_s_access {
    init();
    enter(1);
    let (pool, on_device_1) = pool_alloc(1, stream(0));
    pop();
    enter(0);
    let on_device_0 = device_alloc(LEN);
    let copier = stream(0);
    let copy = |to, from| {
        // SAFETY: both are LEN bytes of live memory; the stream is alive.
        let result = unsafe { sys::cuMemcpyAsync(to, from, LEN, copier) };
        // SAFETY: the stream is alive.
        ok(unsafe { sys::cuStreamSynchronize(copier) });
        result
    };
    use sys::CUmemAccess_flags::*;
    assert_eq!(copy(on_device_1, on_device_0), CUresult::CUDA_ERROR_INVALID_VALUE);
    assert_eq!(copy(on_device_0, on_device_1), CUresult::CUDA_ERROR_INVALID_VALUE);
    ok(set_access(pool, 0, CU_MEM_ACCESS_FLAGS_PROT_READWRITE));
    // SAFETY: LEN bytes of live memory.
    ok(unsafe { sys::cuMemsetD8_v2(on_device_0, 0x33, LEN) });
    ok(copy(on_device_1, on_device_0));
    assert!(read(on_device_1, LEN).iter().all(|&b| b == 0x33));
    ok(set_access(pool, 0, CU_MEM_ACCESS_FLAGS_PROT_NONE));
    assert_eq!(copy(on_device_1, on_device_0), CUresult::CUDA_ERROR_INVALID_VALUE);
});

// A peer copy (cuMemcpyPeerAsync) reaches another device's pool memory without the pool's
// access: the Programming Guide's stream-ordered allocator chapter names cudaMemcpyPeerAsync for
// copying pool memory between devices without that access (staged through the host by the
// driver). The pool's access stays as it was.
child_test!(a_peer_copy_reaches_another_device_s_pool_memory_without_its_access {
    init();
    let device_1 = enter(1);
    let (pool, on_device_1) = pool_alloc(1, stream(0));
    pop();
    let device_0 = enter(0);
    let on_device_0 = device_alloc(LEN);
    let copier = stream(0);
    // SAFETY: LEN bytes of live memory in each context; the stream is alive.
    unsafe {
        ok(sys::cuMemsetD8_v2(on_device_0, 0x5a, LEN));
        ok(sys::cuMemcpyPeerAsync(on_device_1, device_1, on_device_0, device_0, LEN, copier));
        ok(sys::cuMemsetD8_v2(on_device_0, 0, LEN));
        ok(sys::cuMemcpyPeerAsync(on_device_0, device_0, on_device_1, device_1, LEN, copier));
        ok(sys::cuStreamSynchronize(copier));
    }
    assert!(read(on_device_0, LEN).iter().all(|&b| b == 0x5a));
    let location = sys::CUmemLocation {
        type_: sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE,
        id: 0,
    };
    let mut flags = sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    // SAFETY: valid pointers to live locals; the pool is the driver's.
    ok(unsafe { sys::cuMemPoolGetAccess(&mut flags, pool, (&raw const location).cast_mut()) });
    assert_eq!(flags, sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_NONE);
});

child_test!(a_pool_cannot_give_access_to_a_device_that_is_no_peer
    ["DEVBUF_CUDA_TEST_NO_PEER_ACCESS" = "1-0"] {
    init();
    enter(1);
    let (pool, _) = pool_alloc(1, stream(0));
    use sys::CUmemAccess_flags::*;
    assert_eq!(set_access(pool, 0, CU_MEM_ACCESS_FLAGS_PROT_READWRITE), CUresult::CUDA_ERROR_INVALID_DEVICE);
    ok(set_access(pool, 0, CU_MEM_ACCESS_FLAGS_PROT_NONE));
});

static PEER_GATE: Gate = Gate::new();

// cuMemcpyPeerAsync copies between the memory of two contexts on the stream named, and waits for
// nothing else ("asynchronous with respect to the host and all work on other streams");
// cuMemcpyPeer is "serialized with respect [to] all pending and future asynchronous work in to
// the current context, srcContext, and dstContext".
child_test!(peer_copies_are_ordered_as_documented {
    init();
    let device_1 = enter(1);
    let on_device_1 = device_alloc(LEN);
    let held = 1 as CUstream;
    PEER_GATE.hold(held);
    // SAFETY: LEN bytes of live memory; the legacy stream of device 1 is held at the gate.
    ok(unsafe { sys::cuMemsetD8Async(on_device_1, 0x44, LEN, held) });
    pop();
    let device_0 = enter(0);
    let on_device_0 = device_alloc(LEN);
    let copier = stream(NON_BLOCKING);
    // SAFETY: LEN bytes of live memory in each context.
    unsafe {
        ok(sys::cuMemsetD8_v2(on_device_0, 0x11, LEN));
        // Asynchronous: runs at once, before device 1's held fill.
        ok(sys::cuMemcpyPeerAsync(on_device_1, device_1, on_device_0, device_0, LEN, copier));
        ok(sys::cuStreamSynchronize(copier));
    }
    let opener = std::thread::spawn(|| {
        std::thread::sleep(std::time::Duration::from_millis(200));
        PEER_GATE.open();
    });
    // Synchronous: waits for device 1's legacy stream, so the fill lands first, then the copy.
    // SAFETY: as above.
    ok(unsafe { sys::cuMemcpyPeer(on_device_0, device_0, on_device_1, device_1, LEN) });
    opener.join().unwrap();
    assert!(read(on_device_0, LEN).iter().all(|&b| b == 0x44));
    // A context's memory named with another device's context is refused.
    // SAFETY: as above.
    let refused =
        unsafe { sys::cuMemcpyPeerAsync(on_device_1, device_0, on_device_0, device_0, LEN, copier) };
    assert_eq!(refused, CUresult::CUDA_ERROR_INVALID_VALUE);
});

static SYNC_GATE: Gate = Gate::new();

// A synchronous copy (cuMemcpy) from another device's memory is ordered after that device's
// legacy default stream, as cuMemcpyPeer is: the bytes it reads are those the other device's
// pending fill writes.
child_test!(a_synchronous_copy_between_devices_waits_for_the_other_device_s_legacy_stream {
    init();
    enter(1);
    let on_device_1 = device_alloc(LEN);
    let held = 1 as CUstream;
    // SAFETY: LEN bytes of live memory.
    ok(unsafe { sys::cuMemsetD8_v2(on_device_1, 0x01, LEN) });
    SYNC_GATE.hold(held);
    // SAFETY: as above; device 1's legacy stream is held at the gate.
    ok(unsafe { sys::cuMemsetD8Async(on_device_1, 0x66, LEN, held) });
    pop();
    enter(0);
    let on_device_0 = device_alloc(LEN);
    let opener = std::thread::spawn(|| {
        std::thread::sleep(std::time::Duration::from_millis(200));
        SYNC_GATE.open();
    });
    // SAFETY: LEN bytes of live memory at both ends.
    ok(unsafe { sys::cuMemcpy(on_device_0, on_device_1, LEN) });
    opener.join().unwrap();
    assert!(read(on_device_0, LEN).iter().all(|&b| b == 0x66));
});
