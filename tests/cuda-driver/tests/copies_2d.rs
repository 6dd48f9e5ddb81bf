//! `cuMemcpy2DAsync` as the driver API reference documents it: the memory types, the pitches it
//! takes, the maximum pitch, the intra-device case it "may fail", and the host synchronization of
//! asynchronous copies. One test per rule, through the exported C ABI.

mod common;

use std::ptr;

use common::*;
use sys::CUmemorytype as M;

fn matrix(
    (to, to_pitch): (CUdeviceptr, usize),
    (from, from_pitch): (CUdeviceptr, usize),
    width: usize,
    height: usize,
) -> sys::CUDA_MEMCPY2D {
    sys::CUDA_MEMCPY2D {
        srcXInBytes: 0,
        srcY: 0,
        srcMemoryType: M::CU_MEMORYTYPE_UNIFIED,
        srcHost: ptr::null(),
        srcDevice: from,
        srcArray: ptr::null_mut(),
        srcPitch: from_pitch,
        dstXInBytes: 0,
        dstY: 0,
        dstMemoryType: M::CU_MEMORYTYPE_UNIFIED,
        dstHost: ptr::null_mut(),
        dstDevice: to,
        dstArray: ptr::null_mut(),
        dstPitch: to_pitch,
        WidthInBytes: width,
        Height: height,
    }
}

/// Sets `len` bytes of device memory and waits until they are set (a synchronous fill of device
/// memory returns before it runs, on the legacy stream).
fn set(device: CUdeviceptr, byte: u8, len: usize) {
    // SAFETY: `device` holds `len` bytes.
    ok(unsafe { sys::cuMemsetD8_v2(device, byte, len) });
    // SAFETY: no arguments.
    ok(unsafe { sys::cuCtxSynchronize() });
}

fn synchronize(stream: CUstream) {
    // SAFETY: the stream is alive.
    ok(unsafe { sys::cuStreamSynchronize(stream) });
}

fn copy_2d(copy: &sys::CUDA_MEMCPY2D, stream: CUstream) -> CUresult {
    // SAFETY: `copy` names memory the test holds for the call and, when asynchronous, until it
    // synchronizes.
    unsafe { sys::cuMemcpy2DAsync_v2(copy, stream) }
}

// cuMemcpy2DAsync: "Perform a 2D memory copy according to the parameters specified in pCopy"; a
// unified address (CU_MEMORYTYPE_UNIFIED) names host or device memory alike. A column of a
// row-major matrix reaches the device and comes back, one call each way, and nothing between the
// rows is touched.
child_test!(a_2d_copy_moves_the_rows_and_nothing_between_them {
    setup();
    let s = stream(NON_BLOCKING);
    let device = device_alloc(4000);
    set(device, 0xee, 4000);
    let column: Vec<u8> = (0..40).collect();
    // 10 rows of 4 bytes, packed on the host, one every 400 bytes on the device.
    ok(copy_2d(&matrix((device, 400), (column.as_ptr() as u64, 4), 4, 10), s));
    synchronize(s);
    let bytes = read(device, 4000);
    for row in 0..10 {
        assert_eq!(&bytes[row * 400..row * 400 + 4], &column[row * 4..row * 4 + 4]);
        assert!(bytes[row * 400 + 4..(row + 1) * 400].iter().all(|&b| b == 0xee), "row {row}");
    }
    let mut back = vec![0u8; 40];
    ok(copy_2d(&matrix((back.as_mut_ptr() as u64, 4), (device, 400), 4, 10), s));
    assert_eq!(back, column, "a copy to pageable memory returns once it is done");
});

// "srcXInBytes and srcY specify the base address of the source data for the copy" (and dstX, dstY
// of the destination): the first row starts Y pitches and X bytes in.
child_test!(the_copy_starts_x_bytes_and_y_rows_in {
    setup();
    let s = stream(NON_BLOCKING);
    let device = device_alloc(64);
    set(device, 0, 64);
    let source: Vec<u8> = (0..64).collect();
    let mut copy = matrix((device, 16), (source.as_ptr() as u64, 16), 4, 2);
    copy.srcXInBytes = 8;
    copy.srcY = 1;
    copy.dstXInBytes = 2;
    ok(copy_2d(&copy, s));
    synchronize(s);
    let bytes = read(device, 64);
    assert_eq!(&bytes[2..6], &source[24..28]);
    assert_eq!(&bytes[18..22], &source[40..44]);
});

// "srcPitch must be greater than or equal to WidthInBytes + srcXInBytes, and dstPitch must be
// greater than or equal to WidthInBytes + dstXInBytes"; cuMemcpy2DAsync "returns an error if any
// pitch is greater than the maximum allowed (CU_DEVICE_ATTRIBUTE_MAX_PITCH)".
child_test!(pitches_below_the_row_or_above_the_maximum_are_refused {
    setup();
    let s = stream(NON_BLOCKING);
    let device = device_alloc(1 << 16);
    let host = vec![0u8; 1 << 16];
    let host = host.as_ptr() as u64;
    let invalid = CUresult::CUDA_ERROR_INVALID_VALUE;
    assert_eq!(copy_2d(&matrix((device, 8), (host, 4), 8, 2), s), invalid, "source pitch < width");
    assert_eq!(copy_2d(&matrix((device, 4), (host, 8), 8, 2), s), invalid, "destination pitch < width");
    let mut offset = matrix((device, 16), (host, 16), 12, 2);
    offset.srcXInBytes = 8;
    assert_eq!(copy_2d(&offset, s), invalid, "source pitch < width + srcXInBytes");
    let mut max_pitch = 0;
    // SAFETY: a valid out-pointer.
    ok(unsafe {
        sys::cuDeviceGetAttribute(&mut max_pitch, sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_PITCH, 0)
    });
    assert!(max_pitch > 0);
    let above = max_pitch as usize + 1;
    assert_eq!(copy_2d(&matrix((device, 8), (host, above), 8, 1), s), invalid, "source pitch > max");
    ok(copy_2d(&matrix((device, 8), (host, 8), 8, 2), s));
    synchronize(s);
});

// Each memory type names its own address: CU_MEMORYTYPE_HOST "srcHost and srcPitch specify the
// (host) base address", CU_MEMORYTYPE_DEVICE "srcDevice and srcPitch specify the (device) base
// address"; device memory named as host memory, pageable memory named as device memory, and a
// CUDA array (none exist: arrays are not modelled) are refused, as is a span past its allocation.
child_test!(each_side_must_be_the_memory_its_type_names {
    setup();
    let s = stream(NON_BLOCKING);
    let device = device_alloc(256);
    let pageable = vec![0u8; 256];
    let invalid = CUresult::CUDA_ERROR_INVALID_VALUE;
    let mut copy = matrix((device, 16), (0, 16), 8, 4);
    copy.srcMemoryType = M::CU_MEMORYTYPE_HOST;
    copy.srcHost = pageable.as_ptr().cast();
    ok(copy_2d(&copy, s));
    copy.srcHost = device as *const _;
    assert_eq!(copy_2d(&copy, s), invalid, "device memory as CU_MEMORYTYPE_HOST");
    copy.srcMemoryType = M::CU_MEMORYTYPE_DEVICE;
    copy.srcDevice = pageable.as_ptr() as u64;
    assert_eq!(copy_2d(&copy, s), invalid, "pageable memory as CU_MEMORYTYPE_DEVICE");
    copy.srcMemoryType = M::CU_MEMORYTYPE_ARRAY;
    assert_eq!(copy_2d(&copy, s), invalid, "a CUDA array");
    let past = matrix((device, 64), (pageable.as_ptr() as u64, 8), 8, 5);
    assert_eq!(copy_2d(&past, s), invalid, "the last row ends past the allocation");
    // SAFETY: null is refused before anything is read.
    let no_parameters = unsafe { sys::cuMemcpy2DAsync_v2(ptr::null(), s) };
    assert_eq!(no_parameters, invalid, "no parameters");
    synchronize(s);
});

// "On intra-device memory copies (device to device, CUDA array to device, CUDA array to CUDA
// array), cuMemcpy2DAsync() may fail for pitches not computed by cuMemAllocPitch()": the double
// fails every one of more than a row (it computes no pitches), so a caller's fallback is tested.
child_test!(intra_device_copies_of_several_rows_may_fail {
    setup();
    let s = stream(NON_BLOCKING);
    let (to, from) = (device_alloc(256), device_alloc(256));
    let invalid = CUresult::CUDA_ERROR_INVALID_VALUE;
    assert_eq!(copy_2d(&matrix((to, 16), (from, 32), 8, 4), s), invalid);
    ok(copy_2d(&matrix((to, 16), (from, 32), 8, 1), s));
    synchronize(s);
});

// Asynchronous copies from pageable memory: the driver stages the source before returning ("for
// transfers from pageable host memory to device memory, a stream sync is performed before the
// copy is initiated" for synchronous ones; the asynchronous ones "copy to staging memory"), so
// the caller may overwrite it at once; the copy itself runs in stream order, after a held gate.
child_test!(a_pageable_source_is_staged_and_the_copy_runs_in_stream_order {
    setup();
    static GATE: Gate = Gate::new();
    let s = stream(NON_BLOCKING);
    let device = device_alloc(64);
    set(device, 0, 64);
    GATE.hold(s);
    let mut source = [5u8; 32];
    ok(copy_2d(&matrix((device, 16), (source.as_ptr() as u64, 8), 8, 4), s));
    source.fill(9);
    let mut query = CUresult::CUDA_SUCCESS;
    for _ in 0..3 {
        // SAFETY: the stream is alive.
        query = unsafe { sys::cuStreamQuery(s) };
    }
    assert_eq!(query, CUresult::CUDA_ERROR_NOT_READY, "the copy waits behind the gate");
    GATE.open();
    synchronize(s);
    let bytes = read(device, 64);
    for row in 0..4 {
        assert_eq!(&bytes[row * 16..row * 16 + 8], &[5u8; 8], "row {row} holds the staged bytes");
    }
});
