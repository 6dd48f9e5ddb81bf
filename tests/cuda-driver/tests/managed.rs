//! Managed memory as NVIDIA documents it: managed memory pools (CUDA 13), what
//! `cuMemRangeGetAttribute(s)` reads back of `cuMemAdvise` and `cuMemPrefetchAsync`, and
//! `CU_POINTER_ATTRIBUTE_SYNC_MEMOPS`. One test per rule, each through the exported C ABI.

mod common;

use std::ffi::c_void;
use std::ptr;

use common::*;
use cudarc::driver::sys::{
    CUmem_advise as Advice, CUmem_range_attribute as R, CUmemLocation, CUmemLocationType as L,
    CUpointer_attribute as P,
};

const LEN: usize = 1 << 16;
/// `CU_MEM_ALLOCATION_TYPE_MANAGED` (CUDA 13; cudarc's 12.8 list lacks it).
const MANAGED: u32 = 2;
/// `CU_DEVICE_CPU`, `CU_DEVICE_INVALID`.
const CPU: i32 = -1;
const INVALID: i32 = -2;

fn location(kind: L, id: i32) -> CUmemLocation {
    CUmemLocation { type_: kind, id }
}

fn managed_alloc(len: usize) -> CUdeviceptr {
    let mut ptr = 0;
    // SAFETY: a valid out-pointer; a context is current. CU_MEM_ATTACH_GLOBAL.
    ok(unsafe { sys::cuMemAllocManaged(&mut ptr, len, 1) });
    ptr
}

/// `cuMemPoolCreate` of a managed pool (through the raw entry point: cudarc's 12.8 props cannot
/// say "managed"), with `max_size` and `handle_types`.
fn create_managed_pool(
    preferred: CUmemLocation,
    max_size: usize,
    handle_types: u32,
) -> (CUresult, sys::CUmemoryPool) {
    // SAFETY: CUmemPoolProps is plain C data, for which all zeros is a valid value.
    let mut props: sys::CUmemPoolProps = unsafe { std::mem::zeroed() };
    props.location = preferred;
    props.maxSize = max_size;
    // SAFETY: the props are plain data of their size; the first two fields are the allocation
    // type and the handle types, 32-bit each.
    let mut bytes: [u8; std::mem::size_of::<sys::CUmemPoolProps>()] =
        unsafe { std::mem::transmute(props) };
    bytes[..4].copy_from_slice(&MANAGED.to_ne_bytes());
    bytes[4..8].copy_from_slice(&handle_types.to_ne_bytes());
    type Create = unsafe extern "C" fn(*mut sys::CUmemoryPool, *const u8) -> CUresult;
    // SAFETY: looking the symbol up does not call it; it has this ABI.
    let create: Create = *unsafe { sys::culib().get::<Create>(b"cuMemPoolCreate") }.unwrap();
    let mut pool = ptr::null_mut();
    // SAFETY: a valid out-pointer and props of CUmemPoolProps's size.
    let result = unsafe { create(&mut pool, bytes.as_ptr()) };
    (result, pool)
}

/// A CUDA 13 pool attribute that is an int (9-12), through the raw entry point.
fn pool_int(pool: sys::CUmemoryPool, attribute: u32) -> i32 {
    type Get = unsafe extern "C" fn(sys::CUmemoryPool, u32, *mut i32) -> CUresult;
    // SAFETY: looking the symbol up does not call it; it has this ABI.
    let get: Get = *unsafe { sys::culib().get::<Get>(b"cuMemPoolGetAttribute") }.unwrap();
    let mut value = -1;
    // SAFETY: a valid out-pointer of the attribute's type.
    ok(unsafe { get(pool, attribute, &mut value) });
    value
}

/// `cuMemGetDefaultMemPool` or `cuMemGetMemPool` (CUDA 13) for managed memory at `place`.
fn managed_pool_of(entry_point: &[u8], place: CUmemLocation) -> (CUresult, sys::CUmemoryPool) {
    type Get = unsafe extern "C" fn(*mut sys::CUmemoryPool, *const CUmemLocation, u32) -> CUresult;
    // SAFETY: looking the symbol up does not call it; it has this ABI.
    let get: Get = *unsafe { sys::culib().get::<Get>(entry_point) }.unwrap();
    let mut pool = ptr::null_mut();
    // SAFETY: valid pointers.
    let result = unsafe { get(&mut pool, &place, MANAGED) };
    (result, pool)
}

fn range_int(ptr: CUdeviceptr, len: usize, attribute: R) -> i32 {
    let mut value = 12345i32;
    // SAFETY: a valid out-pointer of 4 bytes.
    ok(unsafe { sys::cuMemRangeGetAttribute((&raw mut value).cast(), 4, attribute, ptr, len) });
    value
}

fn advise(ptr: CUdeviceptr, len: usize, advice: Advice, place: CUmemLocation) {
    // SAFETY: managed memory the test allocated.
    ok(unsafe { sys::cuMemAdvise_v2(ptr, len, advice, place) });
}

// cuMemPoolCreate: "To create a managed memory pool, applications must set
// CUmemPoolProps::CUmemAllocationType to CU_MEM_ALLOCATION_TYPE_MANAGED.
// CUmemPoolProps::CUmemAllocationHandleType must also be set to CU_MEM_HANDLE_TYPE_NONE since IPC
// is not supported. [...] CUmemPoolProps::maxSize must be set to zero for managed memory pools."
// cuMemPrefetchAsync names memory "allocated via cuMemAllocFromPool from a managed memory pool" as
// managed memory. cuda.core's ManagedMemoryResource allocates from such pools; NVIDIA's cuda.core
// tests (test_memory.py) expect them wherever memory pools and concurrent managed access are.
child_test!(managed_pools_serve_managed_memory {
    setup();
    let (result, pool) = create_managed_pool(location(L::CU_MEM_LOCATION_TYPE_INVALID, 0), 0, 0);
    ok(result);
    // ALLOCATION_TYPE (managed), EXPORT_HANDLE_TYPES (none), LOCATION_TYPE (none).
    assert_eq!((pool_int(pool, 9), pool_int(pool, 10), pool_int(pool, 12)), (2, 0, 0));
    let mut data = 0;
    let mut is_managed = false;
    // SAFETY: valid out-pointers; the legacy stream of the current context.
    unsafe {
        ok(sys::cuMemAllocFromPoolAsync(&mut data, LEN, pool, ptr::null_mut()));
        ok(sys::cuStreamSynchronize(ptr::null_mut()));
        ok(sys::cuPointerGetAttribute(
            (&raw mut is_managed).cast(),
            P::CU_POINTER_ATTRIBUTE_IS_MANAGED,
            data,
        ));
        // The host reads and writes managed memory.
        let host = data as *mut u8;
        host.write(7);
        assert_eq!(host.read(), 7);
        ok(sys::cuMemFreeAsync(data, ptr::null_mut()));
        ok(sys::cuStreamSynchronize(ptr::null_mut()));
    }
    assert!(is_managed);
    let device = location(L::CU_MEM_LOCATION_TYPE_DEVICE, 0);
    assert_eq!(create_managed_pool(device, LEN, 0).0, CUresult::CUDA_ERROR_INVALID_VALUE);
    // CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR.
    assert_eq!(create_managed_pool(device, 0, 1).0, CUresult::CUDA_ERROR_INVALID_VALUE);
});

// cuMemPoolCreate: "For managed memory pools, all devices on the system must have non-zero
// concurrentManagedAccess. If not, this call returns CUDA_ERROR_NOT_SUPPORTED".
child_test!(managed_pools_need_concurrent_managed_access
    ["DEVBUF_CUDA_TEST_CONCURRENT_MANAGED_ACCESS" = "0"] {
    setup();
    let none = location(L::CU_MEM_LOCATION_TYPE_INVALID, 0);
    assert_eq!(create_managed_pool(none, 0, 0).0, CUresult::CUDA_ERROR_NOT_SUPPORTED);
    assert_eq!(managed_pool_of(b"cuMemGetMemPool", none).0, CUresult::CUDA_ERROR_NOT_SUPPORTED);
});

// cuMemPoolCreate: "For managed memory pools, CUmemLocation will be treated as the preferred
// location for all allocations created from the pool." cuMemGetMemPool: "Returns the last pool
// provided to cuMemSetMemPool [...] for this location and allocation type or the location's
// default memory pool"; cuMemSetMemPool: "The location and allocation type specified must match
// those of the pool otherwise CUDA_ERROR_INVALID_VALUE is returned."
child_test!(a_managed_pool_s_location_is_where_its_memory_prefers_to_be {
    setup();
    let device = location(L::CU_MEM_LOCATION_TYPE_DEVICE, 1);
    let (result, pool) = create_managed_pool(device, 0, 0);
    ok(result);
    // LOCATION_ID, LOCATION_TYPE.
    assert_eq!((pool_int(pool, 11), pool_int(pool, 12)), (1, 1));
    let mut data = 0;
    // SAFETY: a valid out-pointer; the legacy stream of the current context.
    unsafe {
        ok(sys::cuMemAllocFromPoolAsync(&mut data, LEN, pool, ptr::null_mut()));
        ok(sys::cuStreamSynchronize(ptr::null_mut()));
    }
    assert_eq!(range_int(data, LEN, R::CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION), 1);
    let (result, default) = managed_pool_of(b"cuMemGetDefaultMemPool", device);
    ok(result);
    assert_eq!(managed_pool_of(b"cuMemGetMemPool", device), (CUresult::CUDA_SUCCESS, default));
    type Set = unsafe extern "C" fn(*const CUmemLocation, u32, sys::CUmemoryPool) -> CUresult;
    // SAFETY: looking the symbol up does not call it; it has this ABI.
    let set: Set = *unsafe { sys::culib().get::<Set>(b"cuMemSetMemPool") }.unwrap();
    // SAFETY: valid pointers.
    unsafe {
        ok(set(&device, MANAGED, pool));
        let elsewhere = location(L::CU_MEM_LOCATION_TYPE_DEVICE, 0);
        assert_eq!(set(&elsewhere, MANAGED, pool), CUresult::CUDA_ERROR_INVALID_VALUE);
    }
    assert_eq!(managed_pool_of(b"cuMemGetMemPool", device), (CUresult::CUDA_SUCCESS, pool));
});

// NVIDIA's cuda-bindings test `test_cuda_mem_range_attr`: after read-mostly, a preferred location
// on the CPU and accessed-by the CPU and device 0 (on a device with concurrent managed access),
// the four range attributes read [1, CU_DEVICE_CPU, [0, CU_DEVICE_CPU, CU_DEVICE_INVALID],
// CU_DEVICE_INVALID], alone and through cuMemRangeGetAttributes.
child_test!(range_attributes_read_back_the_advice_given {
    setup();
    let size = 0x1000;
    let data = managed_alloc(size);
    let cpu = location(L::CU_MEM_LOCATION_TYPE_HOST, CPU);
    advise(data, size, Advice::CU_MEM_ADVISE_SET_READ_MOSTLY, location(L::CU_MEM_LOCATION_TYPE_DEVICE, 0));
    advise(data, size, Advice::CU_MEM_ADVISE_SET_PREFERRED_LOCATION, cpu);
    advise(data, size, Advice::CU_MEM_ADVISE_SET_ACCESSED_BY, cpu);
    advise(data, size, Advice::CU_MEM_ADVISE_SET_ACCESSED_BY, location(L::CU_MEM_LOCATION_TYPE_DEVICE, 0));
    assert_eq!(range_int(data, size, R::CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY), 1);
    assert_eq!(range_int(data, size, R::CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION), CPU);
    let mut accessed_by = [0i32; 3];
    // SAFETY: 12 writable bytes.
    ok(unsafe {
        sys::cuMemRangeGetAttribute(
            accessed_by.as_mut_ptr().cast(),
            12,
            R::CU_MEM_RANGE_ATTRIBUTE_ACCESSED_BY,
            data,
            size,
        )
    });
    assert_eq!(accessed_by, [0, CPU, INVALID]);
    assert_eq!(range_int(data, size, R::CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION), INVALID);
    let (mut read_mostly, mut preferred, mut listed, mut prefetched) = (0i32, 0i32, [0i32; 3], 0i32);
    let mut outputs: [*mut c_void; 4] = [
        (&raw mut read_mostly).cast(),
        (&raw mut preferred).cast(),
        listed.as_mut_ptr().cast(),
        (&raw mut prefetched).cast(),
    ];
    let mut sizes = [4usize, 4, 12, 4];
    let mut attributes = [
        R::CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY,
        R::CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION,
        R::CU_MEM_RANGE_ATTRIBUTE_ACCESSED_BY,
        R::CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION,
    ];
    // SAFETY: four outputs of the sizes given.
    ok(unsafe {
        sys::cuMemRangeGetAttributes(
            outputs.as_mut_ptr(),
            sizes.as_mut_ptr(),
            attributes.as_mut_ptr(),
            4,
            data,
            size,
        )
    });
    assert_eq!((read_mostly, preferred, listed, prefetched), (1, CPU, [0, CPU, INVALID], INVALID));
});

// cuMemRangeGetAttribute answers for "all pages in the given memory range"; cuMemAdvise and
// cuMemPrefetchAsync round the range out to CPU pages. LAST_PREFETCH_LOCATION is "the last
// location to which all pages in the memory range were prefetched explicitly via
// cuMemPrefetchAsync [...] If any page in the memory range was never explicitly prefetched or if
// all pages were not prefetched to the same location, CU_DEVICE_INVALID will be returned"; the
// _TYPE and _ID attributes say the same in CUmemLocation terms.
child_test!(range_attributes_answer_for_every_page_of_the_range {
    setup();
    let page = 4096;
    let data = managed_alloc(4 * page);
    advise(data + 10, 1, Advice::CU_MEM_ADVISE_SET_READ_MOSTLY, location(L::CU_MEM_LOCATION_TYPE_HOST, 0));
    assert_eq!(range_int(data, page, R::CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY), 1);
    assert_eq!(range_int(data, 2 * page, R::CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY), 0);
    let device = location(L::CU_MEM_LOCATION_TYPE_DEVICE, 1);
    let host_numa = location(L::CU_MEM_LOCATION_TYPE_HOST_NUMA, 0);
    // SAFETY: managed memory the test allocated; the legacy stream of the current context.
    unsafe {
        ok(sys::cuMemPrefetchAsync_v2(data, 4 * page, device, 0, ptr::null_mut()));
        ok(sys::cuMemPrefetchAsync_v2(data + 3 * page as u64, 1, host_numa, 0, ptr::null_mut()));
        ok(sys::cuStreamSynchronize(ptr::null_mut()));
    }
    let prefetched = |len| {
        (
            range_int(data, len, R::CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION),
            range_int(data, len, R::CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION_TYPE),
            range_int(data, len, R::CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION_ID),
        )
    };
    assert_eq!(prefetched(3 * page).0, 1);
    assert_eq!(prefetched(3 * page).1, L::CU_MEM_LOCATION_TYPE_DEVICE as i32);
    assert_eq!(prefetched(3 * page).2, 1);
    assert_eq!(prefetched(4 * page).0, INVALID);
    assert_eq!(prefetched(4 * page).1, L::CU_MEM_LOCATION_TYPE_INVALID as i32);
    advise(data, 4 * page, Advice::CU_MEM_ADVISE_SET_PREFERRED_LOCATION, host_numa);
    assert_eq!(
        range_int(data, 4 * page, R::CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION_TYPE),
        L::CU_MEM_LOCATION_TYPE_HOST_NUMA as i32
    );
    assert_eq!(range_int(data, 4 * page, R::CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION), CPU);
    advise(data, page, Advice::CU_MEM_ADVISE_UNSET_PREFERRED_LOCATION, location(L::CU_MEM_LOCATION_TYPE_INVALID, 0));
    assert_eq!(range_int(data, 4 * page, R::CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION), INVALID);
});

// cuMemRangeGetAttribute: "The memory range must refer to managed memory"; READ_MOSTLY's
// "dataSize must be 4", ACCESSED_BY's "must be a non-zero multiple of 4". cuMemAdvise's
// CU_MEM_ADVISE_SET_ACCESSED_BY takes a device or the host: "All other location types are
// invalid."
child_test!(range_attributes_refuse_what_the_documentation_refuses {
    setup();
    let device = device_alloc(LEN);
    let managed = managed_alloc(LEN);
    let mut value = [0i32; 2];
    let mut query = |ptr, size, attribute| {
        // SAFETY: 8 writable bytes.
        unsafe { sys::cuMemRangeGetAttribute(value.as_mut_ptr().cast(), size, attribute, ptr, LEN) }
    };
    let invalid = CUresult::CUDA_ERROR_INVALID_VALUE;
    assert_eq!(query(device, 4, R::CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY), invalid);
    assert_eq!(query(managed, 8, R::CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY), invalid);
    assert_eq!(query(managed, 6, R::CU_MEM_RANGE_ATTRIBUTE_ACCESSED_BY), invalid);
    ok(query(managed, 8, R::CU_MEM_RANGE_ATTRIBUTE_ACCESSED_BY));
    let numa = location(L::CU_MEM_LOCATION_TYPE_HOST_NUMA, 0);
    // SAFETY: managed memory the test allocated.
    let result = unsafe { sys::cuMemAdvise_v2(managed, LEN, Advice::CU_MEM_ADVISE_SET_ACCESSED_BY, numa) };
    assert_eq!(result, invalid);
});

// cuPointerSetAttribute, CU_POINTER_ATTRIBUTE_SYNC_MEMOPS: "When set, the region of memory that
// ptr points to is guaranteed to always synchronize memory operations that are synchronous."
// NVIDIA's cuda-bindings test `test_cuda_pointer_attr` sets it and reads it back; without it a
// synchronous fill of device memory is asynchronous ("API synchronization behavior").
child_test!(sync_memops_makes_synchronous_operations_on_the_memory_synchronize
    ["DEVBUF_CUDA_TEST_DELAY_US" = "50000"] {
    setup();
    let data = device_alloc(LEN);
    let sync_memops = |ptr| {
        let mut value = 2u8;
        // SAFETY: a valid out-pointer of the attribute's type (a C bool).
        ok(unsafe {
            sys::cuPointerGetAttribute((&raw mut value).cast(), P::CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, ptr)
        });
        value
    };
    let fill_returns_pending = || {
        // SAFETY: LEN bytes of device memory; the legacy stream of the current context.
        unsafe {
            ok(sys::cuMemsetD8_v2(data, 1, LEN));
            let pending = sys::cuStreamQuery(ptr::null_mut()) == CUresult::CUDA_ERROR_NOT_READY;
            ok(sys::cuCtxSynchronize());
            pending
        }
    };
    assert_eq!(sync_memops(data), 0);
    assert!(fill_returns_pending());
    for set in [1u32, 0] {
        // SAFETY: an unsigned int for the attribute's value.
        ok(unsafe {
            sys::cuPointerSetAttribute((&raw const set).cast(), P::CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, data)
        });
        assert_eq!(sync_memops(data), set as u8);
        assert_eq!(fill_returns_pending(), set == 0);
    }
    let (other, one) = (P::CU_POINTER_ATTRIBUTE_BUFFER_ID, 1u32);
    // SAFETY: an unsigned int for the value.
    let result = unsafe { sys::cuPointerSetAttribute((&raw const one).cast(), other, data) };
    assert_eq!(result, CUresult::CUDA_ERROR_INVALID_VALUE);
});

type PrefetchBatch = unsafe extern "C" fn(
    *const CUdeviceptr,
    *const usize,
    usize,
    *const CUmemLocation,
    *const usize,
    usize,
    u64,
    CUstream,
) -> CUresult;

// cuMemPrefetchBatchAsync (CUDA 13): "prefetchLocs[k] will be applied to copies starting from
// prefetchLocIdxs[k] through prefetchLocIdxs[k+1] - 1 [...] the first entry in prefetchLocIdxs
// must always be 0"; "The semantics of the individual prefetch operations are as described in
// cuMemPrefetchAsync"; the stream "Must not be legacy NULL stream." cuMemDiscardBatchAsync:
// "Reading from a discarded range, without a subsequent write or prefetch to that part of the
// range, will return an indeterminate value" (the double's: the poison of fresh memory). cuda.core
// 1.2's ManagedBuffer prefetches and discards through these.
child_test!(batched_prefetches_and_discards_act_on_each_range {
    setup();
    let (first, second) = (managed_alloc(LEN), managed_alloc(LEN));
    let stream = stream(0);
    // SAFETY: looking the symbols up does not call them; they have these ABIs.
    let (prefetch, discard) = unsafe {
        type Discard =
            unsafe extern "C" fn(*const CUdeviceptr, *const usize, usize, u64, CUstream) -> CUresult;
        (
            *sys::culib().get::<PrefetchBatch>(b"cuMemPrefetchBatchAsync").unwrap(),
            *sys::culib().get::<Discard>(b"cuMemDiscardBatchAsync").unwrap(),
        )
    };
    let pointers = [first, second];
    let sizes = [LEN, LEN];
    let places = [
        location(L::CU_MEM_LOCATION_TYPE_DEVICE, 1),
        location(L::CU_MEM_LOCATION_TYPE_HOST, 0),
    ];
    let batch = |starts: [usize; 2], stream| {
        // SAFETY: two ranges, two locations.
        unsafe { prefetch(pointers.as_ptr(), sizes.as_ptr(), 2, places.as_ptr(), starts.as_ptr(), 2, 0, stream) }
    };
    ok(batch([0, 1], stream));
    // SAFETY: a stream of the current context.
    ok(unsafe { sys::cuStreamSynchronize(stream) });
    let last = |ptr| range_int(ptr, LEN, R::CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION);
    assert_eq!((last(first), last(second)), (1, CPU));
    assert_eq!(batch([1, 0], stream), CUresult::CUDA_ERROR_INVALID_VALUE);
    assert_eq!(batch([0, 1], ptr::null_mut()), CUresult::CUDA_ERROR_INVALID_VALUE);
    // SAFETY: managed memory the host may write; then one range discarded on the stream.
    unsafe {
        std::ptr::write_bytes(first as *mut u8, 7, LEN);
        ok(discard(pointers.as_ptr(), sizes.as_ptr(), 1, 0, stream));
        ok(sys::cuStreamSynchronize(stream));
        assert!(std::slice::from_raw_parts(first as *const u8, LEN).iter().all(|&byte| byte != 7));
    }
});

// cuMemAdvise, CU_MEM_ADVISE_SET_PREFERRED_LOCATION: "the device must have a non-zero value for
// the device attribute CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS"; cuMemPrefetchAsync: a
// device location "must have non-zero value for the device attribute
// CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS". The host needs none.
child_test!(devices_without_concurrent_managed_access_take_no_hints
    ["DEVBUF_CUDA_TEST_CONCURRENT_MANAGED_ACCESS" = "0"] {
    setup();
    let data = managed_alloc(LEN);
    let device = location(L::CU_MEM_LOCATION_TYPE_DEVICE, 0);
    let host = location(L::CU_MEM_LOCATION_TYPE_HOST, 0);
    let preferred = Advice::CU_MEM_ADVISE_SET_PREFERRED_LOCATION;
    // SAFETY: managed memory the test allocated; the legacy stream of the current context.
    unsafe {
        assert_eq!(sys::cuMemAdvise_v2(data, LEN, preferred, device), CUresult::CUDA_ERROR_INVALID_DEVICE);
        ok(sys::cuMemAdvise_v2(data, LEN, preferred, host));
        let prefetch = sys::cuMemPrefetchAsync_v2(data, LEN, device, 0, ptr::null_mut());
        assert_eq!(prefetch, CUresult::CUDA_ERROR_INVALID_DEVICE);
        ok(sys::cuMemPrefetchAsync_v2(data, LEN, host, 0, ptr::null_mut()));
        ok(sys::cuStreamSynchronize(ptr::null_mut()));
    }
});
