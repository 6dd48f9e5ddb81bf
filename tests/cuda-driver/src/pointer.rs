//! `cuPointerGetAttribute(s)`: what the driver says about an address; `cuPointerSetAttribute`.
//!
//! As documented: `cuPointerGetAttribute` fails with CUDA_ERROR_INVALID_VALUE for memory the
//! driver does not know (pageable host memory, freed or foreign pointers), while
//! `cuPointerGetAttributes` succeeds and fills in the "null" answers (memory type 0, no context,
//! device ordinal -2, as the real driver reports).

use std::ffi::c_void;
use std::sync::atomic::Ordering;

use cudarc::driver::sys::{CUdeviceptr, CUpointer_attribute as P, CUresult};

use crate::context;
use crate::device::entry;
use crate::errors::{DriverResult, write_out};
use crate::memory::{self, Kind, Origin, Record};

/// `CU_MEMORYTYPE_HOST`, `CU_MEMORYTYPE_DEVICE`.
const MEMORY_TYPE_HOST: u32 = 1;
const MEMORY_TYPE_DEVICE: u32 = 2;
/// `CU_POINTER_ATTRIBUTE_ACCESS_FLAG_READWRITE`.
const ACCESS_READ_WRITE: u32 = 3;
/// The device ordinal the real driver reports for memory it does not know.
const NO_DEVICE_ORDINAL: i32 = -2;
/// `CU_POINTER_ATTRIBUTE_IS_HW_DECOMPRESS_CAPABLE` (CUDA 12.8), the last one the double answers.
const LAST_ATTRIBUTE: u32 = 21;

/// One attribute's value, in the C type the attribute is documented with.
enum Value {
    Pointer(*mut c_void),
    Unsigned(u32),
    Int(i32),
    U64(u64),
    Size(usize),
    Bool(bool),
}

impl Value {
    /// # Safety
    /// `data` is null or valid for writing the attribute's C type.
    unsafe fn write(self, data: *mut c_void) -> DriverResult {
        // SAFETY: the caller's out-pointer, for this attribute's type.
        unsafe {
            match self {
                Value::Pointer(value) => write_out(data.cast(), value),
                Value::Unsigned(value) => write_out(data.cast(), value),
                Value::Int(value) => write_out(data.cast(), value),
                Value::U64(value) => write_out(data.cast(), value),
                Value::Size(value) => write_out(data.cast(), value),
                // A C `bool`: one byte.
                Value::Bool(value) => write_out(data.cast(), value as u8),
            }
        }
    }
}

/// `record`'s answer for `attribute` at `address`; `None` when it has none (e.g. the host
/// pointer of device memory).
fn known(record: &Record, attribute: u32, address: u64) -> Option<Value> {
    let is = |known: P| attribute == known as u32;
    let host_accessible = record.kind != Kind::Device;
    let value = if is(P::CU_POINTER_ATTRIBUTE_CONTEXT) {
        // NULL for stream-ordered memory, which no context owns (see `memory::Record::context`).
        Value::Pointer(
            record
                .context
                .map_or(std::ptr::null_mut(), |context| context.handle().cast()),
        )
    } else if is(P::CU_POINTER_ATTRIBUTE_MEMORY_TYPE) {
        // Managed memory reads as device memory; IS_MANAGED tells it apart.
        Value::Unsigned(match record.kind {
            Kind::PinnedHost => MEMORY_TYPE_HOST,
            Kind::Device | Kind::Managed => MEMORY_TYPE_DEVICE,
        })
    } else if is(P::CU_POINTER_ATTRIBUTE_DEVICE_POINTER) {
        Value::U64(address)
    } else if is(P::CU_POINTER_ATTRIBUTE_HOST_POINTER) {
        if !host_accessible {
            return None;
        }
        Value::Pointer(address as *mut c_void)
    } else if is(P::CU_POINTER_ATTRIBUTE_SYNC_MEMOPS) {
        Value::Bool(record.sync_memops.load(Ordering::Acquire))
    } else if is(P::CU_POINTER_ATTRIBUTE_BUFFER_ID) || is(P::CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID) {
        Value::U64(record.id)
    } else if is(P::CU_POINTER_ATTRIBUTE_IS_MANAGED) {
        Value::Bool(record.kind == Kind::Managed)
    } else if is(P::CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL) {
        Value::Int(record.ordinal as i32)
    } else if is(P::CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE) {
        // What cuIpcGetMemHandle exports: cuMemAlloc's memory.
        Value::Bool(record.kind == Kind::Device && record.origin == Origin::Allocated)
    } else if is(P::CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE) {
        Value::Bool(false)
    } else if is(P::CU_POINTER_ATTRIBUTE_RANGE_START_ADDR)
        || is(P::CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR)
    {
        Value::Pointer(record.start as *mut c_void)
    } else if is(P::CU_POINTER_ATTRIBUTE_RANGE_SIZE) || is(P::CU_POINTER_ATTRIBUTE_MAPPING_SIZE) {
        Value::Size(record.size)
    } else if is(P::CU_POINTER_ATTRIBUTE_MAPPED) {
        Value::Bool(true)
    } else if is(P::CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES) {
        Value::U64(0)
    } else if is(P::CU_POINTER_ATTRIBUTE_ACCESS_FLAGS) {
        Value::Unsigned(ACCESS_READ_WRITE)
    } else if is(P::CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE) {
        let pool = match record.origin {
            Origin::Pooled(pool) => pool,
            _ => 0,
        };
        Value::Pointer(pool as *mut c_void)
    } else if attribute == LAST_ATTRIBUTE {
        Value::Bool(false)
    } else {
        // CU_POINTER_ATTRIBUTE_P2P_TOKENS (no peer mappings) and numbers past the list.
        return None;
    };
    Some(value)
}

/// The "null" answer `cuPointerGetAttributes` gives for memory the driver does not know.
fn unknown(attribute: u32) -> Option<Value> {
    let is = |known: P| attribute == known as u32;
    if attribute == 0 || attribute > LAST_ATTRIBUTE {
        None
    } else if is(P::CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL) {
        Some(Value::Int(NO_DEVICE_ORDINAL))
    } else if is(P::CU_POINTER_ATTRIBUTE_CONTEXT)
        || is(P::CU_POINTER_ATTRIBUTE_HOST_POINTER)
        || is(P::CU_POINTER_ATTRIBUTE_RANGE_START_ADDR)
        || is(P::CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR)
        || is(P::CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE)
    {
        Some(Value::Pointer(std::ptr::null_mut()))
    } else if is(P::CU_POINTER_ATTRIBUTE_MEMORY_TYPE) || is(P::CU_POINTER_ATTRIBUTE_ACCESS_FLAGS) {
        Some(Value::Unsigned(0))
    } else if is(P::CU_POINTER_ATTRIBUTE_RANGE_SIZE) || is(P::CU_POINTER_ATTRIBUTE_MAPPING_SIZE) {
        Some(Value::Size(0))
    } else if is(P::CU_POINTER_ATTRIBUTE_DEVICE_POINTER)
        || is(P::CU_POINTER_ATTRIBUTE_BUFFER_ID)
        || is(P::CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID)
        || is(P::CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES)
    {
        Some(Value::U64(0))
    } else if is(P::CU_POINTER_ATTRIBUTE_P2P_TOKENS) {
        None
    } else {
        Some(Value::Bool(false))
    }
}

/// # Safety
/// `data` is valid for writing the attribute's C type.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuPointerGetAttribute(
    data: *mut c_void,
    attribute: u32,
    pointer: CUdeviceptr,
) -> CUresult {
    entry("cuPointerGetAttribute", || {
        // CU_POINTER_ATTRIBUTE_DEVICE_POINTER: "If there is no current CUcontext then
        // CUDA_ERROR_INVALID_CONTEXT is returned."
        if attribute == P::CU_POINTER_ATTRIBUTE_DEVICE_POINTER as u32
            && context::current_raw().is_none()
        {
            return Err(CUresult::CUDA_ERROR_INVALID_CONTEXT);
        }
        let record = memory::find(pointer).ok_or(CUresult::CUDA_ERROR_INVALID_VALUE)?;
        let value = known(&record, attribute, pointer).ok_or(CUresult::CUDA_ERROR_INVALID_VALUE)?;
        // SAFETY: the caller's out-pointer for this attribute's type.
        unsafe { value.write(data) }
    })
}

/// # Safety
/// `attributes` holds `count` attributes and `data` `count` pointers, each null or valid for
/// writing its attribute's C type.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuPointerGetAttributes(
    count: u32,
    attributes: *const u32,
    data: *mut *mut c_void,
    pointer: CUdeviceptr,
) -> CUresult {
    entry("cuPointerGetAttributes", || {
        if count == 0 || attributes.is_null() || data.is_null() {
            return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
        }
        let record = memory::find(pointer);
        for index in 0..count as usize {
            // SAFETY: both arrays hold `count` elements (the caller's contract).
            let (attribute, out) = unsafe { (*attributes.add(index), *data.add(index)) };
            let value = match &record {
                Some(record) => known(record, attribute, pointer).or_else(|| unknown(attribute)),
                None => unknown(attribute),
            };
            let value = value.ok_or(CUresult::CUDA_ERROR_INVALID_VALUE)?;
            // SAFETY: the caller's out-pointer for this attribute's type.
            unsafe { value.write(out) }?;
        }
        Ok(())
    })
}

/// "The supported attributes are: CU_POINTER_ATTRIBUTE_SYNC_MEMOPS: A boolean attribute that can
/// either be set (1) or unset (0). When set, the region of memory that ptr points to is guaranteed
/// to always synchronize memory operations that are synchronous. If there are some previously
/// initiated synchronous memory operations that are pending when this attribute is set, the
/// function does not return until those memory operations are complete." "value will be
/// considered as a pointer to an unsigned integer to which this attribute is to be set." `ptr`
/// is "a memory region allocated using CUDA memory allocation APIs".
///
/// # Safety
/// `value` is null or valid for reading an unsigned int.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuPointerSetAttribute(
    value: *const c_void,
    attribute: u32,
    pointer: CUdeviceptr,
) -> CUresult {
    entry("cuPointerSetAttribute", || {
        if attribute != P::CU_POINTER_ATTRIBUTE_SYNC_MEMOPS as u32 || value.is_null() {
            return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
        }
        let record = memory::find(pointer).ok_or(CUresult::CUDA_ERROR_INVALID_VALUE)?;
        // SAFETY: non-null, valid for reading an unsigned int (the caller's contract).
        let set = unsafe { value.cast::<u32>().read_unaligned() } != 0;
        if set {
            record.wait_for_synchronous_calls();
        }
        record.sync_memops.store(set, Ordering::Release);
        Ok(())
    })
}
