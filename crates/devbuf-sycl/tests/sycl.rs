//! The SYCL backend against the real runtime: devices, contexts, capsule payloads, the device
//! without USM (PoCL), and a missing runtime.

use std::ffi::c_void;
use std::ptr::NonNull;
use std::sync::Arc;

use devbuf_core::conformance::{Outcome, run_all};
use devbuf_core::dlpark::ffi::{DLDevice, DLDeviceType};
use devbuf_core::{
    Availability, Backend, Buffer, CompletedEvent, Error, Event, Interop, MemKind, Queue,
};
use devbuf_sycl::{Runtime, SyclBackend, SyclQueue};

/// The loaded runtime when the backend is available, or `None` after printing why the test is
/// skipped. Panics instead when DEVBUF_REQUIRE lists sycl (or all), as CI sets it.
fn runtime_or_skip(test: &str) -> Option<&'static Runtime> {
    let backend = SyclBackend::new();
    match backend.availability() {
        Availability::Available => backend.runtime().ok(),
        Availability::Unavailable(err) => {
            let required = std::env::var("DEVBUF_REQUIRE").unwrap_or_default();
            if required
                .split(',')
                .any(|b| matches!(b.trim(), "sycl" | "all"))
            {
                panic!("{test}: sycl is required by DEVBUF_REQUIRE: {err}");
            }
            eprintln!("skip {test}: {err}");
            None
        }
    }
}

fn default_queue() -> Arc<SyclQueue> {
    SyclBackend::new()
        .default_queue()
        .expect("default SYCL queue")
}

fn as_dyn(queue: &Arc<SyclQueue>) -> Arc<dyn Queue> {
    Arc::clone(queue) as Arc<dyn Queue>
}

/// A queue on a brand-new context of the default device, made through the C API as another SYCL
/// library would, and imported from its "SyclContextRef" payload.
fn queue_in_new_context(rt: &'static Runtime) -> Arc<SyclQueue> {
    let default = default_queue();
    let api = rt.api();
    let filter = default.device().selector.strip_prefix("sycl:").unwrap();
    let filter = std::ffi::CString::new(filter).unwrap();
    // SAFETY: plain C API calls on live handles; every handle made here is deleted below.
    unsafe {
        let selector = api.DPCTLFilterSelector_Create(filter.as_ptr());
        let device = api.DPCTLDevice_CreateFromSelector(selector);
        let context = api.DPCTLContext_Create(device, None, 0);
        assert!(!context.is_null());
        let queue = SyclQueue::from_context_ref(rt, context.cast()).unwrap();
        api.DPCTLContext_Delete(context);
        api.DPCTLDevice_Delete(device);
        api.DPCTLDeviceSelector_Delete(selector);
        queue
    }
}

#[test]
fn devices_carry_dpctl_indices_filter_strings_and_usm_kinds() {
    let Some(_) = runtime_or_skip("devices") else {
        return;
    };
    let backend = SyclBackend::new();
    assert_eq!(backend.availability(), Availability::Available);
    let devices = backend.devices().unwrap();
    assert!(!devices.is_empty());
    for (position, device) in devices.iter().enumerate() {
        assert_eq!(device.index as usize, position, "{device:?}");
        assert_eq!(device.backend, "sycl");
        assert!(device.selector.starts_with("sycl:"), "{device:?}");
        assert_eq!(device.unusable_reason.is_some(), device.kinds.is_empty());
        // The selector opens the same device again.
        let queue = backend
            .open(device.selector.strip_prefix("sycl:").unwrap())
            .unwrap();
        assert_eq!(queue.device(), device);
    }
    let default = backend.open("").unwrap();
    assert_eq!(default.device().kinds, MemKind::ALLOCATABLE);
    assert!(default.device().global_mem_bytes > 0);
    assert!(!default.device().name.is_empty() && !default.device().driver.is_empty());
}

#[test]
fn filter_strings_and_indices_open_the_one_default_queue_of_a_device() {
    let Some(_) = runtime_or_skip("filter strings") else {
        return;
    };
    let backend = SyclBackend::new();
    let default = default_queue();
    let filter = default.device().selector.strip_prefix("sycl:").unwrap();
    let by_filter = backend.open(filter).unwrap();
    assert!(Arc::ptr_eq(&as_dyn(&default), &by_filter));
    let index = default.dlpack_device_id().unwrap();
    let by_index = backend.open(&index.to_string()).unwrap();
    assert!(Arc::ptr_eq(&as_dyn(&default), &by_index));
    for bad in ["nonsense:gpu:9", "opencl:gpu:42", "has\0nul"] {
        match backend.open(bad) {
            Err(Error::DeviceNotFound { selector, reason }) => {
                assert_eq!(selector, format!("sycl:{bad}"));
                assert!(!reason.is_empty());
            }
            other => panic!("{bad:?} gave {other:?}"),
        }
    }
}

#[test]
fn dlpack_device_is_kdloneapi_with_dpctls_device_index() {
    let Some(rt) = runtime_or_skip("dlpack device") else {
        return;
    };
    let backend = SyclBackend::new();
    let queue = default_queue();
    let index = queue.device().index as i32;
    for kind in MemKind::ALLOCATABLE {
        let device = queue.interop().dlpack_device(kind);
        assert_eq!(device.device_type, DLDeviceType::ONEAPI);
        assert_eq!(device.device_type.0, 14);
        assert_eq!(device.device_id, index);
    }
    assert!(queue.is_default_context());
    // ... which is the platform's default context, the one dpctl and dpnp require for DLPack.
    let context = queue.export_context_handle().unwrap();
    let api = rt.api();
    // SAFETY: C API calls on live handles; what is made here is deleted here.
    unsafe {
        let devices = api.DPCTLContext_GetDevices(context.ptr.as_ptr().cast());
        let device = api.DPCTLDeviceVector_GetAt(devices, 0);
        let platform = api.DPCTLDevice_GetPlatform(device);
        let platform_default = api.DPCTLPlatform_GetDefaultContext(platform);
        assert!(api.DPCTLContext_AreEq(context.ptr.as_ptr().cast(), platform_default));
        api.DPCTLContext_Delete(platform_default);
        api.DPCTLPlatform_Delete(platform);
        api.DPCTLDevice_Delete(device);
        api.DPCTLDeviceVector_Delete(devices);
    }
    let back = backend
        .queue_for_dlpack_device(queue.interop().dlpack_device(MemKind::Device))
        .unwrap()
        .unwrap();
    assert!(Arc::ptr_eq(&back, &as_dyn(&queue)));
    let cpu = DLDevice {
        device_type: DLDeviceType::CPU,
        device_id: 0,
    };
    assert!(backend.queue_for_dlpack_device(cpu).is_none());
    let missing = DLDevice {
        device_type: DLDeviceType::ONEAPI,
        device_id: 999,
    };
    assert!(matches!(
        backend.queue_for_dlpack_device(missing),
        Some(Err(Error::DeviceNotFound { .. }))
    ));
}

#[test]
fn memory_of_another_context_is_unknown() {
    let Some(rt) = runtime_or_skip("two contexts") else {
        return;
    };
    let ours = as_dyn(&default_queue());
    let other_queue = queue_in_new_context(rt);
    assert!(!other_queue.is_default_context());
    let other = as_dyn(&other_queue);
    for kind in MemKind::ALLOCATABLE {
        let mine = Buffer::alloc(&ours, kind, 4096).unwrap();
        let theirs = Buffer::alloc(&other, kind, 4096).unwrap();
        assert_eq!(ours.kind_of(mine.ptr()), kind);
        assert_eq!(other.kind_of(theirs.ptr()), kind);
        assert_eq!(ours.kind_of(theirs.ptr()), MemKind::Unknown, "{kind}");
        assert_eq!(other.kind_of(mine.ptr()), MemKind::Unknown, "{kind}");
    }
}

#[test]
fn stack_heap_and_null_pointers_are_unknown() {
    let Some(_) = runtime_or_skip("foreign pointers") else {
        return;
    };
    let queue = as_dyn(&default_queue());
    let on_stack = [1u8; 32];
    let on_heap = vec![1u8; 1 << 20];
    assert_eq!(queue.kind_of(on_stack.as_ptr()), MemKind::Unknown);
    assert_eq!(queue.kind_of(on_heap.as_ptr()), MemKind::Unknown);
    assert_eq!(queue.kind_of(std::ptr::null()), MemKind::Unknown);
}

#[test]
fn queue_payload_round_trips_through_the_c_api() {
    let Some(rt) = runtime_or_skip("SyclQueueRef") else {
        return;
    };
    let queue = default_queue();
    let handle = queue.interop().export_handle().unwrap();
    assert_eq!(handle.name, c"SyclQueueRef");
    // The payload is a live sycl::queue* that the C API itself accepts.
    // SAFETY: the handle is a DPCTLSyclQueueRef we own until it is dropped below.
    let device = unsafe { rt.api().DPCTLQueue_GetDevice(handle.ptr.as_ptr().cast()) };
    assert!(!device.is_null());
    // SAFETY: GetDevice gave us a device handle to delete.
    unsafe { rt.api().DPCTLDevice_Delete(device) };
    // SAFETY: a live SyclQueueRef, borrowed for the call.
    let imported = unsafe { SyclQueue::from_queue_ref(rt, handle.ptr.as_ptr()) }.unwrap();
    drop(handle);
    assert_eq!(imported.device(), queue.device());
    assert!(imported.is_default_context());
    // One context: each classifies the other's memory, and copies between them.
    let ours = as_dyn(&queue);
    let theirs = as_dyn(&imported);
    let a = Buffer::alloc(&ours, MemKind::Device, 1000).unwrap();
    let b = Buffer::alloc(&theirs, MemKind::Shared, 1000).unwrap();
    assert_eq!(theirs.kind_of(a.ptr()), MemKind::Device);
    assert_eq!(ours.kind_of(b.ptr()), MemKind::Shared);
    a.fill(7).unwrap();
    b.copy_from(&a).unwrap();
    assert_eq!(b.to_vec().unwrap(), vec![7; 1000]);
}

#[test]
fn out_of_order_queues_are_handed_out_as_they_are_beside_a_private_command_queue() {
    let Some(rt) = runtime_or_skip("out-of-order SyclQueueRef") else {
        return;
    };
    let default = default_queue();
    let api = rt.api();
    // Without Python there is no dpctl to ask: the default queue hands out an out-of-order queue
    // devbuf made, as dpctl's cached queue is, and its handle comes back to it.
    let handed_out = default.export_handle().unwrap();
    // SAFETY: a live SyclQueueRef, borrowed for the calls.
    unsafe {
        assert!(!api.DPCTLQueue_IsInOrder(handed_out.ptr.as_ptr().cast()));
        let again = SyclQueue::from_queue_ref(rt, handed_out.ptr.as_ptr()).unwrap();
        assert!(Arc::ptr_eq(&again, &default));
    }
    let context = default.export_context_handle().unwrap();
    // SAFETY: C API calls on live handles; what is made here is deleted here.
    unsafe {
        let devices = api.DPCTLContext_GetDevices(context.ptr.as_ptr().cast());
        let device = api.DPCTLDeviceVector_GetAt(devices, 0);
        // dpctl's default: properties 0, an out-of-order queue in the device's default context.
        let foreign = api.DPCTLQueue_CreateForDevice(device, None, 0);
        assert!(!api.DPCTLQueue_IsInOrder(foreign));
        let imported = SyclQueue::from_queue_ref(rt, foreign.cast()).unwrap();
        // Not merged into the default queue: re-exports name the caller's own queue.
        assert!(!Arc::ptr_eq(&imported, &default));
        let exported = imported.export_handle().unwrap();
        assert!(api.DPCTLQueue_AreEq(exported.ptr.as_ptr().cast(), foreign));
        // The same queue handed over again is the same devbuf queue, while it is in use.
        let again = SyclQueue::from_queue_ref(rt, foreign.cast()).unwrap();
        assert!(Arc::ptr_eq(&again, &imported));
        // devbuf's commands on it run in order, and its events time.
        let queue = as_dyn(&imported);
        let buffer = Buffer::alloc(&queue, MemKind::Shared, 1 << 20).unwrap();
        buffer.fill(3).unwrap();
        buffer
            .slice(0..100)
            .unwrap()
            .copy_from_host(&[5; 100])
            .unwrap();
        let mut expected = vec![3; 1 << 20];
        expected[..100].fill(5);
        assert_eq!(buffer.to_vec().unwrap(), expected);
        queue.record_timed_event().unwrap();
        api.DPCTLQueue_Delete(foreign);
        api.DPCTLDevice_Delete(device);
        api.DPCTLDeviceVector_Delete(devices);
    }
}

#[test]
fn context_payload_round_trips_and_locates_pointers() {
    let Some(rt) = runtime_or_skip("SyclContextRef") else {
        return;
    };
    let default = default_queue();
    let handle = default.export_context_handle().unwrap();
    assert_eq!(handle.name, c"SyclContextRef");
    let context = handle.ptr.as_ptr();
    // SAFETY: a live SyclContextRef, borrowed for the calls.
    let imported = unsafe { SyclQueue::from_context_ref(rt, context) }.unwrap();
    assert!(Arc::ptr_eq(&imported, &default));

    let queue = as_dyn(&default);
    let shared = Buffer::alloc(&queue, MemKind::Shared, 64).unwrap();
    // SAFETY: as above; the pointers are only looked up.
    let (found, kind) =
        unsafe { SyclQueue::from_context_ref_and_pointer(rt, context, shared.ptr().add(10)) }
            .unwrap();
    assert_eq!(kind, MemKind::Shared);
    assert!(Arc::ptr_eq(&found, &default));
    let elsewhere = [0u8; 64];
    // SAFETY: as above.
    let err = unsafe { SyclQueue::from_context_ref_and_pointer(rt, context, elsewhere.as_ptr()) }
        .unwrap_err();
    assert!(err.to_string().starts_with("data: "), "{err}");
    // SAFETY: null is rejected before any use.
    let err = unsafe { SyclQueue::from_context_ref(rt, std::ptr::null_mut()) }.unwrap_err();
    assert!(err.to_string().starts_with("syclobj: "), "{err}");
}

#[test]
fn impossible_allocations_are_out_of_memory() {
    let Some(_) = runtime_or_skip("impossible allocation") else {
        return;
    };
    let queue = as_dyn(&default_queue());
    for kind in MemKind::ALLOCATABLE {
        for size in [1usize << 60, usize::MAX / 2] {
            match queue.allocate(kind, size, 64) {
                Err(Error::OutOfMemory {
                    kind: k, size: s, ..
                }) => {
                    assert_eq!((k, s), (kind, size));
                }
                other => panic!("{size} bytes of {kind}: {other:?}"),
            }
        }
    }
}

#[test]
fn every_queue_devbuf_makes_times_its_work() {
    let Some(rt) = runtime_or_skip("timing") else {
        return;
    };
    let backend = SyclBackend::new();
    let timing = devbuf_core::StreamOptions {
        timing: true,
        ..Default::default()
    };
    let default = as_dyn(&default_queue());
    for queue in [
        backend.open_stream("", timing).unwrap(),
        backend.open_stream("", Default::default()).unwrap(),
        default,
    ] {
        let buffer = Buffer::alloc(&queue, MemKind::Device, 16 << 20).unwrap();
        let start = queue.record_timed_event().unwrap();
        // SAFETY: the buffer is alive; the queue is waited for below.
        unsafe { queue.fill(buffer.ptr(), 7, buffer.len()) }.unwrap();
        let end = queue.record_timed_event().unwrap();
        queue.wait().unwrap();
        let elapsed = end.elapsed_ms_since(&start).unwrap().unwrap();
        assert!(elapsed > 0.0, "{elapsed}");
        assert!(start.elapsed_ms_since(&end).unwrap().unwrap() < 0.0);
        // An untimed event has no time to compare with.
        assert!(
            end.elapsed_ms_since(&queue.record_event().unwrap())
                .is_none()
        );
    }
    // Another library's in-order queue made without profiling keeps no timestamps, and says so.
    let handle = default_queue().export_context_handle().unwrap();
    let api = rt.api();
    // SAFETY: C API calls on live handles; what is made here is deleted here.
    unsafe {
        let devices = api.DPCTLContext_GetDevices(handle.ptr.as_ptr().cast());
        let device = api.DPCTLDeviceVector_GetAt(devices, 0);
        let in_order = devbuf_sycl_sys::DPCTLQueuePropertyType_DPCTL_IN_ORDER as i32;
        let foreign = api.DPCTLQueue_CreateForDevice(device, None, in_order);
        let adopted = as_dyn(&SyclQueue::from_queue_ref(rt, foreign.cast()).unwrap());
        let err = adopted.record_timed_event().unwrap_err();
        assert!(
            matches!(err, Error::Unsupported { .. }) && err.to_string().contains("profiling"),
            "{err}"
        );
        api.DPCTLQueue_Delete(foreign);
        api.DPCTLDevice_Delete(device);
        api.DPCTLDeviceVector_Delete(devices);
    }
}

#[test]
fn events_order_work_on_other_queues_and_accept_foreign_events() {
    let Some(rt) = runtime_or_skip("events") else {
        return;
    };
    let ours = as_dyn(&default_queue());
    let other = as_dyn(&queue_in_new_context(rt));
    let buffer = Buffer::alloc(&ours, MemKind::Shared, 1 << 20).unwrap();
    // SAFETY: the buffer is alive; the event is waited on before it is read.
    unsafe { ours.fill(buffer.ptr(), 3, buffer.len()) }.unwrap();
    let event = ours.record_event().unwrap();
    other.wait_event(&event).unwrap();
    other.wait().unwrap();
    assert!(event.is_complete().unwrap());
    assert!(buffer.to_vec().unwrap().iter().all(|&b| b == 3));
    ours.wait_event(&Event::new(CompletedEvent)).unwrap();
}

#[test]
fn pocl_is_listed_unusable_and_every_use_fails_cleanly() {
    let Some(_) = runtime_or_skip("device without USM") else {
        return;
    };
    let backend = SyclBackend::new();
    let devices = backend.devices().unwrap();
    let Some(no_usm) = devices.iter().find(|device| device.kinds.is_empty()) else {
        eprintln!("skip device without USM: none is registered (install PoCL: ci/setup)");
        return;
    };
    assert_eq!(
        no_usm.unusable_reason.as_deref(),
        Some(
            "no USM support (usm_host_allocations, usm_device_allocations, \
             usm_shared_allocations aspects are false)"
        )
    );
    // The default is still a device with USM, whatever SYCL's own default selector says.
    assert_eq!(
        backend.open("").unwrap().device().kinds,
        MemKind::ALLOCATABLE
    );

    let queue = backend
        .open(no_usm.selector.strip_prefix("sycl:").unwrap())
        .unwrap();
    assert_eq!(queue.device(), no_usm);
    for kind in MemKind::ALLOCATABLE {
        assert!(matches!(
            Buffer::alloc(&queue, kind, 64),
            Err(Error::Unsupported { .. })
        ));
        assert!(matches!(
            queue.allocate(kind, 64, 64),
            Err(Error::Unsupported { .. })
        ));
    }
    let local = [0u8; 16];
    assert_eq!(queue.kind_of(local.as_ptr()), MemKind::Unknown);
    // The whole kit runs against it without aborting: each check passes or skips.
    for (name, outcome) in run_all(&queue) {
        assert!(!matches!(outcome, Outcome::Fail(_)), "{name}: {outcome:?}");
    }
}

#[test]
fn an_absent_library_makes_the_backend_unavailable_with_the_reason() {
    let missing = "/nonexistent/devbuf/libDPCTLSyclInterface.so";
    let backend = SyclBackend::with_library(missing);
    match backend.availability() {
        Availability::Unavailable(reason) => assert!(reason.contains(missing), "{reason}"),
        Availability::Available => panic!("a missing library is available"),
    }
    assert!(matches!(backend.devices(), Err(Error::Unavailable { .. })));
    assert!(matches!(backend.open(""), Err(Error::Unavailable { .. })));
    assert!(matches!(
        backend.open("opencl:cpu:0"),
        Err(Error::Unavailable { .. })
    ));
    let oneapi = DLDevice {
        device_type: DLDeviceType::ONEAPI,
        device_id: 0,
    };
    assert!(matches!(
        backend.queue_for_dlpack_device(oneapi),
        Some(Err(Error::DeviceNotFound { .. }))
    ));
    // A library that is not dpctl's: refused for its missing symbols, not called into.
    let libm = SyclBackend::with_library("libm.so.6");
    match libm.availability() {
        Availability::Unavailable(reason) => assert!(reason.contains("lacks DPCTL"), "{reason}"),
        Availability::Available => panic!("libm is not a SYCL runtime"),
    }
}

/// Set in the child process of the test below.
const CHILD: &str = "DEVBUF_SYCL_TEST_NO_RUNTIME";

#[test]
fn with_no_runtime_in_the_environment_nothing_panics() {
    if std::env::var_os(CHILD).is_some() {
        let backend = SyclBackend::new();
        let Availability::Unavailable(reason) = backend.availability() else {
            panic!("a SYCL runtime was found with none configured");
        };
        assert!(reason.contains("/nonexistent/"), "{reason}");
        assert!(devbuf_sycl::default_queue().is_err());
        assert!(backend.open("").is_err());
        return;
    }
    // The child runs this very test with the runtime out of reach: DEVBUF_SYCL_LIBRARY points
    // nowhere and the loader's path no longer holds dpctl's directory.
    let output = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "with_no_runtime_in_the_environment_nothing_panics",
            "--exact",
            "--nocapture",
        ])
        .env(CHILD, "1")
        .env(
            devbuf_sycl::LIBRARY_ENV,
            "/nonexistent/libDPCTLSyclInterface.so",
        )
        .env_remove("LD_LIBRARY_PATH")
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "child failed: {}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
fn exported_queue_handles_are_independent_copies() {
    let Some(rt) = runtime_or_skip("exported handles") else {
        return;
    };
    let queue = default_queue();
    let first = queue.interop().export_handle().unwrap();
    let second = queue.interop().export_handle().unwrap();
    assert_ne!(first.ptr, second.ptr);
    // SAFETY: both are live DPCTLSyclQueueRefs.
    assert!(unsafe {
        rt.api()
            .DPCTLQueue_AreEq(first.ptr.as_ptr().cast(), second.ptr.as_ptr().cast())
    });
    let (ptr, destroy): (NonNull<c_void>, _) = first.into_raw();
    // SAFETY: we took ownership of the handle and release it once.
    unsafe { destroy(ptr.as_ptr()) };
    drop(second);
    // The queue itself lives on.
    let buffer = Buffer::alloc(&as_dyn(&queue), MemKind::Host, 8).unwrap();
    buffer.fill(1).unwrap();
}

#[test]
fn wait_device_waits_for_work_consumers_enqueued_on_copies_of_our_queue() {
    let Some(rt) = runtime_or_skip("wait_device") else {
        return;
    };
    let queue = default_queue();
    let len = 1 << 28;
    let buffer = Buffer::alloc(&as_dyn(&queue), MemKind::Shared, len).unwrap();
    buffer.fill(0).unwrap();
    // A consumer handed our queue (SUAI's syclobj) enqueues on its own copy of it: a fill long
    // enough to still run when devbuf would release the memory.
    let handle = queue.interop().export_handle().unwrap();
    let api = rt.api();
    // SAFETY: a live queue copy and `len` bytes of USM of its context; we own the event.
    let event =
        unsafe { api.DPCTLQueue_Memset(handle.ptr.as_ptr().cast(), buffer.ptr().cast(), 1, len) };
    assert!(!event.is_null());
    queue.wait_device().unwrap();
    // SAFETY: a live event, deleted once below.
    let status = unsafe { api.DPCTLEvent_GetCommandExecutionStatus(event) };
    // SAFETY: as above.
    unsafe { api.DPCTLEvent_Delete(event) };
    assert_eq!(
        status,
        devbuf_sycl_sys::DPCTLSyclEventStatusType_DPCTL_COMPLETE
    );
}
