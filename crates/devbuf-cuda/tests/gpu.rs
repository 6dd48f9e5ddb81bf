//! Tests that need a CUDA device. Each skips, printing why, where CUDA is unavailable, unless
//! `DEVBUF_REQUIRE` lists "cuda" (or "all"), which makes a skip a failure.
//!
//! Work is held back deterministically where ordering is under test: a host function enqueued on
//! a stream blocks that stream until the test opens a gate, so "B has not run yet" is a fact, not a
//! race the test hopes to win. Such a test runs alone in a child process (see `common::hold_stream`).

use std::ffi::c_void;
use std::ptr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cudarc::driver::sys::{self, CUcontext, CUpointer_attribute};
use devbuf_core::conformance::pattern;
use devbuf_core::dlpark::ffi::DLDeviceType;
use devbuf_core::{Backend, Buffer, CompletedEvent, Error, Event, MemKind, Owner, Queue};
use devbuf_cuda::protocol::decode_cai_stream;
use devbuf_cuda::{CudaBackend, CudaQueue, ProtocolStream};

mod common;
use common::{Gate, check, hold_stream, in_primary_context};

/// Device 0's shared queue, or `None` after printing why the test is skipped.
fn shared_queue(test: &str) -> Option<Arc<CudaQueue>> {
    match CudaBackend::shared_queue(0) {
        Ok(queue) => Some(queue),
        Err(err) => {
            skip(test, &err.to_string());
            None
        }
    }
}

/// A queue with a stream of its own, so that blocking it cannot stall other tests.
fn fresh_queue(test: &str) -> Option<Arc<dyn Queue>> {
    shared_queue(test)?;
    Some(Arc::new(
        CudaQueue::new(0).expect("a second queue on device 0"),
    ))
}

fn skip(test: &str, why: &str) {
    let required = std::env::var("DEVBUF_REQUIRE").unwrap_or_default();
    if required
        .split(',')
        .any(|backend| matches!(backend.trim(), "cuda" | "all"))
    {
        panic!("{test} skipped but DEVBUF_REQUIRE lists cuda: {why}");
    }
    eprintln!("skip {test}: {why}");
}

fn cuda(queue: &Arc<dyn Queue>) -> &CudaQueue {
    queue.as_any().downcast_ref().expect("a CUDA queue")
}

/// The context current on the calling thread.
fn current_context() -> CUcontext {
    let mut context = ptr::null_mut();
    // SAFETY: a valid out-pointer.
    check("cuCtxGetCurrent", unsafe {
        sys::cuCtxGetCurrent(&mut context)
    });
    context
}

fn read(buffer: &Buffer) -> Vec<u8> {
    buffer.to_vec().expect("reading a buffer back")
}

#[test]
fn each_kind_allocates_copies_and_fills() {
    let Some(queue) = fresh_queue("each_kind_allocates_copies_and_fills") else {
        return;
    };
    let kinds: Vec<_> = MemKind::ALLOCATABLE
        .into_iter()
        .filter(|&kind| queue.supports(kind))
        .collect();
    assert!(kinds.contains(&MemKind::Device) && kinds.contains(&MemKind::Host));
    for len in [1, 255, 4096, 1 << 20, (3 << 20) + 7] {
        let bytes = pattern(len, len as u8);
        for &from in &kinds {
            let src = Buffer::alloc(&queue, from, len).unwrap();
            assert_eq!(queue.kind_of(src.ptr()), from);
            src.copy_from_host(&bytes).unwrap();
            for &to in &kinds {
                let dst = Buffer::alloc(&queue, to, len).unwrap();
                dst.fill(0x5A).unwrap();
                assert!(read(&dst).iter().all(|&b| b == 0x5A), "{to} fill");
                dst.copy_from(&src).unwrap();
                assert_eq!(read(&dst), bytes, "{from} -> {to}, {len} bytes");
            }
            // Pageable host memory on either side of one enqueued copy.
            let mut pageable = vec![0u8; len];
            // SAFETY: both ranges are alive and `len` long; we wait before reading.
            unsafe { queue.copy(pageable.as_mut_ptr(), src.ptr(), len) }.unwrap();
            queue.wait().unwrap();
            assert_eq!(pageable, bytes, "{from} -> pageable");
        }
    }
    // Host-accessible kinds are plain memory to the CPU.
    for kind in [MemKind::Host, MemKind::Shared] {
        if !queue.supports(kind) {
            continue;
        }
        let buffer = Buffer::alloc(&queue, kind, 64).unwrap();
        buffer.fill(7).unwrap();
        assert!(buffer.is_host_accessible());
        // SAFETY: pinned and managed memory is host-dereferenceable, and the fill completed.
        let on_host = unsafe { std::slice::from_raw_parts(buffer.ptr(), 64) };
        assert!(on_host.iter().all(|&b| b == 7), "{kind} read on the host");
    }
}

/// Pageable memory the driver does not know is copied by the driver, but never filled from the
/// host: nothing shows it is host memory rather than an address in the device's space.
#[test]
fn a_foreign_pageable_buffer_is_copied_but_not_filled_from_the_host() {
    let Some(queue) = fresh_queue("a_foreign_pageable_buffer_is_copied_but_not_filled") else {
        return;
    };
    let mut memory = vec![1u8; 1000];
    // SAFETY: `memory` outlives the buffer, dropped at the end of the test.
    let foreign = unsafe {
        Buffer::from_foreign(
            Arc::clone(&queue),
            memory.as_mut_ptr(),
            memory.len(),
            MemKind::Unknown,
            Owner::keep_alive(()),
        )
    };
    assert_eq!(queue.kind_of(foreign.ptr()), MemKind::Unknown);
    match foreign.slice(10..20).unwrap().fill(0xEE) {
        Err(Error::Runtime { operation, .. }) => assert_eq!(operation, "cuMemsetD8Async"),
        other => panic!("a fill of memory the driver does not know gave {other:?}"),
    }
    let device = Buffer::alloc(&queue, MemKind::Device, 1000).unwrap();
    device.copy_from(&foreign).unwrap();
    assert_eq!(read(&device), vec![1u8; 1000]);
    drop(foreign);
    drop(memory);
}

#[test]
fn device_memory_comes_from_the_stream_ordered_pool_where_supported() {
    let Some(shared) = shared_queue("device_memory_comes_from_the_pool") else {
        return;
    };
    let queue: Arc<dyn Queue> = shared;
    if !cuda(&queue).uses_memory_pool() {
        skip(
            "device_memory_comes_from_the_pool",
            "device 0 or its driver has no memory pools: devbuf uses cuMemAlloc there",
        );
        return;
    }
    let mut buffers = vec![];
    for len in [1, 1024, 1 << 20, 64 << 20] {
        let buffer = Buffer::alloc(&queue, MemKind::Device, len).unwrap();
        let mut pool: *mut c_void = ptr::null_mut();
        in_primary_context(0, || {
            // SAFETY: `pool` is a valid out-pointer for this attribute (a CUmemoryPool).
            check("cuPointerGetAttribute(MEMPOOL_HANDLE)", unsafe {
                sys::cuPointerGetAttribute(
                    (&raw mut pool).cast(),
                    CUpointer_attribute::CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE,
                    buffer.ptr() as u64,
                )
            });
        });
        assert!(!pool.is_null(), "{len} bytes did not come from a pool");
        buffer.fill(len as u8).unwrap();
        assert!(read(&buffer).iter().all(|&b| b == len as u8));
        buffers.push(buffer);
    }
    // Freed memory goes back to the pool in stream order and is handed out again.
    for _ in 0..1000 {
        let buffer = Buffer::alloc(&queue, MemKind::Device, 4096).unwrap();
        drop(buffer);
    }
    queue.wait().unwrap();
}

#[test]
fn pointers_classify_as_the_driver_sees_them() {
    let Some(shared) = shared_queue("pointers_classify_as_the_driver_sees_them") else {
        return;
    };
    let queue: Arc<dyn Queue> = shared.clone();
    for kind in MemKind::ALLOCATABLE {
        if !queue.supports(kind) {
            continue;
        }
        let buffer = Buffer::alloc(&queue, kind, 8192).unwrap();
        for offset in [0, 100, 8191] {
            let ptr = buffer.ptr() as usize + offset;
            let (ordinal, found) = devbuf_cuda::classify(ptr).unwrap().expect("CUDA memory");
            assert_eq!(found, kind, "{kind} at +{offset}");
            assert_eq!(ordinal, 0, "{kind} at +{offset}");
            let (picked, found) = devbuf_cuda::queue_for_pointer(ptr).unwrap().unwrap();
            assert!(Arc::ptr_eq(&picked, &shared));
            assert_eq!(found, kind);
        }
    }
    // Device memory another library allocated in the same primary context is CUDA's too.
    let mut foreign = 0;
    in_primary_context(0, || {
        // SAFETY: a valid out-pointer; the allocation is freed below.
        let allocated = unsafe { sys::cuMemAlloc_v2(&mut foreign, 4096) };
        check("cuMemAlloc", allocated);
    });
    assert_eq!(
        devbuf_cuda::classify(foreign as usize).unwrap(),
        Some((0, MemKind::Device))
    );
    assert_eq!(queue.kind_of(foreign as *const u8), MemKind::Device);
    in_primary_context(0, || {
        // SAFETY: allocated above, freed once, nothing pending on it.
        let freed = unsafe { sys::cuMemFree_v2(foreign) };
        check("cuMemFree", freed);
    });

    // Memory CUDA does not know.
    let heap = vec![0u8; 4096];
    let stack = [0u8; 64];
    let host_backend =
        Buffer::alloc(&devbuf_core::HostQueue::shared(), MemKind::Device, 64).unwrap();
    for (what, ptr) in [
        ("heap", heap.as_ptr() as usize),
        ("stack", stack.as_ptr() as usize),
        ("host backend", host_backend.ptr() as usize),
        ("null", 0),
    ] {
        assert_eq!(devbuf_cuda::classify(ptr).unwrap(), None, "{what}");
        assert!(
            devbuf_cuda::queue_for_pointer(ptr).unwrap().is_none(),
            "{what}"
        );
        assert_eq!(queue.kind_of(ptr as *const u8), MemKind::Unknown, "{what}");
    }
}

#[test]
fn dlpack_devices_name_cuda_kinds() {
    let Some(shared) = shared_queue("dlpack_devices_name_cuda_kinds") else {
        return;
    };
    let queue: Arc<dyn Queue> = shared;
    let device = queue.interop().dlpack_device(MemKind::Device);
    assert_eq!(
        (device.device_type, device.device_id),
        (DLDeviceType::CUDA, 0)
    );
    let host = queue.interop().dlpack_device(MemKind::Host);
    assert_eq!(
        (host.device_type, host.device_id),
        (DLDeviceType::CUDAHOST, 0)
    );
    let shared = queue.interop().dlpack_device(MemKind::Shared);
    assert_eq!(
        (shared.device_type, shared.device_id),
        (DLDeviceType::CUDAMANAGED, 0)
    );
    let reopened = CudaBackend
        .queue_for_dlpack_device(device)
        .unwrap()
        .unwrap();
    assert!(Arc::ptr_eq(&reopened, &queue));
    assert_eq!(
        queue
            .interop()
            .native_stream()
            .map(devbuf_core::StreamHandle::get),
        Some(cuda(&queue).stream())
    );
    assert!(
        cuda(&queue).stream() > 2,
        "an own stream is never 0, 1 or 2"
    );
}

#[test]
fn the_backend_lists_and_opens_devices() {
    let Some(_) = shared_queue("the_backend_lists_and_opens_devices") else {
        return;
    };
    let devices = CudaBackend.devices().unwrap();
    assert!(!devices.is_empty());
    for (ordinal, info) in devices.iter().enumerate() {
        assert_eq!(info.index as usize, ordinal);
        assert_eq!(info.selector, format!("cuda:{ordinal}"));
        assert!(
            info.global_mem_bytes > 0 && !info.name.is_empty(),
            "{info:?}"
        );
        assert!(info.driver.starts_with("CUDA "), "{info:?}");
        let queue = CudaBackend.open(&ordinal.to_string()).unwrap();
        assert_eq!(queue.device(), info);
    }
    let missing = devices.len().to_string();
    assert!(matches!(
        CudaBackend.open(&missing),
        Err(Error::DeviceNotFound { .. })
    ));
    assert!(Arc::ptr_eq(
        &CudaBackend.open("").unwrap(),
        &CudaBackend.open("0").unwrap()
    ));
}

#[test]
fn alignments_beyond_256_bytes_are_honoured_and_freed() {
    let Some(queue) = fresh_queue("alignments_beyond_256_bytes_are_honoured_and_freed") else {
        return;
    };
    for kind in MemKind::ALLOCATABLE {
        if !queue.supports(kind) {
            continue;
        }
        for align in [512, 4096, 1 << 16, 1 << 21] {
            for round in 0..20 {
                let len = 1 + round * 333;
                let buffer = Buffer::alloc_aligned(&queue, kind, len, align).unwrap();
                assert_eq!(
                    buffer.ptr() as usize % align,
                    0,
                    "{kind} aligned to {align}"
                );
                assert_eq!(queue.kind_of(buffer.ptr()), kind);
                let bytes = pattern(len, round as u8);
                buffer.copy_from_host(&bytes).unwrap();
                assert_eq!(read(&buffer), bytes);
            }
        }
    }
    queue.wait().unwrap();
}

#[test]
fn eight_threads_share_one_queue() {
    let Some(queue) = fresh_queue("eight_threads_share_one_queue") else {
        return;
    };
    let kinds: Vec<_> = MemKind::ALLOCATABLE
        .into_iter()
        .filter(|&kind| queue.supports(kind))
        .collect();
    std::thread::scope(|scope| {
        for thread in 0..8u8 {
            let (queue, kinds) = (&queue, &kinds);
            scope.spawn(move || {
                // A new thread has no current context; devbuf's calls must not leave one behind.
                assert!(current_context().is_null());
                for round in 0..50usize {
                    let kind = kinds[(thread as usize + round) % kinds.len()];
                    let len = 1 + (thread as usize * 7919 + round * 104_729) % (1 << 18);
                    let bytes = pattern(len, thread ^ round as u8);
                    let a = Buffer::alloc(queue, kind, len).unwrap();
                    a.copy_from_host(&bytes).unwrap();
                    let b = Buffer::alloc(queue, kinds[round % kinds.len()], len).unwrap();
                    // SAFETY: both buffers are alive and `len` long; we wait below.
                    unsafe { queue.copy(b.ptr(), a.ptr(), len) }.unwrap();
                    let event = queue.record_event().unwrap();
                    queue.wait_event(&event).unwrap();
                    event.wait().unwrap();
                    assert!(event.is_complete().unwrap());
                    assert_eq!(queue.kind_of(b.ptr()), b.kind());
                    assert_eq!(read(&b), bytes, "thread {thread} round {round}");
                    assert!(current_context().is_null(), "a context was left current");
                }
            });
        }
    });
    // A thread that has the primary context current keeps it.
    in_primary_context(0, || {
        let before = current_context();
        let buffer = Buffer::alloc(&queue, MemKind::Device, 10).unwrap();
        buffer.fill(1).unwrap();
        assert_eq!(current_context(), before);
    });
}

// devbuf's calls on its stream take the stream's context, whatever the thread has current (no
// context call on the hot paths, issue 46): with another context of the device current (PyCUDA's
// kind), allocations, copies, fills, events and frees still run in devbuf's primary context, and
// the thread's context is left as it was.
#[test]
fn another_context_current_changes_nothing() {
    let Some(queue) = fresh_queue("another_context_current_changes_nothing") else {
        return;
    };
    let (mut device, mut own) = (0, ptr::null_mut());
    // SAFETY: valid out-pointers; the context made here is destroyed below.
    unsafe {
        check("cuDeviceGet", sys::cuDeviceGet(&mut device, 0));
        check("cuCtxCreate", sys::cuCtxCreate_v2(&mut own, 0, device));
    }
    for kind in MemKind::ALLOCATABLE
        .into_iter()
        .filter(|&kind| queue.supports(kind))
    {
        let len = 1 << 16;
        let bytes = pattern(len, 11);
        let a = Buffer::alloc(&queue, kind, len).unwrap();
        a.copy_from_host(&bytes).unwrap();
        let b = Buffer::alloc(&queue, MemKind::Device, len).unwrap();
        b.enqueue_copy_from(&a, &queue).unwrap();
        let event = queue.record_event().unwrap();
        event.wait().unwrap();
        assert_eq!(read(&b), bytes, "{kind}");
        b.fill(3).unwrap();
        assert_eq!(read(&b), vec![3; len], "{kind}");
        assert_eq!(
            current_context(),
            own,
            "{kind}: the thread's context changed"
        );
    }
    // SAFETY: the context made above, current on this thread, destroyed once.
    unsafe { check("cuCtxDestroy", sys::cuCtxDestroy_v2(own)) };
}

static CAI_GATE: Gate = Gate::new();

// CAI import: the producer's stream is blocked, its pending fill must land before our copy.
child_test!(importing_a_cai_stream_orders_our_work_after_the_producers_without_blocking {
    let test = "importing_a_cai_stream_orders_our_work_after_the_producers";
    let (Some(producer), Some(ours)) = (fresh_queue(test), fresh_queue(test)) else {
        return;
    };
    let len = 1 << 20;
    let data = Buffer::alloc(&producer, MemKind::Device, len).unwrap();
    data.fill(0).unwrap();
    let result = Buffer::alloc(&ours, MemKind::Host, len).unwrap();
    result.fill(0).unwrap();

    hold_stream(cuda(&producer).stream(), &CAI_GATE);
    // SAFETY: `data` stays alive until both queues are drained below.
    unsafe { producer.fill(data.ptr(), 0xAB, len) }.unwrap();
    let producer_done = producer.record_event().unwrap();

    let started = Instant::now();
    // What `sync_cai_import` does unless DEVBUF_CUDA_ARRAY_INTERFACE_SYNC=0 turned it off.
    let stream = decode_cai_stream(Some(cuda(&producer).stream() as i64)).unwrap();
    // SAFETY: the producer's stream lives until the end of the test.
    unsafe { cuda(&ours).wait_for_stream(stream) }.unwrap();
    let waited = started.elapsed();
    // SAFETY: both buffers stay alive until the queues are drained below.
    unsafe { ours.copy(result.ptr(), data.ptr(), len) }.unwrap();
    let ours_done = ours.record_event().unwrap();
    let enqueued = started.elapsed();
    assert!(
        enqueued < Duration::from_secs(5) && !CAI_GATE.expired(),
        "the import blocked the host: the wait took {waited:?}, with the copy {enqueued:?}"
    );
    assert!(
        !producer_done.is_complete().unwrap(),
        "the gate did not hold"
    );
    assert!(
        !ours_done.is_complete().unwrap(),
        "our copy ran before the producer's work"
    );

    CAI_GATE.open();
    ours.wait().unwrap();
    assert!(producer_done.is_complete().unwrap());
    assert!(read(&result).iter().all(|&b| b == 0xAB));
    producer.wait().unwrap();
});

static DLPACK_GATE: Gate = Gate::new();

// DLPack export: the consumer's stream must wait for our pending fill.
child_test!(exporting_to_a_dlpack_stream_orders_the_consumers_work_after_ours {
    let test = "exporting_to_a_dlpack_stream_orders_the_consumers_work_after_ours";
    let (Some(ours), Some(consumer)) = (fresh_queue(test), fresh_queue(test)) else {
        return;
    };
    let len = 1 << 20;
    let data = Buffer::alloc(&ours, MemKind::Device, len).unwrap();
    data.fill(0).unwrap();
    let result = Buffer::alloc(&consumer, MemKind::Host, len).unwrap();
    result.fill(0).unwrap();

    hold_stream(cuda(&ours).stream(), &DLPACK_GATE);
    let started = Instant::now();
    // SAFETY: `data` stays alive until both queues are drained below.
    unsafe { ours.fill(data.ptr(), 0xCD, len) }.unwrap();
    let consumer_stream = cuda(&consumer).stream() as i64;
    // SAFETY: the consumer's stream lives until the end of the test.
    unsafe { cuda(&ours).sync_dlpack_export(Some(consumer_stream)) }.unwrap();
    // SAFETY: both buffers stay alive until the queues are drained below.
    unsafe { consumer.copy(result.ptr(), data.ptr(), len) }.unwrap();
    let consumer_done = consumer.record_event().unwrap();
    let enqueued = started.elapsed();
    assert!(
        !DLPACK_GATE.expired(),
        "the host was blocked until the gate gave up ({enqueued:?} to enqueue)"
    );
    assert!(
        !consumer_done.is_complete().unwrap(),
        "the consumer's copy ran before our work"
    );

    DLPACK_GATE.open();
    consumer.wait().unwrap();
    assert!(read(&result).iter().all(|&b| b == 0xCD));
    ours.wait().unwrap();
});

#[test]
fn protocol_streams_are_validated_and_the_default_streams_accepted() {
    let Some(shared) = shared_queue("protocol_streams_are_validated") else {
        return;
    };
    let queue = &*shared;
    let as_queue: Arc<dyn Queue> = shared.clone();
    let imported = Buffer::alloc(&as_queue, MemKind::Host, 64).unwrap();
    let cai = |stream| {
        // SAFETY: the only handle passed is the queue's own live stream; the other values are
        // rejected or the special streams 1 and 2.
        unsafe { queue.sync_cai_import(&imported, stream) }
    };
    let dlpack = |stream| {
        // SAFETY: as for `cai`.
        unsafe { queue.sync_dlpack_export(stream) }
    };
    for bad in [Some(0), Some(-1)] {
        assert!(matches!(
            cai(bad),
            Err(Error::InvalidDescriptor { key: "stream", .. })
        ));
    }
    for bad in [Some(0), Some(-2)] {
        assert!(matches!(
            dlpack(bad),
            Err(Error::InvalidDescriptor { key: "stream", .. })
        ));
    }
    let own = Some(queue.stream() as i64);
    for ok in [None, Some(1), Some(2), own] {
        cai(ok).unwrap();
    }
    for ok in [None, Some(-1), Some(1), Some(2), own] {
        dlpack(ok).unwrap();
    }
    for stream in [ProtocolStream::Legacy, ProtocolStream::PerThread] {
        // SAFETY: the special streams need no handle to stay alive.
        unsafe { queue.wait_for_stream(stream) }.unwrap();
        // SAFETY: as above.
        unsafe { queue.make_stream_wait(stream) }.unwrap();
    }
    queue.wait().unwrap();
}

#[test]
fn a_queue_can_borrow_an_external_stream() {
    let Some(owner) = fresh_queue("a_queue_can_borrow_an_external_stream") else {
        return;
    };
    let external = cuda(&owner).stream();
    // SAFETY: `owner` keeps the stream alive longer than `borrowed` and its buffers.
    let borrowed: Arc<dyn Queue> =
        Arc::new(unsafe { CudaQueue::with_stream(0, external) }.unwrap());
    assert_eq!(cuda(&borrowed).stream(), external);
    let bytes = pattern(5000, 3);
    let buffer = Buffer::alloc(&borrowed, MemKind::Device, bytes.len()).unwrap();
    buffer.copy_from_host(&bytes).unwrap();
    assert_eq!(read(&buffer), bytes);
    drop(buffer);
    drop(borrowed);
    // The stream outlives the borrowing queue.
    owner.wait().unwrap();

    // SAFETY: the legacy default stream lives as long as the context.
    let legacy: Arc<dyn Queue> = Arc::new(unsafe { CudaQueue::with_stream(0, 1) }.unwrap());
    assert_eq!(
        legacy
            .interop()
            .native_stream()
            .map(devbuf_core::StreamHandle::get),
        Some(1)
    );
    let buffer = Buffer::alloc(&legacy, MemKind::Shared, 100).unwrap();
    buffer.fill(9).unwrap();
    assert!(read(&buffer).iter().all(|&b| b == 9));

    for refused in [0, 2] {
        // SAFETY: refused before the stream is used.
        let err = unsafe { CudaQueue::with_stream(0, refused) }.unwrap_err();
        assert!(
            matches!(err, Error::InvalidDescriptor { key: "stream", .. }),
            "{err:?}"
        );
    }
}

#[test]
fn events_order_work_across_queues_and_backends() {
    let test = "events_order_work_across_queues_and_backends";
    let (Some(a), Some(b)) = (fresh_queue(test), fresh_queue(test)) else {
        return;
    };
    let len = 64 << 20;
    let src = Buffer::alloc(&a, MemKind::Device, len).unwrap();
    // SAFETY: `src` stays alive until the queues are drained below.
    unsafe { a.fill(src.ptr(), 0x11, len) }.unwrap();
    let filled = a.record_event().unwrap();
    assert!(filled.downcast_ref::<devbuf_cuda::CudaEvent>().is_some());
    let dst = Buffer::alloc(&b, MemKind::Host, len).unwrap();
    b.wait_event(&filled).unwrap();
    // SAFETY: both buffers stay alive until `b` is drained below.
    unsafe { b.copy(dst.ptr(), src.ptr(), len) }.unwrap();
    b.wait().unwrap();
    assert!(read(&dst).iter().all(|&byte| byte == 0x11));
    // Another backend's event is waited for on the host.
    b.wait_event(&Event::new(CompletedEvent)).unwrap();
    a.wait().unwrap();
}
