//! Availability is data, not a crash: with or without a driver, nothing here panics, and without
//! one every entry point says why CUDA cannot be used.

use devbuf_core::dlpark::ffi::{DLDevice, DLDeviceType};
use devbuf_core::{Availability, Backend, Error};
use devbuf_cuda::{CudaBackend, CudaQueue};

/// Whether libcuda can be loaded here, found the way cudarc looks for it.
fn libcuda_present() -> bool {
    // SAFETY: probing for the library only loads it.
    unsafe { cudarc::driver::sys::is_culib_present() }
}

#[test]
fn availability_never_panics_and_gives_a_reason_when_unavailable() {
    match CudaBackend.availability() {
        Availability::Available => assert!(libcuda_present()),
        Availability::Unavailable(reason) => {
            assert!(!reason.is_empty());
            if !libcuda_present() {
                assert!(reason.contains("libcuda.so.1"), "{reason}");
                assert!(reason.contains("LD_LIBRARY_PATH"), "{reason}");
            }
        }
    }
    // Asking again gives the same answer (the probe runs once).
    assert_eq!(CudaBackend.availability(), CudaBackend.availability());
}

#[test]
fn without_a_driver_every_entry_point_is_an_unavailable_error() {
    let Availability::Unavailable(reason) = CudaBackend.availability() else {
        eprintln!("skip: CUDA is available here");
        return;
    };
    let unavailable = |err: Error| match err {
        Error::Unavailable {
            backend,
            reason: why,
        } => {
            assert_eq!(backend, "cuda");
            assert_eq!(why, reason);
        }
        other => panic!("expected Unavailable, got {other:?}"),
    };
    unavailable(CudaBackend.open("").unwrap_err());
    unavailable(CudaBackend.open("1").unwrap_err());
    unavailable(CudaBackend.devices().unwrap_err());
    unavailable(CudaQueue::new(0).unwrap_err());
    unavailable(devbuf_cuda::classify(0x1000).unwrap_err());
    unavailable(devbuf_cuda::queue_for_pointer(0x1000).unwrap_err());
    // SAFETY: the call fails before the stream is used.
    unavailable(unsafe { CudaQueue::with_stream(0, 0x1000) }.unwrap_err());
    let cuda = DLDevice {
        device_type: DLDeviceType::CUDA,
        device_id: 0,
    };
    unavailable(
        CudaBackend
            .queue_for_dlpack_device(cuda)
            .expect("kDLCUDA is CUDA's")
            .unwrap_err(),
    );
    let why = devbuf_cuda::default_queue().unwrap_err();
    assert!(why.contains(&reason), "{why}");
}

#[test]
fn selectors_and_dlpack_devices_that_are_not_cudas_are_refused_without_a_driver_call() {
    assert_eq!(CudaBackend.name(), "cuda");
    assert_eq!(devbuf_cuda::BACKEND, "cuda");
    for spec in ["x", "-1", "0:1", " 0"] {
        assert!(
            matches!(
                CudaBackend.open(spec),
                Err(Error::DeviceNotFound { .. } | Error::Unavailable { .. })
            ),
            "{spec:?}"
        );
    }
    let cpu = DLDevice {
        device_type: DLDeviceType::CPU,
        device_id: 0,
    };
    assert!(CudaBackend.queue_for_dlpack_device(cpu).is_none());
    let negative = DLDevice {
        device_type: DLDeviceType::CUDA,
        device_id: -1,
    };
    assert!(matches!(
        CudaBackend.queue_for_dlpack_device(negative),
        Some(Err(Error::DeviceNotFound { .. }))
    ));
}
