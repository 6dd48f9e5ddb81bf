//! The stream-ordered allocator as NVIDIA documents it: pool memory belongs to no context, pools
//! of one's own, each device's current pool, the pool statistics, and zero-size allocations. One
//! test per rule, each through the exported C ABI.

mod common;

use std::ptr;

use common::*;
use cudarc::driver::sys::{CUmemPool_attribute as A, CUpointer_attribute as P};

const LEN: usize = 1 << 16;

fn alloc_async(len: usize, stream: CUstream) -> CUdeviceptr {
    let mut ptr = 0;
    // SAFETY: a valid out-pointer; the stream is alive in the current context.
    ok(unsafe { sys::cuMemAllocAsync(&mut ptr, len, stream) });
    ptr
}

fn context_and_ordinal(ptr: CUdeviceptr) -> (CUresult, CUcontext, i32) {
    let (mut context, mut ordinal) = (ptr::null_mut::<sys::CUctx_st>(), -1i32);
    // SAFETY: valid out-pointers of each attribute's type.
    unsafe {
        let result = sys::cuPointerGetAttribute(
            (&raw mut context).cast(),
            P::CU_POINTER_ATTRIBUTE_CONTEXT,
            ptr,
        );
        ok(sys::cuPointerGetAttribute(
            (&raw mut ordinal).cast(),
            P::CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
            ptr,
        ));
        (result, context, ordinal)
    }
}

fn pool_of(ptr: CUdeviceptr) -> sys::CUmemoryPool {
    let mut pool: sys::CUmemoryPool = ptr::null_mut();
    // SAFETY: a valid out-pointer of the attribute's type.
    ok(unsafe {
        sys::cuPointerGetAttribute(
            (&raw mut pool).cast(),
            P::CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE,
            ptr,
        )
    });
    pool
}

fn pool_figure(pool: sys::CUmemoryPool, attribute: A) -> u64 {
    let mut value = u64::MAX;
    // SAFETY: a valid out-pointer of the attribute's type (cuuint64_t for 4-8 and 13).
    ok(unsafe { sys::cuMemPoolGetAttribute(pool, attribute, (&raw mut value).cast()) });
    value
}

// CUDA Programming Guide, "Stream Ordered Memory Allocator", "Pointer Attributes": "Since stream
// ordered allocations are not context associated, querying CU_POINTER_ATTRIBUTE_CONTEXT will
// succeed but return NULL in *data. The attribute CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL can be used
// to determine the location of the allocation". cuCtxDestroy: "cuCtxDestroy() will not destroy memory
// allocations by cuMemCreate(), cuMemAllocAsync() and cuMemAllocFromPoolAsync(). These memory
// allocations are not associated with any CUDA context and need to be destroyed explicitly."
child_test!(stream_ordered_memory_belongs_to_its_device_and_outlives_its_context {
    let primary = setup();
    let mut created = ptr::null_mut();
    // SAFETY: a valid out-pointer; device 1 exists. The created context becomes current.
    ok(unsafe { sys::cuCtxCreate_v2(&mut created, 0, 1) });
    let pooled = alloc_async(LEN, ptr::null_mut());
    let own = device_alloc(LEN);
    // SAFETY: the created context's legacy stream.
    ok(unsafe { sys::cuStreamSynchronize(ptr::null_mut()) });
    assert_eq!(context_and_ordinal(pooled), (CUresult::CUDA_SUCCESS, ptr::null_mut(), 1));
    assert_eq!(context_and_ordinal(own), (CUresult::CUDA_SUCCESS, created, 1));
    let mut default_pool = ptr::null_mut();
    // SAFETY: a valid out-pointer.
    ok(unsafe { sys::cuDeviceGetDefaultMemPool(&mut default_pool, 1) });
    assert_eq!(pool_of(pooled), default_pool);
    assert!(pool_of(own).is_null());
    // SAFETY: destroyed once; then the primary context of device 0 is current again.
    ok(unsafe { sys::cuCtxDestroy_v2(created) });
    assert_eq!(context_and_ordinal(pooled).2, 1, "the pool memory outlived the context");
    let mut kind = 0u32;
    // SAFETY: a valid out-pointer of the attribute's type.
    let result = unsafe {
        sys::cuPointerGetAttribute((&raw mut kind).cast(), P::CU_POINTER_ATTRIBUTE_MEMORY_TYPE, own)
    };
    assert_eq!(result, CUresult::CUDA_ERROR_INVALID_VALUE, "cuMemAlloc memory went with it");
    // Any context may use and free it, once the pool gives its device access (tests/devices.rs):
    // device 0's copies it back and frees it.
    let location = sys::CUmemLocation {
        type_: sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE,
        id: 0,
    };
    let flags = sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    // SAFETY: one valid descriptor.
    ok(unsafe { sys::cuMemPoolSetAccess(default_pool, &sys::CUmemAccessDesc { location, flags }, 1) });
    let pinned = pinned_alloc(LEN);
    // SAFETY: both ranges are LEN bytes of live memory; the pool memory is freed once.
    unsafe {
        ok(sys::cuMemcpyDtoH_v2(pinned.cast(), pooled, LEN));
        ok(sys::cuMemFreeAsync(pooled, ptr::null_mut()));
        ok(sys::cuCtxSynchronize());
    }
    let mut current = ptr::null_mut();
    // SAFETY: a valid out-pointer.
    ok(unsafe { sys::cuCtxGetCurrent(&mut current) });
    assert_eq!(current, primary);
});

// cuMemAllocAsync documents no error for a size of 0 (cuMemAlloc does: "If bytesize is 0,
// cuMemAlloc() returns CUDA_ERROR_INVALID_VALUE"); cuda.core allocates zero-size buffers from its
// pools and frees them.
child_test!(a_zero_size_stream_ordered_allocation_is_null_and_frees {
    setup();
    let stream = stream(NON_BLOCKING);
    let mut ptr = 1;
    // SAFETY: valid out-pointers; the stream is alive.
    unsafe {
        ok(sys::cuMemAllocAsync(&mut ptr, 0, stream));
        assert_eq!(ptr, 0);
        ok(sys::cuMemFreeAsync(ptr, stream));
        assert_eq!(sys::cuMemAlloc_v2(&mut ptr, 0), CUresult::CUDA_ERROR_INVALID_VALUE);
    }
    synchronize(stream);
});

fn synchronize(stream: CUstream) {
    // SAFETY: the stream is alive.
    ok(unsafe { sys::cuStreamSynchronize(stream) });
}

// cuMemPoolGetAttribute: CU_MEMPOOL_ATTR_USED_MEM_CURRENT is the "Amount of memory from the pool
// that is currently in use by the application" (not cuMemAlloc's), _USED_MEM_HIGH its "High
// watermark ... since the last time it was reset", RESERVED_MEM_* the "backing memory currently
// allocated for the mempool" and its high watermark. cuMemPoolSetAttribute: the high watermarks
// are reset by setting them to 0 (another value is CUDA_ERROR_INVALID_VALUE).
child_test!(pool_statistics_count_the_pool_and_keep_high_watermarks {
    setup();
    let stream = stream(NON_BLOCKING);
    let mut pool = ptr::null_mut();
    // SAFETY: a valid out-pointer.
    ok(unsafe { sys::cuDeviceGetDefaultMemPool(&mut pool, 0) });
    device_alloc(3 * LEN);
    assert_eq!(pool_figure(pool, A::CU_MEMPOOL_ATTR_USED_MEM_CURRENT), 0);
    let first = alloc_async(LEN, stream);
    let second = alloc_async(2 * LEN, stream);
    for current in [A::CU_MEMPOOL_ATTR_USED_MEM_CURRENT, A::CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT] {
        assert_eq!(pool_figure(pool, current), 3 * LEN as u64);
    }
    // SAFETY: each freed once.
    unsafe {
        ok(sys::cuMemFreeAsync(first, stream));
        ok(sys::cuMemFreeAsync(second, stream));
    }
    synchronize(stream);
    assert_eq!(pool_figure(pool, A::CU_MEMPOOL_ATTR_USED_MEM_CURRENT), 0);
    for high in [A::CU_MEMPOOL_ATTR_USED_MEM_HIGH, A::CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH] {
        assert_eq!(pool_figure(pool, high), 3 * LEN as u64, "{high:?}");
        let (mut zero, mut one) = (0u64, 1u64);
        // SAFETY: valid pointers to a cuuint64_t.
        unsafe {
            let result = sys::cuMemPoolSetAttribute(pool, high, (&raw mut one).cast());
            assert_eq!(result, CUresult::CUDA_ERROR_INVALID_VALUE);
            ok(sys::cuMemPoolSetAttribute(pool, high, (&raw mut zero).cast()));
        }
        assert_eq!(pool_figure(pool, high), 0, "{high:?}");
    }
});

/// `CUmemPoolProps` for device `ordinal`'s memory.
fn pool_props(ordinal: i32, max_size: usize) -> sys::CUmemPoolProps {
    // SAFETY: all-zero bytes are valid props (reserved bytes must be 0).
    let mut props: sys::CUmemPoolProps = unsafe { std::mem::zeroed() };
    props.allocType = sys::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED;
    props.location.type_ = sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE;
    props.location.id = ordinal;
    props.maxSize = max_size;
    props
}

// cuMemPoolCreate makes pools of one's own; cuMemAllocFromPoolAsync allocates from one;
// cuDeviceSetMemPool: "The memory pool must be local to the specified device. cuMemAllocAsync
// allocates from the current mempool of the provided stream's device." cuMemPoolDestroy:
// "Destroying the current mempool of a device sets the default mempool of that device as the
// current mempool for that device", and its outstanding allocations stay until freed.
child_test!(pools_of_ones_own_serve_their_allocations_and_become_current {
    setup();
    let stream = stream(NON_BLOCKING);
    let (mut pool, mut default_pool, mut current) =
        (ptr::null_mut(), ptr::null_mut(), ptr::null_mut());
    let props = pool_props(0, 4 * LEN);
    // SAFETY: valid out-pointers and props.
    unsafe {
        ok(sys::cuMemPoolCreate(&mut pool, &props));
        ok(sys::cuDeviceGetDefaultMemPool(&mut default_pool, 0));
        assert_ne!(pool, default_pool);
        let mut ptr = 0;
        ok(sys::cuMemAllocFromPoolAsync(&mut ptr, LEN, pool, stream));
        assert_eq!(pool_of(ptr), pool);
        assert_eq!(pool_figure(pool, A::CU_MEMPOOL_ATTR_USED_MEM_CURRENT), LEN as u64);
        assert_eq!(pool_figure(default_pool, A::CU_MEMPOOL_ATTR_USED_MEM_CURRENT), 0);
        // Beyond its maximum size: out of memory.
        let mut more = 0;
        let result = sys::cuMemAllocFromPoolAsync(&mut more, 4 * LEN, pool, stream);
        assert_eq!(result, CUresult::CUDA_ERROR_OUT_OF_MEMORY);
        // A pool of device 0 cannot be device 1's current pool.
        assert_eq!(sys::cuDeviceSetMemPool(1, pool), CUresult::CUDA_ERROR_INVALID_VALUE);
        ok(sys::cuDeviceSetMemPool(0, pool));
        ok(sys::cuDeviceGetMemPool(&mut current, 0));
        assert_eq!(current, pool);
        assert_eq!(pool_of(alloc_async(LEN, stream)), pool);
        ok(sys::cuMemPoolDestroy(pool));
        ok(sys::cuDeviceGetMemPool(&mut current, 0));
        assert_eq!(current, default_pool);
        // The default pool cannot be destroyed; a destroyed pool is gone.
        assert_eq!(sys::cuMemPoolDestroy(default_pool), CUresult::CUDA_ERROR_INVALID_VALUE);
        let result = sys::cuMemAllocFromPoolAsync(&mut more, LEN, pool, stream);
        assert_eq!(result, CUresult::CUDA_ERROR_INVALID_VALUE);
        // Its allocation is still there until freed.
        ok(sys::cuMemsetD8Async(ptr, 1, LEN, stream));
        ok(sys::cuMemFreeAsync(ptr, stream));
    }
    synchronize(stream);
});

// cuMemPoolGetAttribute: "The following properties can be also be queried on imported and default
// pools: CU_MEMPOOL_ATTR_ALLOCATION_TYPE ..., CU_MEMPOOL_ATTR_EXPORT_HANDLE_TYPES ...,
// CU_MEMPOOL_ATTR_LOCATION_ID ..., CU_MEMPOOL_ATTR_LOCATION_TYPE". cuMemPoolGetAccess: the pool's
// own device reads and writes it. cuMemPoolSetAccess "Controls visibility of pools between
// devices": between devices that are not peers only revoking another device's is accepted
// (tests/devices.rs grants it between peers).
child_test!(pools_describe_their_location_and_access
    ["DEVBUF_CUDA_TEST_NO_PEER_ACCESS" = "0-1"] {
    init();
    enter(1);
    let mut pool = ptr::null_mut();
    // SAFETY: a valid out-pointer.
    ok(unsafe { sys::cuDeviceGetDefaultMemPool(&mut pool, 1) });
    // CUDA 13's attribute numbers (cudarc's 12.8 bindings lack 9-12), through the raw entry point.
    type GetAttribute = unsafe extern "C" fn(sys::CUmemoryPool, u32, *mut i32) -> CUresult;
    // SAFETY: looking the symbol up does not call it; it has this ABI.
    let get: GetAttribute =
        *unsafe { sys::culib().get::<GetAttribute>(b"cuMemPoolGetAttribute") }.unwrap();
    let int = |attribute: u32| {
        let mut value = -1i32;
        // SAFETY: a valid out-pointer of the attribute's type (int).
        ok(unsafe { get(pool, attribute, &mut value) });
        value
    };
    // ALLOCATION_TYPE (pinned), EXPORT_HANDLE_TYPES (none), LOCATION_ID, LOCATION_TYPE (a device).
    assert_eq!((int(9), int(10), int(11), int(12)), (1, 0, 1, 1));
    assert_eq!(int(A::CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES as u32), 1);
    for (ordinal, expected) in [(1, sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE), (0, sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_NONE)] {
        let mut location = pool_props(ordinal, 0).location;
        let mut flags = sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READ;
        // SAFETY: valid pointers.
        ok(unsafe { sys::cuMemPoolGetAccess(&mut flags, pool, &mut location) });
        assert_eq!(flags, expected, "device {ordinal}");
        let desc = |flags| sys::CUmemAccessDesc { location, flags };
        // SAFETY: one valid descriptor each.
        unsafe {
            ok(sys::cuMemPoolSetAccess(pool, &desc(expected), 1));
            let other = if ordinal == 1 {
                sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_NONE
            } else {
                sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE
            };
            assert_ne!(sys::cuMemPoolSetAccess(pool, &desc(other), 1), CUresult::CUDA_SUCCESS);
        }
    }
});

// Host pools are not modelled: the test driver's devices say so
// (CU_DEVICE_ATTRIBUTE_HOST_MEMORY_POOLS_SUPPORTED reads 0) and cuMemPoolCreate answers
// CUDA_ERROR_NOT_SUPPORTED, a code it documents, as such a device does. (Managed pools are:
// tests/managed.rs.)
child_test!(host_pools_are_not_supported {
    init();
    // CUDA 13's CU_DEVICE_ATTRIBUTE_HOST_MEMORY_POOLS_SUPPORTED (144), past cudarc's 12.8 list.
    type GetAttribute = unsafe extern "C" fn(*mut i32, u32, i32) -> CUresult;
    // SAFETY: looking the symbol up does not call it; it has this ABI.
    let attribute: GetAttribute =
        *unsafe { sys::culib().get::<GetAttribute>(b"cuDeviceGetAttribute") }.unwrap();
    let mut host_pools = -1;
    // SAFETY: a valid out-pointer.
    ok(unsafe { attribute(&mut host_pools, 144, 0) });
    assert_eq!(host_pools, 0);
    for kind in [
        sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_HOST,
        sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_HOST_NUMA,
    ] {
        let mut host = pool_props(0, 0);
        host.location.type_ = kind;
        let mut pool = ptr::null_mut();
        // SAFETY: a valid out-pointer and props.
        let result = unsafe { sys::cuMemPoolCreate(&mut pool, &host) };
        assert_eq!(result, CUresult::CUDA_ERROR_NOT_SUPPORTED);
    }
});

fn set_release_threshold(pool: sys::CUmemoryPool, mut threshold: u64) {
    // SAFETY: a valid pointer to a cuuint64_t.
    ok(unsafe {
        sys::cuMemPoolSetAttribute(
            pool,
            A::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
            (&raw mut threshold).cast(),
        )
    });
}

// CU_MEMPOOL_ATTR_RELEASE_THRESHOLD: "Amount of reserved memory in bytes to hold onto before
// trying to release memory back to the OS. When more than the release threshold bytes of memory
// are held by the memory pool, the allocator will try to release memory back to the OS on the
// next call to stream, event or context synchronize. (default 0)". cuMemPoolTrimTo "Releases
// memory back to the OS until the pool contains fewer than minBytesToKeep reserved bytes". With
// UINT64_MAX (the threshold cuda.core and RMM set) freed memory stays reserved after a
// synchronization; with 0 it goes back then.
child_test!(a_pool_keeps_freed_memory_reserved_up_to_its_release_threshold {
    setup();
    let stream = stream(NON_BLOCKING);
    let mut pool = ptr::null_mut();
    // SAFETY: a valid out-pointer.
    ok(unsafe { sys::cuDeviceGetDefaultMemPool(&mut pool, 0) });
    let reserved = || pool_figure(pool, A::CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT);
    let used = || pool_figure(pool, A::CU_MEMPOOL_ATTR_USED_MEM_CURRENT);
    set_release_threshold(pool, u64::MAX);
    let first = alloc_async(LEN, stream);
    // SAFETY: freed once.
    ok(unsafe { sys::cuMemFreeAsync(first, stream) });
    synchronize(stream);
    assert_eq!((used(), reserved()), (0, LEN as u64));
    // The kept memory serves the next allocation: nothing more is reserved.
    let second = alloc_async(LEN, stream);
    assert_eq!((used(), reserved()), (LEN as u64, LEN as u64));
    // SAFETY: freed once.
    ok(unsafe { sys::cuMemFreeAsync(second, stream) });
    synchronize(stream);
    // SAFETY: a pool handle.
    ok(unsafe { sys::cuMemPoolTrimTo(pool, 0) });
    assert_eq!(reserved(), 0);
    set_release_threshold(pool, 0);
    let third = alloc_async(LEN, stream);
    // SAFETY: freed once.
    ok(unsafe { sys::cuMemFreeAsync(third, stream) });
    synchronize(stream);
    assert_eq!((used(), reserved()), (0, 0));
});
