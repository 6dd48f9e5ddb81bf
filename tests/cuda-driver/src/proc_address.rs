//! `cuGetProcAddress(_v2)`: entry points by base name and CUDA version, the way cuda-bindings
//! (numba-cuda, cuda.core) and the CUDA runtime load the driver.
//!
//! As documented: "For a requested driver symbol, if the specified CUDA version is greater than
//! or equal to the CUDA version in which the driver symbol was introduced, this API will return
//! the function pointer to the corresponding versioned function" (`cuMemAlloc` at 3020 and later
//! is `cuMemAlloc_v2`). "If the specified CUDA version is greater than the driver version, the
//! API will return CUDA_ERROR_INVALID_VALUE." "The API will return CUDA_SUCCESS and set the
//! returned pfn to NULL if the requested driver function is not supported on the platform, no ABI
//! compatible driver function exists for the specified cudaVersion or if the driver symbol is
//! invalid", with `symbolStatus` CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND ("The requested symbol was
//! not found": every name the double does not implement, kernels and graphs among them) or
//! CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT ("The requested symbol was found but is not
//! supported by cudaVersion specified"). With CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM the
//! per-thread versions (`_ptsz`, `_ptds`) are returned where cuda.h has them: "If a per-thread
//! version is not found, the API will return the legacy version of the driver function."
//!
//! `DEVBUF_CUDA_TEST_HIDE` makes names look missing here, as from an older driver; `dlsym` still
//! finds the exported symbols, which a shared library cannot withhold.

use std::ffi::{CStr, c_char, c_void};
use std::sync::OnceLock;

use cudarc::driver::sys::CUresult;

use crate::alloc::*;
use crate::config::config;
use crate::context::*;
use crate::context_api::*;
use crate::context_teardown::*;
use crate::device::*;
use crate::errors::*;
use crate::event::*;
use crate::ipc::*;
use crate::managed::*;
use crate::managed_batch::*;
use crate::peer::*;
use crate::pointer::*;
use crate::pool::*;
use crate::pool_attributes::*;
use crate::stream::*;
use crate::stream_api::*;
use crate::stream_ordered::*;
use crate::transfer::*;
use crate::transfer_2d::*;

/// `CUdriverProcAddressQueryResult`.
const SYMBOL_FOUND: i32 = 0;
const SYMBOL_NOT_FOUND: i32 = 1;
const VERSION_NOT_SUFFICIENT: i32 = 2;
/// `CU_GET_PROC_ADDRESS_LEGACY_STREAM`, `CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM`.
const LEGACY_STREAM: u64 = 0x1;
const PER_THREAD_DEFAULT_STREAM: u64 = 0x2;

/// One versioned variant of a base name: the CUDA version it appeared in, its function, and its
/// per-thread-default-stream version where cuda.h has one.
struct Variant {
    name: &'static str,
    since: i32,
    legacy: usize,
    per_thread: Option<usize>,
}

macro_rules! table {
    ($($name:literal $since:literal => $legacy:ident $(, $per_thread:ident)?;)*) => {
        /// Every base name the double serves, by the CUDA version its variant appeared in.
        fn table() -> &'static [Variant] {
            static TABLE: OnceLock<Vec<Variant>> = OnceLock::new();
            TABLE.get_or_init(|| vec![$(Variant {
                name: $name,
                since: $since,
                legacy: $legacy as *const () as usize,
                per_thread: None$(.or(Some($per_thread as *const () as usize)))?,
            },)*])
        }
    };
}

table! {
    "cuInit" 2000 => cuInit;
    "cuDriverGetVersion" 2020 => cuDriverGetVersion;
    "cuGetErrorString" 6000 => cuGetErrorString;
    "cuGetErrorName" 6000 => cuGetErrorName;
    "cuGetProcAddress" 11030 => cuGetProcAddress;
    "cuGetProcAddress" 12000 => cuGetProcAddress_v2;
    "cuDeviceGetCount" 2000 => cuDeviceGetCount;
    "cuDeviceGet" 2000 => cuDeviceGet;
    "cuDeviceGetName" 2000 => cuDeviceGetName;
    "cuDeviceGetAttribute" 2000 => cuDeviceGetAttribute;
    "cuDeviceTotalMem" 3020 => cuDeviceTotalMem_v2;
    "cuDeviceComputeCapability" 2000 => cuDeviceComputeCapability;
    "cuDeviceGetUuid" 9020 => cuDeviceGetUuid;
    "cuDeviceGetUuid" 11040 => cuDeviceGetUuid_v2;
    "cuDeviceGetPCIBusId" 4010 => cuDeviceGetPCIBusId;
    "cuDeviceGetByPCIBusId" 4010 => cuDeviceGetByPCIBusId;
    "cuDeviceCanAccessPeer" 4000 => cuDeviceCanAccessPeer;
    "cuCtxEnablePeerAccess" 4000 => cuCtxEnablePeerAccess;
    "cuCtxDisablePeerAccess" 4000 => cuCtxDisablePeerAccess;
    "cuDevicePrimaryCtxRetain" 7000 => cuDevicePrimaryCtxRetain;
    "cuDevicePrimaryCtxRelease" 7000 => cuDevicePrimaryCtxRelease;
    "cuDevicePrimaryCtxRelease" 11000 => cuDevicePrimaryCtxRelease_v2;
    "cuDevicePrimaryCtxReset" 7000 => cuDevicePrimaryCtxReset;
    "cuDevicePrimaryCtxReset" 11000 => cuDevicePrimaryCtxReset_v2;
    "cuDevicePrimaryCtxSetFlags" 7000 => cuDevicePrimaryCtxSetFlags;
    "cuDevicePrimaryCtxSetFlags" 11000 => cuDevicePrimaryCtxSetFlags_v2;
    "cuDevicePrimaryCtxGetState" 7000 => cuDevicePrimaryCtxGetState;
    "cuCtxCreate" 3020 => cuCtxCreate_v2;
    "cuCtxDestroy" 4000 => cuCtxDestroy_v2;
    "cuCtxGetCurrent" 4000 => cuCtxGetCurrent;
    "cuCtxSetCurrent" 4000 => cuCtxSetCurrent;
    "cuCtxPushCurrent" 4000 => cuCtxPushCurrent_v2;
    "cuCtxPopCurrent" 4000 => cuCtxPopCurrent_v2;
    "cuCtxGetDevice" 2000 => cuCtxGetDevice;
    "cuCtxGetFlags" 7000 => cuCtxGetFlags;
    "cuCtxGetApiVersion" 3020 => cuCtxGetApiVersion;
    "cuCtxSynchronize" 2000 => cuCtxSynchronize;
    "cuStreamCreate" 2000 => cuStreamCreate;
    "cuStreamCreateWithPriority" 5050 => cuStreamCreateWithPriority;
    "cuStreamDestroy" 4000 => cuStreamDestroy_v2;
    "cuStreamSynchronize" 2000 => cuStreamSynchronize, cuStreamSynchronize_ptsz;
    "cuStreamQuery" 2000 => cuStreamQuery, cuStreamQuery_ptsz;
    "cuStreamWaitEvent" 3020 => cuStreamWaitEvent, cuStreamWaitEvent_ptsz;
    "cuStreamGetCtx" 9020 => cuStreamGetCtx, cuStreamGetCtx_ptsz;
    "cuStreamGetFlags" 5050 => cuStreamGetFlags, cuStreamGetFlags_ptsz;
    "cuStreamAddCallback" 5000 => cuStreamAddCallback, cuStreamAddCallback_ptsz;
    "cuLaunchHostFunc" 10000 => cuLaunchHostFunc, cuLaunchHostFunc_ptsz;
    "cuEventCreate" 2000 => cuEventCreate;
    "cuEventRecord" 2000 => cuEventRecord, cuEventRecord_ptsz;
    "cuEventRecordWithFlags" 11010 => cuEventRecordWithFlags, cuEventRecordWithFlags_ptsz;
    "cuEventQuery" 2000 => cuEventQuery;
    "cuEventSynchronize" 2000 => cuEventSynchronize;
    "cuEventDestroy" 4000 => cuEventDestroy_v2;
    "cuEventElapsedTime" 2000 => cuEventElapsedTime;
    "cuEventElapsedTime" 12080 => cuEventElapsedTime_v2;
    "cuMemAlloc" 3020 => cuMemAlloc_v2;
    "cuMemFree" 3020 => cuMemFree_v2;
    "cuMemHostAlloc" 2020 => cuMemHostAlloc;
    "cuMemAllocHost" 3020 => cuMemAllocHost_v2;
    "cuMemFreeHost" 2000 => cuMemFreeHost;
    "cuMemHostGetDevicePointer" 3020 => cuMemHostGetDevicePointer_v2;
    "cuMemHostGetFlags" 2030 => cuMemHostGetFlags;
    "cuMemAllocManaged" 6000 => cuMemAllocManaged;
    "cuMemGetInfo" 3020 => cuMemGetInfo_v2;
    "cuMemGetAddressRange" 3020 => cuMemGetAddressRange_v2;
    "cuMemAllocAsync" 11020 => cuMemAllocAsync, cuMemAllocAsync_ptsz;
    "cuMemFreeAsync" 11020 => cuMemFreeAsync, cuMemFreeAsync_ptsz;
    "cuDeviceGetDefaultMemPool" 11020 => cuDeviceGetDefaultMemPool;
    "cuDeviceGetMemPool" 11020 => cuDeviceGetMemPool;
    "cuMemPoolSetAttribute" 11020 => cuMemPoolSetAttribute;
    "cuMemPoolGetAttribute" 11020 => cuMemPoolGetAttribute;
    "cuMemPoolTrimTo" 11020 => cuMemPoolTrimTo;
    "cuMemcpy" 4000 => cuMemcpy, cuMemcpy_ptds;
    "cuMemcpyAsync" 4000 => cuMemcpyAsync, cuMemcpyAsync_ptsz;
    "cuMemcpy2DAsync" 3020 => cuMemcpy2DAsync_v2, cuMemcpy2DAsync_v2_ptsz;
    "cuMemcpyPeer" 4000 => cuMemcpyPeer, cuMemcpyPeer_ptds;
    "cuMemcpyPeerAsync" 4000 => cuMemcpyPeerAsync, cuMemcpyPeerAsync_ptsz;
    "cuMemcpyHtoD" 3020 => cuMemcpyHtoD_v2, cuMemcpyHtoD_v2_ptds;
    "cuMemcpyDtoH" 3020 => cuMemcpyDtoH_v2, cuMemcpyDtoH_v2_ptds;
    "cuMemcpyDtoD" 3020 => cuMemcpyDtoD_v2, cuMemcpyDtoD_v2_ptds;
    "cuMemcpyHtoDAsync" 3020 => cuMemcpyHtoDAsync_v2, cuMemcpyHtoDAsync_v2_ptsz;
    "cuMemcpyDtoHAsync" 3020 => cuMemcpyDtoHAsync_v2, cuMemcpyDtoHAsync_v2_ptsz;
    "cuMemcpyDtoDAsync" 3020 => cuMemcpyDtoDAsync_v2, cuMemcpyDtoDAsync_v2_ptsz;
    "cuMemsetD8" 3020 => cuMemsetD8_v2, cuMemsetD8_v2_ptds;
    "cuMemsetD16" 3020 => cuMemsetD16_v2, cuMemsetD16_v2_ptds;
    "cuMemsetD32" 3020 => cuMemsetD32_v2, cuMemsetD32_v2_ptds;
    "cuMemsetD8Async" 3020 => cuMemsetD8Async, cuMemsetD8Async_ptsz;
    "cuMemsetD16Async" 3020 => cuMemsetD16Async, cuMemsetD16Async_ptsz;
    "cuMemsetD32Async" 3020 => cuMemsetD32Async, cuMemsetD32Async_ptsz;
    "cuIpcGetMemHandle" 4010 => cuIpcGetMemHandle;
    "cuIpcOpenMemHandle" 4010 => cuIpcOpenMemHandle;
    "cuIpcOpenMemHandle" 11000 => cuIpcOpenMemHandle_v2;
    "cuIpcCloseMemHandle" 4010 => cuIpcCloseMemHandle;
    "cuPointerGetAttribute" 4000 => cuPointerGetAttribute;
    "cuPointerGetAttributes" 7000 => cuPointerGetAttributes;
    "cuCtxCreate" 11040 => cuCtxCreate_v3;
    "cuCtxCreate" 12050 => cuCtxCreate_v4;
    "cuCtxGetDevice" 13000 => cuCtxGetDevice_v2;
    "cuCtxSynchronize" 13000 => cuCtxSynchronize_v2;
    "cuCtxGetId" 12000 => cuCtxGetId;
    "cuCtxGetStreamPriorityRange" 5050 => cuCtxGetStreamPriorityRange;
    "cuStreamGetCtx" 12050 => cuStreamGetCtx_v2, cuStreamGetCtx_v2_ptsz;
    "cuStreamGetPriority" 5050 => cuStreamGetPriority, cuStreamGetPriority_ptsz;
    "cuStreamGetId" 12000 => cuStreamGetId, cuStreamGetId_ptsz;
    "cuStreamGetDevice" 12080 => cuStreamGetDevice, cuStreamGetDevice_ptsz;
    "cuStreamIsCapturing" 10000 => cuStreamIsCapturing, cuStreamIsCapturing_ptsz;
    "cuMemHostRegister" 4000 => cuMemHostRegister;
    "cuMemHostRegister" 6050 => cuMemHostRegister_v2;
    "cuMemHostUnregister" 4000 => cuMemHostUnregister;
    "cuMemPrefetchAsync" 8000 => cuMemPrefetchAsync, cuMemPrefetchAsync_ptsz;
    "cuMemPrefetchAsync" 12020 => cuMemPrefetchAsync_v2, cuMemPrefetchAsync_v2_ptsz;
    "cuMemAdvise" 8000 => cuMemAdvise;
    "cuMemAdvise" 12020 => cuMemAdvise_v2;
    "cuMemAllocFromPoolAsync" 11020 => cuMemAllocFromPoolAsync, cuMemAllocFromPoolAsync_ptsz;
    "cuDeviceSetMemPool" 11020 => cuDeviceSetMemPool;
    "cuMemGetDefaultMemPool" 13000 => cuMemGetDefaultMemPool;
    "cuMemGetMemPool" 13000 => cuMemGetMemPool;
    "cuMemSetMemPool" 13000 => cuMemSetMemPool;
    "cuMemPoolCreate" 11020 => cuMemPoolCreate;
    "cuMemPoolDestroy" 11020 => cuMemPoolDestroy;
    "cuMemPoolGetAccess" 11020 => cuMemPoolGetAccess;
    "cuMemPoolSetAccess" 11020 => cuMemPoolSetAccess;
    "cuMemRangeGetAttribute" 8000 => cuMemRangeGetAttribute;
    "cuMemRangeGetAttributes" 8000 => cuMemRangeGetAttributes;
    "cuPointerSetAttribute" 6000 => cuPointerSetAttribute;
    "cuMemPrefetchBatchAsync" 13000 => cuMemPrefetchBatchAsync, cuMemPrefetchBatchAsync_ptsz;
    "cuMemDiscardBatchAsync" 13000 => cuMemDiscardBatchAsync, cuMemDiscardBatchAsync_ptsz;
    "cuMemDiscardAndPrefetchBatchAsync" 13000 => cuMemDiscardAndPrefetchBatchAsync, cuMemDiscardAndPrefetchBatchAsync_ptsz;
    "cuProfilerStart" 4000 => cuProfilerStart;
    "cuProfilerStop" 4000 => cuProfilerStop;
}

/// Resolves `name` at `version` with the per-thread default stream or not: the function, or the
/// query result that says why not.
fn resolve(name: &str, version: i32, per_thread: bool) -> Result<usize, i32> {
    let absent = cfg!(feature = "old-driver") && STREAM_ORDERED_ALLOCATOR.contains(&name);
    if absent || config().hidden.iter().any(|hidden| hidden == name) {
        return Err(SYMBOL_NOT_FOUND);
    }
    let mut variants = table()
        .iter()
        .filter(|variant| variant.name == name)
        .peekable();
    if variants.peek().is_none() {
        if config().trace {
            eprintln!("devbuf CUDA test driver: {name} (CUDA {version}) is not implemented");
        }
        return Err(SYMBOL_NOT_FOUND);
    }
    let variant = variants
        .filter(|variant| variant.since <= version)
        .max_by_key(|variant| variant.since)
        .ok_or(VERSION_NOT_SUFFICIENT)?;
    Ok(match variant.per_thread {
        Some(function) if per_thread => function,
        _ => variant.legacy,
    })
}

/// # Safety
/// `symbol` is a NUL-terminated string; `function` is valid for writing a pointer; `status` is
/// null or valid for writing an int.
unsafe fn get_proc_address(
    symbol: *const c_char,
    function: *mut *mut c_void,
    version: i32,
    flags: u64,
    status: *mut i32,
) -> CUresult {
    boundary("cuGetProcAddress", || {
        let known_flags = LEGACY_STREAM | PER_THREAD_DEFAULT_STREAM;
        if symbol.is_null() || function.is_null() || flags & !known_flags != 0 {
            return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
        }
        if version > config().driver_version {
            return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
        }
        // SAFETY: a NUL-terminated string (the caller's contract).
        let name = unsafe { CStr::from_ptr(symbol) }.to_string_lossy();
        let per_thread = flags & PER_THREAD_DEFAULT_STREAM != 0;
        let (found, result) = match resolve(&name, version, per_thread) {
            Ok(found) => (found as *mut c_void, SYMBOL_FOUND),
            Err(why) => (std::ptr::null_mut(), why),
        };
        // SAFETY: the caller's out-pointers (`status` may be null).
        unsafe {
            write_out(function, found)?;
            if !status.is_null() {
                write_out(status, result)?;
            }
        }
        Ok(())
    })
}

/// # Safety
/// As for [`get_proc_address`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGetProcAddress_v2(
    symbol: *const c_char,
    function: *mut *mut c_void,
    version: i32,
    flags: u64,
    status: *mut i32,
) -> CUresult {
    // SAFETY: the same contract.
    unsafe { get_proc_address(symbol, function, version, flags, status) }
}

/// # Safety
/// As for [`get_proc_address`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGetProcAddress(
    symbol: *const c_char,
    function: *mut *mut c_void,
    version: i32,
    flags: u64,
) -> CUresult {
    // SAFETY: the same contract, without a status.
    unsafe { get_proc_address(symbol, function, version, flags, std::ptr::null_mut()) }
}
