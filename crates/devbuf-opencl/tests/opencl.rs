//! The OpenCL backend against the real runtimes: the conformance kit on a device with Intel USM
//! (Intel's CPU runtime) and on one with SVM only (PoCL), selectors, foreign pointers, and a
//! loader with no ICD registered.

use std::sync::Arc;

use devbuf_core::dlpark::ffi::{DLDevice, DLDeviceType};
use devbuf_core::{Availability, Backend, Buffer, DeviceInfo, Error, MemKind, Queue};
use devbuf_opencl::OpenClBackend;

/// Whether DEVBUF_REQUIRE lists opencl (or all), as CI sets it: then a missing runtime or device
/// is a failure, not a skip.
fn required() -> bool {
    std::env::var("DEVBUF_REQUIRE")
        .unwrap_or_default()
        .split(',')
        .any(|b| matches!(b.trim(), "opencl" | "all"))
}

/// The queue on the first device whose kinds `pick` accepts, or why there is none.
fn queue_where(what: &str, pick: impl Fn(&DeviceInfo) -> bool) -> Result<Arc<dyn Queue>, String> {
    let backend = OpenClBackend;
    let devices = backend.devices().map_err(|err| err.to_string())?;
    let device = devices
        .iter()
        .find(|device| pick(device))
        .ok_or_else(|| format!("no OpenCL device with {what} is registered: {devices:?}"))?;
    backend
        .open(device.selector.strip_prefix("opencl:").unwrap())
        .map_err(|err| err.to_string())
}

/// Intel USM: the only memory model with all three kinds (Intel's CPU runtime in CI).
fn usm_queue() -> Result<Arc<dyn Queue>, String> {
    queue_where("Intel USM", |device| device.kinds == MemKind::ALLOCATABLE)
}

/// SVM: device (coarse-grained) and shared (fine-grained) memory, no host kind (PoCL in CI).
fn svm_queue() -> Result<Arc<dyn Queue>, String> {
    queue_where("SVM only", |device| {
        device.kinds == [MemKind::Device, MemKind::Shared]
    })
}

/// Every queue of a usable device, or none after printing why (a failure when required).
fn usable_queues(test: &str) -> Vec<Arc<dyn Queue>> {
    let mut queues = Vec::new();
    for (what, queue) in [("usm", usm_queue()), ("svm", svm_queue())] {
        match queue {
            Ok(queue) => queues.push(queue),
            Err(why) if required() => panic!("{test} ({what}): opencl is required: {why}"),
            Err(why) => eprintln!("skip {test} ({what}): {why}"),
        }
    }
    queues
}

mod usm {
    devbuf_core::conformance_tests!("opencl", super::usm_queue());
}

mod svm {
    devbuf_core::conformance_tests!("opencl", super::svm_queue());
}

mod descriptor {
    devbuf_core::descriptor_tests!(devbuf_opencl::OpenClBackend);
}

#[test]
fn selectors_open_the_device_they_name() {
    let backend = OpenClBackend;
    let devices = match backend.devices() {
        Ok(devices) => devices,
        Err(err) if required() => panic!("opencl is required: {err}"),
        Err(err) => return eprintln!("skip selectors: {err}"),
    };
    for (position, device) in devices.iter().enumerate() {
        assert_eq!(device.index as usize, position, "{device:?}");
        assert_eq!(device.backend, "opencl");
        assert_eq!(device.unusable_reason.is_some(), device.kinds.is_empty());
        let queue = backend
            .open(device.selector.strip_prefix("opencl:").unwrap())
            .unwrap();
        assert_eq!(queue.device(), device);
        // One queue per device: opening it again gives the same one.
        let again = backend
            .open(device.selector.strip_prefix("opencl:").unwrap())
            .unwrap();
        assert!(Arc::ptr_eq(&queue, &again));
        // Its DLPack device leads back to it.
        let dl = queue.interop().dlpack_device(MemKind::Shared);
        assert_eq!(dl.device_type, DLDeviceType::OPENCL);
        assert_eq!(dl.device_id, position as i32);
        let found = backend.queue_for_dlpack_device(dl).unwrap().unwrap();
        assert!(Arc::ptr_eq(&queue, &found));
    }
    // The default device is one with every kind, when there is one.
    if devices.iter().any(|d| d.kinds == MemKind::ALLOCATABLE) {
        assert_eq!(
            backend.open("").unwrap().device().kinds,
            MemKind::ALLOCATABLE
        );
    }
    for bad in ["0", "x:0", "0:x", "0:0:0", "99:0", "0:99", "-1:0"] {
        match backend.open(bad) {
            Err(Error::DeviceNotFound { selector, .. }) => {
                assert_eq!(selector, format!("opencl:{bad}"))
            }
            other => panic!("{bad:?}: {other:?}"),
        }
    }
    let unknown_index = DLDevice {
        device_type: DLDeviceType::OPENCL,
        device_id: devices.len() as i32,
    };
    assert!(matches!(
        backend.queue_for_dlpack_device(unknown_index),
        Some(Err(Error::DeviceNotFound { .. }))
    ));
    let cuda = DLDevice {
        device_type: DLDeviceType::CUDA,
        device_id: 0,
    };
    assert!(backend.queue_for_dlpack_device(cuda).is_none());
}

#[test]
fn foreign_pointers_and_other_devices_memory_are_unknown() {
    let queues = usable_queues("foreign pointers");
    let on_stack = [0u8; 16];
    let on_heap = vec![0u8; 1 << 16];
    for queue in &queues {
        assert_eq!(queue.kind_of(on_stack.as_ptr()), MemKind::Unknown);
        assert_eq!(queue.kind_of(on_heap.as_ptr()), MemKind::Unknown);
        assert_eq!(queue.kind_of(std::ptr::null()), MemKind::Unknown);
        for kind in queue.device().kinds.clone() {
            let buffer = Buffer::alloc(queue, kind, 4096).unwrap();
            assert_eq!(queue.kind_of(buffer.ptr()), kind);
            for other in queues.iter().filter(|other| !Arc::ptr_eq(other, queue)) {
                assert_eq!(
                    other.kind_of(buffer.ptr()),
                    MemKind::Unknown,
                    "{kind} memory of {} on {}",
                    queue.device(),
                    other.device()
                );
            }
        }
    }
}

#[test]
fn svm_devices_offer_no_host_kind_and_forget_freed_memory() {
    let queue = match svm_queue() {
        Ok(queue) => queue,
        Err(why) if required() => panic!("opencl is required: {why}"),
        Err(why) => return eprintln!("skip svm: {why}"),
    };
    assert!(matches!(
        queue.allocate(MemKind::Host, 64, 64),
        Err(Error::Unsupported { .. })
    ));
    assert!(!queue.host_accessible(MemKind::Device));
    assert!(queue.host_accessible(MemKind::Shared));
    let buffer = Buffer::alloc(&queue, MemKind::Device, 100).unwrap();
    let (start, end) = (buffer.ptr(), buffer.ptr().wrapping_add(100));
    assert_eq!(queue.kind_of(start.wrapping_add(99)), MemKind::Device);
    assert_eq!(queue.kind_of(end), MemKind::Unknown);
    drop(buffer);
    assert_eq!(queue.kind_of(start), MemKind::Unknown);
}

#[test]
fn events_of_another_device_order_work_through_the_host() {
    let queues = usable_queues("events across devices");
    let [first, second] = queues.as_slice() else {
        return eprintln!("skip events across devices: needs two usable devices");
    };
    let shared = Buffer::alloc(first, MemKind::Shared, 1 << 20).unwrap();
    // SAFETY: the buffer is alive; the event is waited on before it is read.
    unsafe { first.fill(shared.ptr(), 7, shared.len()) }.unwrap();
    let event = first.record_event().unwrap();
    second.wait_event(&event).unwrap();
    assert!(event.is_complete().unwrap());
    let copy = Buffer::alloc(second, MemKind::Shared, 1 << 20).unwrap();
    copy.copy_from(&shared).unwrap();
    assert!(copy.to_vec().unwrap().iter().all(|&b| b == 7));
}

/// Set in the child process of the test below.
const CHILD: &str = "DEVBUF_OPENCL_TEST_NO_ICD";

#[test]
fn with_no_icd_registered_the_backend_is_unavailable_with_the_reason() {
    if std::env::var_os(CHILD).is_some() {
        let backend = OpenClBackend;
        let Availability::Unavailable(reason) = backend.availability() else {
            panic!("OpenCL is available with no ICD registered");
        };
        assert!(reason.contains("no OpenCL platform"), "{reason}");
        assert!(matches!(backend.devices(), Err(Error::Unavailable { .. })));
        assert!(matches!(backend.open(""), Err(Error::Unavailable { .. })));
        assert!(matches!(
            backend.open("0:0"),
            Err(Error::Unavailable { .. })
        ));
        assert!(devbuf_opencl::default_queue().is_err());
        let dl = DLDevice {
            device_type: DLDeviceType::OPENCL,
            device_id: 0,
        };
        assert!(matches!(
            backend.queue_for_dlpack_device(dl),
            Some(Err(Error::DeviceNotFound { .. }))
        ));
        return;
    }
    // The child runs this very test with the loaders pointed at an empty vendor directory.
    let empty = std::env::temp_dir().join(format!("devbuf-no-icd-{}", std::process::id()));
    std::fs::create_dir_all(&empty).unwrap();
    let output = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "with_no_icd_registered_the_backend_is_unavailable_with_the_reason",
            "--exact",
            "--nocapture",
        ])
        .env(CHILD, "1")
        .env("OCL_ICD_VENDORS", &empty)
        .env_remove("OCL_ICD_FILENAMES")
        .output()
        .unwrap();
    std::fs::remove_dir(&empty).unwrap();
    assert!(
        output.status.success(),
        "child failed: {}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// Memory the runtime does not know may be anything, a device address included: the host never
/// writes it, not even when it happens to be host memory (it was filled from the host before).
#[test]
fn memory_the_runtime_does_not_know_is_never_filled_from_the_host() {
    for queue in usable_queues("memory_the_runtime_does_not_know_is_never_filled_from_the_host") {
        let mut memory = vec![1u8; 64];
        // SAFETY: `memory` outlives the buffer, dropped before it.
        let foreign = unsafe {
            Buffer::from_foreign(
                Arc::clone(&queue),
                memory.as_mut_ptr(),
                memory.len(),
                MemKind::Unknown,
                devbuf_core::Owner::keep_alive(()),
            )
        };
        match foreign.fill(9) {
            Err(Error::Unsupported { .. }) => {}
            other => panic!(
                "{}: a fill of unknown memory gave {other:?}",
                queue.device()
            ),
        }
        assert_eq!(foreign.to_vec().unwrap(), [1; 64]);
        drop(foreign);
        assert_eq!(memory, [1; 64]);
    }
}

/// Frees racing other threads' copies on one USM queue, as the conformance kit's `threads` check
/// does, more often. PoCL (5.0 and 6.0 seen) crashes inside clMemBlockingFreeINTEL when it runs
/// while other threads enqueue on the context (SIGSEGV in its wait on the queue's last event):
/// the backend must not call it there.
#[test]
fn usm_frees_racing_copies_on_other_threads_do_not_crash() {
    let queue = match usm_queue() {
        Ok(queue) => queue,
        Err(why) if required() => panic!("opencl is required: {why}"),
        Err(why) => return eprintln!("skip usm frees racing copies: {why}"),
    };
    let kinds = queue.device().kinds.clone();
    std::thread::scope(|scope| {
        for thread in 0..8usize {
            let (queue, kinds) = (&queue, &kinds);
            scope.spawn(move || {
                for round in 0..150usize {
                    let kind = kinds[(thread + round) % kinds.len()];
                    let len = 1 + (thread * 131 + round * 61) % 4096;
                    let bytes = vec![(thread + round) as u8; len];
                    let a = Buffer::alloc(queue, kind, len).unwrap();
                    a.copy_from_host(&bytes).unwrap();
                    let b = Buffer::alloc(queue, kinds[round % kinds.len()], len).unwrap();
                    b.copy_from(&a).unwrap();
                    // Freed while the copy that reads it may still be pending.
                    drop(a);
                    assert_eq!(b.to_vec().unwrap(), bytes, "thread {thread} round {round}");
                }
            });
        }
    });
}
