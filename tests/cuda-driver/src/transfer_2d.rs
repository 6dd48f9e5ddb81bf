//! 2-D copies (`cuMemcpy2DAsync`): `Height` rows of `WidthInBytes` bytes between two pitched
//! matrices, one operation on the stream, with the host synchronization of the 1-D copies
//! ([`crate::transfer`]). What the driver API reference says of `cuMemcpy2DAsync`, held here:
//!
//! - each side's memory type says which address it names: `CU_MEMORYTYPE_HOST` the host address
//!   `srcHost`/`dstHost`, `CU_MEMORYTYPE_DEVICE` the device address `srcDevice`/`dstDevice`,
//!   `CU_MEMORYTYPE_UNIFIED` a unified address in `srcDevice`/`dstDevice` ("may be used only if
//!   unified addressing is supported", which every device of the double reports); the copy starts
//!   `srcY` rows and `srcXInBytes` bytes into it;
//! - "srcPitch must be greater than or equal to WidthInBytes + srcXInBytes, and dstPitch must be
//!   greater than or equal to WidthInBytes + dstXInBytes";
//! - it "returns an error if any pitch is greater than the maximum allowed
//!   (CU_DEVICE_ATTRIBUTE_MAX_PITCH)";
//! - "On intra-device memory copies (device to device, CUDA array to device, CUDA array to CUDA
//!   array), cuMemcpy2DAsync() may fail for pitches not computed by cuMemAllocPitch()": the double
//!   takes that worst case, and refuses every intra-device copy of more than one row, since it
//!   computes no pitches (`cuMemAllocPitch` is not modelled), so that a caller's fallback runs.
//!
//! Every error is CUDA_ERROR_INVALID_VALUE, as for the 1-D copies. Not modelled: CUDA arrays
//! (`CU_MEMORYTYPE_ARRAY`: there are none to name, so the copy is refused), the synchronous
//! `cuMemcpy2D` and `cuMemcpy2DUnaligned`, and overlapping matrices, which the documentation
//! leaves undefined (the double copies row by row, in order).

use cudarc::driver::sys::{CUdeviceptr, CUresult, CUstream};

use crate::device::{MAX_PITCH, entry};
use crate::errors::DriverResult;
use crate::memory::Kind;
use crate::ops::{Op, Place};
use crate::stream;
use crate::transfer::{
    ASYNC, ASYNC_PTSZ, Call, Side, destination_place, finish, host_waits, reachable, side,
};

/// `CUDA_MEMCPY2D` as the caller laid it out, its memory types read as the integers they are
/// (an unknown one is an error, not an invalid enum).
#[repr(C)]
pub struct Memcpy2D {
    src_x_in_bytes: usize,
    src_y: usize,
    src_memory_type: u32,
    src_host: usize,
    src_device: CUdeviceptr,
    src_array: usize,
    src_pitch: usize,
    dst_x_in_bytes: usize,
    dst_y: usize,
    dst_memory_type: u32,
    dst_host: usize,
    dst_device: CUdeviceptr,
    dst_array: usize,
    dst_pitch: usize,
    width_in_bytes: usize,
    height: usize,
}

const HOST: u32 = 1;
const DEVICE: u32 = 2;
const UNIFIED: u32 = 4;

/// One side of the copy: the address its first row starts at, its pitch, and its memory type.
struct Matrix {
    start: u64,
    pitch: usize,
    memory_type: u32,
}

impl Matrix {
    fn new(
        memory_type: u32,
        (host, device): (usize, CUdeviceptr),
        (x, y, pitch): (usize, usize, usize),
        width: usize,
    ) -> DriverResult<Matrix> {
        let base = match memory_type {
            HOST => host as u64,
            DEVICE | UNIFIED => device,
            _ => return Err(CUresult::CUDA_ERROR_INVALID_VALUE),
        };
        if width.checked_add(x).is_none_or(|row| pitch < row) || pitch > MAX_PITCH {
            return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
        }
        let start = y
            .checked_mul(pitch)
            .and_then(|skip| skip.checked_add(x))
            .and_then(|skip| base.checked_add(skip as u64))
            .ok_or(CUresult::CUDA_ERROR_INVALID_VALUE)?;
        Ok(Matrix {
            start,
            pitch,
            memory_type,
        })
    }

    /// The bytes from the first row's start to the last row's end.
    fn span(&self, width: usize, height: usize) -> DriverResult<usize> {
        (height - 1)
            .checked_mul(self.pitch)
            .and_then(|rows| rows.checked_add(width))
            .ok_or(CUresult::CUDA_ERROR_INVALID_VALUE)
    }

    /// The memory the span lies in, which the memory type must describe: host memory for
    /// `CU_MEMORYTYPE_HOST`, memory the device reaches for `CU_MEMORYTYPE_DEVICE`.
    fn side(&self, width: usize, height: usize, synchronous: bool) -> DriverResult<Side> {
        let side = side(self.start, self.span(width, height)?, synchronous)?;
        let kind = match &side {
            Side::Memory(place) => place.record().map(|record| record.kind),
            Side::Pageable(_) => None,
        };
        let fits = match self.memory_type {
            HOST => kind.is_none_or(|kind| kind != Kind::Device),
            DEVICE => kind.is_some(),
            _ => true,
        };
        if !fits {
            return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
        }
        Ok(side)
    }
}

fn is_device_memory_of(side: &Side) -> Option<usize> {
    match side {
        Side::Memory(place) => place
            .record()
            .filter(|record| record.kind == Kind::Device)
            .map(|record| record.ordinal),
        Side::Pageable(_) => None,
    }
}

fn copy_2d(
    operation: &'static str,
    copy: *const Memcpy2D,
    stream: CUstream,
    call: Call,
) -> CUresult {
    entry(operation, || {
        let stream = stream::resolve_as(stream, call.null)?;
        // SAFETY: the caller passes a CUDA_MEMCPY2D or null; any bit pattern is a Memcpy2D.
        let copy = unsafe { copy.as_ref() }.ok_or(CUresult::CUDA_ERROR_INVALID_VALUE)?;
        let (width, height) = (copy.width_in_bytes, copy.height);
        let source = Matrix::new(
            copy.src_memory_type,
            (copy.src_host, copy.src_device),
            (copy.src_x_in_bytes, copy.src_y, copy.src_pitch),
            width,
        )?;
        let destination = Matrix::new(
            copy.dst_memory_type,
            (copy.dst_host, copy.dst_device),
            (copy.dst_x_in_bytes, copy.dst_y, copy.dst_pitch),
            width,
        )?;
        if width == 0 || height == 0 {
            return Ok(());
        }
        let synchronous = call.synchronous;
        let (to, from) = (
            destination.side(width, height, synchronous)?,
            source.side(width, height, synchronous)?,
        );
        let ordinal = stream.context.ordinal;
        if !(reachable(&to, ordinal) && reachable(&from, ordinal)) {
            return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
        }
        let intra_device = is_device_memory_of(&to)
            .is_some_and(|device| is_device_memory_of(&from) == Some(device));
        if intra_device && height > 1 {
            return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
        }
        let wait = host_waits(&stream, call, &to, &from)?;
        let (source_place, source_pitch) = match from {
            Side::Memory(place) => (place, source.pitch),
            Side::Pageable(address) if matches!(to, Side::Pageable(_)) => {
                (Place::Pageable(address as usize), source.pitch)
            }
            Side::Pageable(address) => {
                // Staged now, as the driver stages pageable memory before the call returns: the
                // rows alone, packed (the bytes between rows are not the caller's to read).
                let mut staged = Vec::with_capacity(width * height);
                for row in 0..height {
                    // SAFETY: the caller promises `width` readable bytes at each row.
                    staged.extend_from_slice(unsafe {
                        std::slice::from_raw_parts(
                            (address as usize + row * source.pitch) as *const u8,
                            width,
                        )
                    });
                }
                (Place::Staged(staged.into()), width)
            }
        };
        let op = Op::Copy2D {
            operation,
            destination: destination_place(to),
            source: source_place,
            width,
            height,
            destination_pitch: destination.pitch,
            source_pitch,
        };
        finish(&stream, op, wait)
    })
}

/// # Safety
/// `copy` is null or a valid CUDA_MEMCPY2D whose rows the caller may access as its memory types
/// say, valid until the copy has completed.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemcpy2DAsync_v2(copy: *const Memcpy2D, stream: CUstream) -> CUresult {
    copy_2d("cuMemcpy2DAsync_v2", copy, stream, ASYNC)
}

/// # Safety
/// As for `cuMemcpy2DAsync_v2`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemcpy2DAsync_v2_ptsz(
    copy: *const Memcpy2D,
    stream: CUstream,
) -> CUresult {
    copy_2d("cuMemcpy2DAsync_v2", copy, stream, ASYNC_PTSZ)
}
