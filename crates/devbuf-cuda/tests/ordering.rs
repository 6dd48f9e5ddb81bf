//! Ordering and lifetime rules of the CUDA backend, each shown on the CUDA test driver (with its
//! per-operation delay, so that a missing wait reads wrong bytes or touches unallocated memory,
//! which the driver reports as an illegal address). Each test runs in a child process with the
//! driver settings it needs.

mod common;

use std::ffi::c_void;
use std::ptr;

use cudarc::driver::sys::{self, CUstream};
use devbuf_core::conformance::{assert_check, pattern};
use devbuf_core::{Buffer, MemKind, Owner, Queue};
use devbuf_cuda::CudaQueue;
use std::sync::Arc;

use common::{Need, check, cuda, foreign_fill, fresh, hold_stream_for, in_primary_context, shared};

const LEN: usize = 1 << 20;

/// How long a held stream keeps the work after it pending (see `hold_stream_for`).
const PENDING: std::time::Duration = std::time::Duration::from_millis(300);

child_test!(busy_frees_are_ordered_with_memory_pools ["DEVBUF_CUDA_TEST_DELAY_US" = "2000"] {
    assert_check("busy_free", "cuda", &Ok(shared(0)));
});

child_test!(busy_frees_are_ordered_without_memory_pools [
    "DEVBUF_CUDA_TEST_DELAY_US" = "2000",
    "DEVBUF_CUDA_TEST_MEMORY_POOLS" = "0",
] {
    assert_check("busy_free", "cuda", &Ok(shared(0)));
});

// Pinned memory that a copy on another device's stream still writes: the release waits for it.
child_test!(pinned_memory_outlives_a_copy_on_another_device ["DEVBUF_CUDA_TEST_DELAY_US" = "20000"]
    needs Need::Devices(2); {
    let (home, other) = (shared(0), shared(1));
    let source = Buffer::alloc(&other, MemKind::Device, LEN).unwrap();
    source.copy_from_host(&pattern(LEN, 3)).unwrap();
    for kind in [MemKind::Host, MemKind::Shared] {
        let target = Buffer::alloc(&home, kind, LEN).unwrap();
        target.enqueue_copy_from(&source, &other).unwrap();
        drop(target);
    }
    assert_eq!(source.to_vec().unwrap(), pattern(LEN, 3));
});

// A block the pool hands back at once is usable only once the allocating stream reaches the
// allocation: a copy into it on another stream must wait for that.
child_test!(a_fresh_pool_allocation_is_pending_work [
    "DEVBUF_CUDA_TEST_DELAY_US" = "20000",
    "DEVBUF_CUDA_TEST_POOL_REUSE" = "immediate",
    "DEVBUF_CUDA_TEST_MEMORY_POOLS" = "1",
] {
    let (home, other) = (shared(0), fresh(0));
    let source = Buffer::alloc(&other, MemKind::Host, LEN).unwrap();
    source.copy_from_host(&pattern(LEN, 5)).unwrap();
    let first = Buffer::alloc(&home, MemKind::Device, LEN).unwrap();
    first.enqueue_fill(1).unwrap();
    drop(first);
    let fresh_block = Buffer::alloc(&home, MemKind::Device, LEN).unwrap();
    assert!(
        fresh_block.has_pending_work(),
        "a stream-ordered allocation is not recorded as pending work"
    );
    let sync = fresh_block.sync_queue(fresh_block.queue()).unwrap();
    assert!(
        sync.is_some_and(|queue| std::sync::Arc::ptr_eq(&queue, &home)),
        "a CAI export of a fresh allocation must name the allocating stream"
    );
    fresh_block.enqueue_copy_from(&source, &other).unwrap();
    assert_eq!(fresh_block.to_vec().unwrap(), pattern(LEN, 5));
});

// A CAI import with a producer stream: host views wait for the producer's work through our stream,
// and the producer's later work waits for what devbuf enqueues on the memory (CAI v3).
child_test!(a_cai_import_records_the_producers_work_and_holds_its_stream_back [
    "DEVBUF_CUDA_TEST_DELAY_US" = "20000",
] {
    let (home, producer) = (shared(0), fresh(0));
    let producer_stream = cuda(&producer).stream();
    let memory = Buffer::alloc(&home, MemKind::Host, LEN).unwrap();
    memory.fill(0).unwrap();
    foreign_fill(0, producer_stream, memory.ptr(), 7, LEN);
    // SAFETY: `memory` is kept alive by the imported buffer's owner.
    let imported = unsafe {
        Buffer::from_foreign(
            home.clone(),
            memory.ptr(),
            LEN,
            MemKind::Host,
            Owner::keep_alive(memory.clone()),
        )
    };
    // SAFETY: the producer's stream lives until the end of the test.
    unsafe { cuda(&home).sync_cai_import(&imported, Some(producer_stream as i64)) }.unwrap();
    assert!(imported.has_pending_work());
    imported.synchronize().unwrap();
    // SAFETY: pinned memory, and the producer's work on it is done.
    let bytes = unsafe { std::slice::from_raw_parts(imported.ptr(), LEN) };
    assert!(bytes.iter().all(|&b| b == 7), "read before the producer's work");

    for _ in 0..5 {
        imported.enqueue_fill(9).unwrap();
    }
    foreign_fill(0, producer_stream, memory.ptr(), 5, LEN);
    producer.wait().unwrap();
    imported.synchronize().unwrap();
    assert_eq!(
        memory.to_vec().unwrap(),
        vec![5; LEN],
        "the producer's stream did not wait for our fills"
    );
});

// Memory handed to other libraries may be used by their work on any device: it is released only
// after that work.
child_test!(exported_memory_is_released_after_consumers_on_every_device [
    "DEVBUF_CUDA_TEST_DELAY_US" = "20000",
] needs Need::Devices(2); {
    let (home, consumer) = (shared(0), shared(1));
    for kind in [MemKind::Host, MemKind::Shared] {
        let exported = Buffer::alloc(&home, kind, LEN).unwrap();
        exported.mark_exported();
        foreign_fill(1, cuda(&consumer).stream(), exported.ptr(), 1, LEN);
        drop(exported);
    }
    consumer.wait().unwrap();
    Buffer::alloc(&home, MemKind::Host, 64).expect("device 0 is still usable");
});

// Foreign memory devbuf handed on lets go of its producer's owner only after the consumers' work.
child_test!(re_exported_foreign_memory_outlives_its_consumers [
    "DEVBUF_CUDA_TEST_DELAY_US" = "20000",
] {
    let (home, consumer) = (shared(0), fresh(0));
    let pinned = in_primary_context(0, || {
        let mut pinned: *mut c_void = ptr::null_mut();
        // SAFETY: a valid out-pointer; the deleter below frees the memory once.
        check("cuMemHostAlloc", unsafe { sys::cuMemHostAlloc(&mut pinned, LEN, 0) });
        pinned as usize
    });
    let free = move || {
        in_primary_context(0, || {
            // SAFETY: the pinned allocation above, freed once, after its last view.
            check("cuMemFreeHost", unsafe { sys::cuMemFreeHost(pinned as *mut c_void) });
        })
    };
    // SAFETY: the memory stays allocated until the deleter runs.
    let imported = unsafe {
        Buffer::from_foreign(home.clone(), pinned as *mut u8, LEN, MemKind::Host, Owner::deleter(free))
    };
    imported.mark_exported();
    foreign_fill(0, cuda(&consumer).stream(), imported.ptr(), 1, LEN);
    drop(imported);
    consumer.wait().unwrap();
    Buffer::alloc(&home, MemKind::Host, 64).expect("device 0 is still usable");
});

// Memory handed to other libraries: their work on the legacy default stream, or on a blocking
// stream (whose earlier work the legacy stream follows: NVIDIA's "Stream synchronization
// behavior"), comes before devbuf's next host view, copy and fill, through an event recorded on
// the legacy stream. Also on a queue over a blocking stream: blocking streams follow the legacy
// stream, but not one another, so that queue needs the event too.
child_test!(devbuf_follows_consumers_on_the_legacy_and_blocking_streams [
    "DEVBUF_CUDA_TEST_DELAY_US" = "20000",
] {
    let ours_by_default = shared(0); // initializes the driver
    let blocking_stream = || {
        in_primary_context(0, || {
            let mut stream = ptr::null_mut();
            // SAFETY: a valid out-pointer; the stream is destroyed below.
            check("cuStreamCreate", unsafe { sys::cuStreamCreate(&mut stream, 0) });
            stream as usize
        })
    };
    let (consumers, ours) = (blocking_stream(), blocking_stream());
    // SAFETY: the stream outlives the queue and its buffers (destroyed at the end).
    let on_blocking: Arc<dyn Queue> = Arc::new(unsafe { CudaQueue::with_stream(0, ours) }.unwrap());
    for home in [ours_by_default, on_blocking] {
        for stream in [1, consumers] {
            let exported = Buffer::alloc(&home, MemKind::Host, LEN).unwrap();
            exported.fill(0).unwrap();
            exported.mark_exported();
            foreign_fill(0, stream, exported.ptr(), 7, LEN);
            exported.synchronize().unwrap();
            // SAFETY: pinned memory, and the consumer's work on it is done.
            let bytes = unsafe { std::slice::from_raw_parts(exported.ptr(), LEN) };
            assert!(bytes.iter().all(|&b| b == 7), "a host view read before stream {stream:#x}");
            foreign_fill(0, stream, exported.ptr(), 8, LEN);
            assert_eq!(exported.to_vec().unwrap(), vec![8; LEN], "a copy before {stream:#x}");
            foreign_fill(0, stream, exported.ptr(), 5, LEN);
            exported.fill(9).unwrap();
            in_primary_context(0, || {
                // SAFETY: the stream is alive.
                check("cuStreamSynchronize", unsafe {
                    sys::cuStreamSynchronize(stream as CUstream)
                });
            });
            assert_eq!(exported.to_vec().unwrap(), vec![9; LEN], "a fill under {stream:#x}");
        }
    }
    for stream in [consumers, ours] {
        in_primary_context(0, || {
            // SAFETY: our stream, destroyed once, after the queue on it.
            check("cuStreamDestroy", unsafe { sys::cuStreamDestroy_v2(stream as CUstream) });
        });
    }
});

/// A user stream, as `devbuf.Stream("cuda:0")` opens one.
fn user_stream() -> Arc<dyn Queue> {
    use devbuf_core::{Backend, StreamOptions};
    devbuf_cuda::CudaBackend
        .open_stream("0", StreamOptions::default())
        .expect("a user stream")
}

// The ordering invariant on a stream handed out with the memory (issue 33): a CAI export names
// the user stream with pending work, the consumer writes there as CAI v3 tells it to, and every
// later access of devbuf's waits for that write; the stream lives as long as the memory.
child_test!(a_consumer_on_a_user_stream_named_by_a_cai_export_comes_before_devbuf [
    "DEVBUF_CUDA_TEST_DELAY_US" = "20000",
] {
    let (home, user) = (shared(0), user_stream());
    let memory = Buffer::alloc(&home, MemKind::Host, LEN).unwrap();
    memory.fill(0).unwrap();
    // Pending on any device: a GPU finishes a 1 MiB fill before the export looks.
    hold_stream_for(cuda(&user).stream(), PENDING);
    memory.enqueue_fill_on(1, &user).unwrap();
    let named = devbuf_core::exchange::cai_export_stream(&memory).unwrap();
    assert_eq!(named, Some(cuda(&user).stream()), "the export names the stream with the work");
    foreign_fill(0, cuda(&user).stream(), memory.ptr(), 7, LEN);
    assert_eq!(memory.to_vec().unwrap(), vec![7; LEN], "a host read before the consumer's write");
    foreign_fill(0, cuda(&user).stream(), memory.ptr(), 8, LEN);
    let copy = Buffer::alloc(&home, MemKind::Device, LEN).unwrap();
    copy.copy_from(&memory).unwrap();
    assert_eq!(copy.to_vec().unwrap(), vec![8; LEN], "a copy on another stream before the write");
    let weak = Arc::downgrade(&user);
    drop(user);
    assert!(weak.upgrade().is_some(), "a stream named in an export died with the memory alive");
    drop((memory, copy));
    assert!(weak.upgrade().is_none(), "the memory kept its stream after its release");
});

// A devbuf stream passed back as DLPack's `stream` is a stream the memory was handed out on.
child_test!(a_dlpack_consumer_on_a_devbuf_stream_comes_before_devbuf [
    "DEVBUF_CUDA_TEST_DELAY_US" = "20000",
] {
    use devbuf_core::dlpark::ffi::{DLDevice, DLDeviceType};
    use devbuf_core::ForeignObject;
    let (home, user) = (shared(0), user_stream());
    let memory = Buffer::alloc(&home, MemKind::Device, LEN).unwrap();
    memory.fill(0).unwrap();
    let device = DLDevice { device_type: DLDeviceType::CUDA, device_id: 0 };
    let stream = ForeignObject::Int(cuda(&user).stream() as i64);
    // SAFETY: the stream is a live devbuf stream.
    unsafe { devbuf_core::exchange::prepare_dlpack_export(&memory, device, &stream) }.unwrap();
    foreign_fill(0, cuda(&user).stream(), memory.ptr(), 7, LEN);
    assert_eq!(memory.to_vec().unwrap(), vec![7; LEN], "a read before the consumer's write");
});

// A re-export names a stream that follows the first consumer's work on the legacy stream.
child_test!(a_re_export_follows_the_first_consumers_work [
    "DEVBUF_CUDA_TEST_DELAY_US" = "20000",
] {
    let home = shared(0);
    let memory = Buffer::alloc(&home, MemKind::Host, LEN).unwrap();
    memory.fill(0).unwrap();
    assert_eq!(devbuf_core::exchange::cai_export_stream(&memory).unwrap(), None);
    foreign_fill(0, 1, memory.ptr(), 7, LEN); // the first consumer, on the legacy stream
    let named = devbuf_core::exchange::cai_export_stream(&memory).unwrap();
    assert_eq!(named, Some(cuda(&home).stream()), "a re-export must name a stream to wait for");
    home.wait().unwrap();
    // SAFETY: pinned memory; the named stream's work (after the consumer's) is done.
    let bytes = unsafe { std::slice::from_raw_parts(memory.ptr(), LEN) };
    assert!(bytes.iter().all(|&b| b == 7), "the named stream did not follow the first consumer");
});

/// Device 1's default pool's access for device 0 (`cuMemPoolGetAccess`).
fn device_0_reaches_device_1_s_pool() -> bool {
    in_primary_context(0, || {
        let mut pool = ptr::null_mut();
        let location = sys::CUmemLocation {
            type_: sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE,
            id: 0,
        };
        let mut flags = sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_NONE;
        // SAFETY: valid out-pointers; device 1 exists.
        unsafe {
            check(
                "cuDeviceGetDefaultMemPool",
                sys::cuDeviceGetDefaultMemPool(&mut pool, 1),
            );
            check(
                "cuMemPoolGetAccess",
                sys::cuMemPoolGetAccess(&mut flags, pool, (&raw const location).cast_mut()),
            );
        }
        flags == sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE
    })
}

// Between peer devices (the driver's default) a copy runs on the copying queue's stream
// (cuMemcpyPeerAsync, which the Programming Guide names for pool memory of another device), after
// device 1's pending fill and before device 1's next one, enqueued without waiting; and devbuf
// never changes the access of device 1's pool, which may be another library's.
child_test!(a_copy_between_peer_devices_runs_on_the_devices_ordered_with_both
    ["DEVBUF_CUDA_TEST_DELAY_US" = "20000"] needs Need::Devices(2); {
    let (zero, one) = (shared(0), shared(1));
    let on_one = Buffer::alloc(&one, MemKind::Device, LEN).unwrap();
    let on_zero = Buffer::alloc(&zero, MemKind::Device, LEN).unwrap();
    assert!(zero.copies_reach(on_one.ptr()) && one.copies_reach(on_zero.ptr()));
    assert!(!device_0_reaches_device_1_s_pool());
    on_one.enqueue_fill(5).unwrap();
    on_zero.enqueue_copy_from(&on_one, &zero).unwrap();
    on_one.enqueue_fill(9).unwrap();
    assert!(!device_0_reaches_device_1_s_pool());
    assert_eq!(on_zero.to_vec().unwrap(), vec![5; LEN]);
    assert_eq!(on_one.to_vec().unwrap(), vec![9; LEN]);
    // And back, synchronously, on device 1's queue.
    on_one.copy_from(&on_zero).unwrap();
    assert_eq!(on_one.to_vec().unwrap(), vec![5; LEN]);
});

// Devices that are not peers: no direct copy; `copy_from` stages through the host, and an
// enqueued copy on one device's queue is refused (it cannot reach the other's memory).
child_test!(a_copy_between_devices_that_are_not_peers_stages_through_the_host
    ["DEVBUF_CUDA_TEST_NO_PEER_ACCESS" = "0-1"]
    needs Need::TestDriver("devices that are not peers (DEVBUF_CUDA_TEST_NO_PEER_ACCESS)"),
    Need::Devices(2); {
    let (zero, one) = (shared(0), shared(1));
    let on_one = Buffer::alloc(&one, MemKind::Device, LEN).unwrap();
    let on_zero = Buffer::alloc(&zero, MemKind::Device, LEN).unwrap();
    assert!(!zero.copies_reach(on_one.ptr()));
    on_one.fill(7).unwrap();
    assert!(on_zero.enqueue_copy_from(&on_one, &zero).is_err());
    on_zero.copy_from(&on_one).unwrap();
    assert_eq!(on_zero.to_vec().unwrap(), vec![7; LEN]);
    assert!(!device_0_reaches_device_1_s_pool());
});
