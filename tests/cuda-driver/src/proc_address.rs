//! `cuGetProcAddress(_v2)`: entry points by base name and CUDA version, the way cuda-bindings
//! (numba-cuda, cuda.core) and the CUDA runtime load the driver.
//!
//! A base name maps to the variant whose ABI the requested version has (`cuMemAlloc` at 3020 and
//! later is `cuMemAlloc_v2`). Where a later version changed the ABI to one the double does not
//! implement, that version gets a stub that returns CUDA_ERROR_NOT_SUPPORTED rather than a
//! function with the wrong arguments. Names the double does not know get the same stub: loaders
//! ask for hundreds of names up front and fail when any is missing. `DEVBUF_CUDA_TEST_HIDE` makes
//! names look missing here (CUDA_ERROR_NOT_FOUND, as from an older driver); `dlsym` still finds
//! the exported symbols, which a shared library cannot withhold.

use std::ffi::{CStr, c_char, c_void};
use std::sync::OnceLock;

use cudarc::driver::sys::CUresult;

use crate::alloc::*;
use crate::config::config;
use crate::context::*;
use crate::device::*;
use crate::errors::*;
use crate::event::*;
use crate::ipc::*;
use crate::pointer::*;
use crate::pool::*;
use crate::stream::*;
use crate::transfer::*;

/// `CUdriverProcAddressQueryResult`.
const SYMBOL_FOUND: i32 = 0;
const SYMBOL_NOT_FOUND: i32 = 1;
const VERSION_NOT_SUFFICIENT: i32 = 2;
/// `CU_GET_PROC_ADDRESS_LEGACY_STREAM | CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM`.
const KNOWN_FLAGS: u64 = 0x1 | 0x2;

/// What a name and version resolve to.
#[derive(Clone, Copy)]
enum Target {
    /// A function's address.
    Function(usize),
    /// A newer ABI the double does not implement.
    Unimplemented,
}

macro_rules! table {
    ($($name:literal $since:literal => $target:tt;)*) => {
        /// Every base name the double serves, with the CUDA version its variant appeared in.
        fn table() -> &'static [(&'static str, i32, Target)] {
            static TABLE: OnceLock<Vec<(&'static str, i32, Target)>> = OnceLock::new();
            TABLE.get_or_init(|| vec![$(($name, $since, table!(@target $target)),)*])
        }
    };
    (@target none) => { Target::Unimplemented };
    (@target $function:ident) => { Target::Function($function as *const () as usize) };
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
    "cuDeviceCanAccessPeer" 4000 => cuDeviceCanAccessPeer;
    "cuDevicePrimaryCtxRetain" 7000 => cuDevicePrimaryCtxRetain;
    "cuDevicePrimaryCtxRelease" 7000 => cuDevicePrimaryCtxRelease;
    "cuDevicePrimaryCtxRelease" 11000 => cuDevicePrimaryCtxRelease_v2;
    "cuDevicePrimaryCtxReset" 7000 => cuDevicePrimaryCtxReset;
    "cuDevicePrimaryCtxReset" 11000 => cuDevicePrimaryCtxReset_v2;
    "cuDevicePrimaryCtxSetFlags" 7000 => cuDevicePrimaryCtxSetFlags;
    "cuDevicePrimaryCtxSetFlags" 11000 => cuDevicePrimaryCtxSetFlags_v2;
    "cuDevicePrimaryCtxGetState" 7000 => cuDevicePrimaryCtxGetState;
    "cuCtxCreate" 3020 => cuCtxCreate_v2;
    "cuCtxCreate" 11040 => none;
    "cuCtxDestroy" 4000 => cuCtxDestroy_v2;
    "cuCtxGetCurrent" 4000 => cuCtxGetCurrent;
    "cuCtxSetCurrent" 4000 => cuCtxSetCurrent;
    "cuCtxPushCurrent" 4000 => cuCtxPushCurrent_v2;
    "cuCtxPopCurrent" 4000 => cuCtxPopCurrent_v2;
    "cuCtxGetDevice" 2000 => cuCtxGetDevice;
    "cuCtxGetDevice" 13000 => none;
    "cuCtxGetFlags" 7000 => cuCtxGetFlags;
    "cuCtxGetApiVersion" 3020 => cuCtxGetApiVersion;
    "cuCtxSynchronize" 2000 => cuCtxSynchronize;
    "cuCtxSynchronize" 13000 => none;
    "cuStreamCreate" 2000 => cuStreamCreate;
    "cuStreamCreateWithPriority" 5050 => cuStreamCreateWithPriority;
    "cuStreamDestroy" 4000 => cuStreamDestroy_v2;
    "cuStreamSynchronize" 2000 => cuStreamSynchronize;
    "cuStreamQuery" 2000 => cuStreamQuery;
    "cuStreamWaitEvent" 3020 => cuStreamWaitEvent;
    "cuStreamGetCtx" 9020 => cuStreamGetCtx;
    "cuStreamGetCtx" 12050 => none;
    "cuStreamGetFlags" 5050 => cuStreamGetFlags;
    "cuStreamAddCallback" 5000 => cuStreamAddCallback;
    "cuLaunchHostFunc" 10000 => cuLaunchHostFunc;
    "cuEventCreate" 2000 => cuEventCreate;
    "cuEventRecord" 2000 => cuEventRecord;
    "cuEventRecordWithFlags" 11010 => cuEventRecordWithFlags;
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
    "cuMemAllocAsync" 11020 => cuMemAllocAsync;
    "cuMemFreeAsync" 11020 => cuMemFreeAsync;
    "cuDeviceGetDefaultMemPool" 11020 => cuDeviceGetDefaultMemPool;
    "cuDeviceGetMemPool" 11020 => cuDeviceGetMemPool;
    "cuMemPoolSetAttribute" 11020 => cuMemPoolSetAttribute;
    "cuMemPoolGetAttribute" 11020 => cuMemPoolGetAttribute;
    "cuMemPoolTrimTo" 11020 => cuMemPoolTrimTo;
    "cuMemcpy" 4000 => cuMemcpy;
    "cuMemcpyAsync" 4000 => cuMemcpyAsync;
    "cuMemcpyHtoD" 3020 => cuMemcpyHtoD_v2;
    "cuMemcpyDtoH" 3020 => cuMemcpyDtoH_v2;
    "cuMemcpyDtoD" 3020 => cuMemcpyDtoD_v2;
    "cuMemcpyHtoDAsync" 3020 => cuMemcpyHtoDAsync_v2;
    "cuMemcpyDtoHAsync" 3020 => cuMemcpyDtoHAsync_v2;
    "cuMemcpyDtoDAsync" 3020 => cuMemcpyDtoDAsync_v2;
    "cuMemsetD8" 3020 => cuMemsetD8_v2;
    "cuMemsetD16" 3020 => cuMemsetD16_v2;
    "cuMemsetD32" 3020 => cuMemsetD32_v2;
    "cuMemsetD8Async" 3020 => cuMemsetD8Async;
    "cuMemsetD16Async" 3020 => cuMemsetD16Async;
    "cuMemsetD32Async" 3020 => cuMemsetD32Async;
    "cuIpcGetMemHandle" 4010 => cuIpcGetMemHandle;
    "cuIpcOpenMemHandle" 4010 => cuIpcOpenMemHandle;
    "cuIpcOpenMemHandle" 11000 => cuIpcOpenMemHandle_v2;
    "cuIpcCloseMemHandle" 4010 => cuIpcCloseMemHandle;
    "cuPointerGetAttribute" 4000 => cuPointerGetAttribute;
    "cuPointerGetAttributes" 7000 => cuPointerGetAttributes;
}

/// What everything the double does not implement does: kernels, modules, graphs, IPC events, ...
extern "C" fn not_supported() -> CUresult {
    CUresult::CUDA_ERROR_NOT_SUPPORTED
}

/// Resolves `name` at `version`: the function, or the query result that says why not.
fn resolve(name: &str, version: i32) -> Result<usize, i32> {
    let absent = cfg!(feature = "old-driver") && STREAM_ORDERED_ALLOCATOR.contains(&name);
    if absent || config().hidden.iter().any(|hidden| hidden == name) {
        return Err(SYMBOL_NOT_FOUND);
    }
    let variants: Vec<(i32, Target)> = table()
        .iter()
        .filter(|(known, ..)| *known == name)
        .map(|&(_, since, target)| (since, target))
        .collect();
    if variants.is_empty() {
        if config().trace {
            eprintln!("devbuf CUDA test driver: {name} (CUDA {version}) is a NOT_SUPPORTED stub");
        }
        return Ok(not_supported as *const () as usize);
    }
    match variants
        .iter()
        .filter(|(since, _)| *since <= version)
        .max_by_key(|(since, _)| *since)
    {
        Some((_, Target::Function(function))) => Ok(*function),
        Some((_, Target::Unimplemented)) => Ok(not_supported as *const () as usize),
        None => Err(VERSION_NOT_SUFFICIENT),
    }
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
        if symbol.is_null() || function.is_null() || flags & !KNOWN_FLAGS != 0 {
            return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
        }
        // SAFETY: a NUL-terminated string (the caller's contract).
        let name = unsafe { CStr::from_ptr(symbol) }.to_string_lossy();
        // The per-thread-default-stream flag is accepted, but the double hands out the same
        // functions: its stream 0 is always the legacy stream.
        let (found, result) = match resolve(&name, version) {
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
        if result == SYMBOL_FOUND {
            Ok(())
        } else {
            Err(CUresult::CUDA_ERROR_NOT_FOUND)
        }
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
