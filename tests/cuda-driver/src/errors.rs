//! The result codes the double returns, their names and descriptions (`cuGetErrorName`,
//! `cuGetErrorString`), and the boundary every exported entry point goes through.

use std::ffi::{CStr, CString, c_char};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::OnceLock;

use cudarc::driver::sys::CUresult;

/// What an entry point's body returns: `Err` carries the failure code.
pub(crate) type DriverResult<T = ()> = Result<T, CUresult>;

/// Runs an entry point's body, turning its result into the C return code. A panic must not unwind
/// into C: it becomes CUDA_ERROR_UNKNOWN, with a line on stderr saying where it came from.
pub(crate) fn boundary(name: &'static str, body: impl FnOnce() -> DriverResult) -> CUresult {
    let _inside = crate::calls::enter(name);
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => CUresult::CUDA_SUCCESS,
        Ok(Err(code)) => code,
        Err(_) => {
            eprintln!("devbuf CUDA test driver: internal error (a panic) in {name}");
            CUresult::CUDA_ERROR_UNKNOWN
        }
    }
}

/// Writes `value` through a caller's out-pointer; a null pointer is CUDA_ERROR_INVALID_VALUE.
///
/// # Safety
/// `out` is null or valid for writing a `T` (the C API's contract for out-parameters).
pub(crate) unsafe fn write_out<T>(out: *mut T, value: T) -> DriverResult {
    if out.is_null() {
        return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
    }
    // SAFETY: non-null, and valid for a write by the caller's contract.
    unsafe { out.write_unaligned(value) };
    Ok(())
}

/// Every code the double can return (and `DEVBUF_CUDA_TEST_*` variables can choose), with the
/// real driver's name and description. The descriptions are the driver's own words, nothing added:
/// NVIDIA's cuda-bindings test `test_get_error_name_and_string` expects `cuGetErrorString` to say
/// exactly "no error" for CUDA_SUCCESS and "invalid device ordinal" for
/// CUDA_ERROR_INVALID_DEVICE (the devices' names say whose driver this is).
const CODES: &[Described] = &[
    (CUresult::CUDA_SUCCESS, c"CUDA_SUCCESS", c"no error"),
    (
        CUresult::CUDA_ERROR_INVALID_VALUE,
        c"CUDA_ERROR_INVALID_VALUE",
        c"invalid argument",
    ),
    (
        CUresult::CUDA_ERROR_OUT_OF_MEMORY,
        c"CUDA_ERROR_OUT_OF_MEMORY",
        c"out of memory",
    ),
    (
        CUresult::CUDA_ERROR_NOT_INITIALIZED,
        c"CUDA_ERROR_NOT_INITIALIZED",
        c"initialization error",
    ),
    (
        CUresult::CUDA_ERROR_DEINITIALIZED,
        c"CUDA_ERROR_DEINITIALIZED",
        c"driver shutting down",
    ),
    (
        CUresult::CUDA_ERROR_DEVICE_UNAVAILABLE,
        c"CUDA_ERROR_DEVICE_UNAVAILABLE",
        c"CUDA-capable device(s) is/are busy or unavailable",
    ),
    (
        CUresult::CUDA_ERROR_NO_DEVICE,
        c"CUDA_ERROR_NO_DEVICE",
        c"no CUDA-capable device is detected",
    ),
    (
        CUresult::CUDA_ERROR_INVALID_DEVICE,
        c"CUDA_ERROR_INVALID_DEVICE",
        c"invalid device ordinal",
    ),
    (
        CUresult::CUDA_ERROR_INVALID_CONTEXT,
        c"CUDA_ERROR_INVALID_CONTEXT",
        c"invalid device context",
    ),
    (
        CUresult::CUDA_ERROR_ECC_UNCORRECTABLE,
        c"CUDA_ERROR_ECC_UNCORRECTABLE",
        c"uncorrectable ECC error encountered",
    ),
    (
        CUresult::CUDA_ERROR_INVALID_HANDLE,
        c"CUDA_ERROR_INVALID_HANDLE",
        c"invalid resource handle",
    ),
    (
        CUresult::CUDA_ERROR_NOT_FOUND,
        c"CUDA_ERROR_NOT_FOUND",
        c"named symbol not found",
    ),
    (
        CUresult::CUDA_ERROR_NOT_READY,
        c"CUDA_ERROR_NOT_READY",
        c"device not ready",
    ),
    (
        CUresult::CUDA_ERROR_ILLEGAL_ADDRESS,
        c"CUDA_ERROR_ILLEGAL_ADDRESS",
        c"an illegal memory access was encountered",
    ),
    (
        CUresult::CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE,
        c"CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE",
        c"primary context active",
    ),
    (
        CUresult::CUDA_ERROR_CONTEXT_IS_DESTROYED,
        c"CUDA_ERROR_CONTEXT_IS_DESTROYED",
        c"context is destroyed",
    ),
    (
        CUresult::CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED,
        c"CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED",
        c"part or all of the requested memory range is already mapped",
    ),
    (
        CUresult::CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED,
        c"CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED",
        c"pointer does not correspond to a registered memory region",
    ),
    (
        CUresult::CUDA_ERROR_NOT_PERMITTED,
        c"CUDA_ERROR_NOT_PERMITTED",
        c"operation not permitted",
    ),
    (
        CUresult::CUDA_ERROR_NOT_SUPPORTED,
        c"CUDA_ERROR_NOT_SUPPORTED",
        c"operation not supported",
    ),
    (
        CUresult::CUDA_ERROR_SYSTEM_DRIVER_MISMATCH,
        c"CUDA_ERROR_SYSTEM_DRIVER_MISMATCH",
        c"system has unsupported display driver / cuda driver combination",
    ),
    (
        CUresult::CUDA_ERROR_UNKNOWN,
        c"CUDA_ERROR_UNKNOWN",
        c"unknown error",
    ),
];

/// Every `CUresult` of CUDA 13 by number and name: a driver names every code (NVIDIA's
/// cuda-bindings test `test_all_CUresult_codes` asks `cuGetErrorName` and `cuGetErrorString` for
/// each and expects CUDA_SUCCESS).
const NAMES: &[(u32, &CStr)] = &[
    (0, c"CUDA_SUCCESS"),
    (1, c"CUDA_ERROR_INVALID_VALUE"),
    (2, c"CUDA_ERROR_OUT_OF_MEMORY"),
    (3, c"CUDA_ERROR_NOT_INITIALIZED"),
    (4, c"CUDA_ERROR_DEINITIALIZED"),
    (5, c"CUDA_ERROR_PROFILER_DISABLED"),
    (6, c"CUDA_ERROR_PROFILER_NOT_INITIALIZED"),
    (7, c"CUDA_ERROR_PROFILER_ALREADY_STARTED"),
    (8, c"CUDA_ERROR_PROFILER_ALREADY_STOPPED"),
    (34, c"CUDA_ERROR_STUB_LIBRARY"),
    (36, c"CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER"),
    (46, c"CUDA_ERROR_DEVICE_UNAVAILABLE"),
    (47, c"CUDA_ERROR_MULTICAST_RESOURCE_FULL"),
    (100, c"CUDA_ERROR_NO_DEVICE"),
    (101, c"CUDA_ERROR_INVALID_DEVICE"),
    (102, c"CUDA_ERROR_DEVICE_NOT_LICENSED"),
    (200, c"CUDA_ERROR_INVALID_IMAGE"),
    (201, c"CUDA_ERROR_INVALID_CONTEXT"),
    (202, c"CUDA_ERROR_CONTEXT_ALREADY_CURRENT"),
    (205, c"CUDA_ERROR_MAP_FAILED"),
    (206, c"CUDA_ERROR_UNMAP_FAILED"),
    (207, c"CUDA_ERROR_ARRAY_IS_MAPPED"),
    (208, c"CUDA_ERROR_ALREADY_MAPPED"),
    (209, c"CUDA_ERROR_NO_BINARY_FOR_GPU"),
    (210, c"CUDA_ERROR_ALREADY_ACQUIRED"),
    (211, c"CUDA_ERROR_NOT_MAPPED"),
    (212, c"CUDA_ERROR_NOT_MAPPED_AS_ARRAY"),
    (213, c"CUDA_ERROR_NOT_MAPPED_AS_POINTER"),
    (214, c"CUDA_ERROR_ECC_UNCORRECTABLE"),
    (215, c"CUDA_ERROR_UNSUPPORTED_LIMIT"),
    (216, c"CUDA_ERROR_CONTEXT_ALREADY_IN_USE"),
    (217, c"CUDA_ERROR_PEER_ACCESS_UNSUPPORTED"),
    (218, c"CUDA_ERROR_INVALID_PTX"),
    (219, c"CUDA_ERROR_INVALID_GRAPHICS_CONTEXT"),
    (220, c"CUDA_ERROR_NVLINK_UNCORRECTABLE"),
    (221, c"CUDA_ERROR_JIT_COMPILER_NOT_FOUND"),
    (222, c"CUDA_ERROR_UNSUPPORTED_PTX_VERSION"),
    (223, c"CUDA_ERROR_JIT_COMPILATION_DISABLED"),
    (224, c"CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY"),
    (225, c"CUDA_ERROR_UNSUPPORTED_DEVSIDE_SYNC"),
    (226, c"CUDA_ERROR_CONTAINED"),
    (227, c"CUDA_ERROR_INSUFFICIENT_LOADER_VERSION"),
    (300, c"CUDA_ERROR_INVALID_SOURCE"),
    (301, c"CUDA_ERROR_FILE_NOT_FOUND"),
    (302, c"CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND"),
    (303, c"CUDA_ERROR_SHARED_OBJECT_INIT_FAILED"),
    (304, c"CUDA_ERROR_OPERATING_SYSTEM"),
    (400, c"CUDA_ERROR_INVALID_HANDLE"),
    (401, c"CUDA_ERROR_ILLEGAL_STATE"),
    (402, c"CUDA_ERROR_LOSSY_QUERY"),
    (500, c"CUDA_ERROR_NOT_FOUND"),
    (600, c"CUDA_ERROR_NOT_READY"),
    (700, c"CUDA_ERROR_ILLEGAL_ADDRESS"),
    (701, c"CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES"),
    (702, c"CUDA_ERROR_LAUNCH_TIMEOUT"),
    (703, c"CUDA_ERROR_LAUNCH_INCOMPATIBLE_TEXTURING"),
    (704, c"CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED"),
    (705, c"CUDA_ERROR_PEER_ACCESS_NOT_ENABLED"),
    (708, c"CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE"),
    (709, c"CUDA_ERROR_CONTEXT_IS_DESTROYED"),
    (710, c"CUDA_ERROR_ASSERT"),
    (711, c"CUDA_ERROR_TOO_MANY_PEERS"),
    (712, c"CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED"),
    (713, c"CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED"),
    (714, c"CUDA_ERROR_HARDWARE_STACK_ERROR"),
    (715, c"CUDA_ERROR_ILLEGAL_INSTRUCTION"),
    (716, c"CUDA_ERROR_MISALIGNED_ADDRESS"),
    (717, c"CUDA_ERROR_INVALID_ADDRESS_SPACE"),
    (718, c"CUDA_ERROR_INVALID_PC"),
    (719, c"CUDA_ERROR_LAUNCH_FAILED"),
    (720, c"CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE"),
    (721, c"CUDA_ERROR_TENSOR_MEMORY_LEAK"),
    (800, c"CUDA_ERROR_NOT_PERMITTED"),
    (801, c"CUDA_ERROR_NOT_SUPPORTED"),
    (802, c"CUDA_ERROR_SYSTEM_NOT_READY"),
    (803, c"CUDA_ERROR_SYSTEM_DRIVER_MISMATCH"),
    (804, c"CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE"),
    (805, c"CUDA_ERROR_MPS_CONNECTION_FAILED"),
    (806, c"CUDA_ERROR_MPS_RPC_FAILURE"),
    (807, c"CUDA_ERROR_MPS_SERVER_NOT_READY"),
    (808, c"CUDA_ERROR_MPS_MAX_CLIENTS_REACHED"),
    (809, c"CUDA_ERROR_MPS_MAX_CONNECTIONS_REACHED"),
    (810, c"CUDA_ERROR_MPS_CLIENT_TERMINATED"),
    (811, c"CUDA_ERROR_CDP_NOT_SUPPORTED"),
    (812, c"CUDA_ERROR_CDP_VERSION_MISMATCH"),
    (900, c"CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED"),
    (901, c"CUDA_ERROR_STREAM_CAPTURE_INVALIDATED"),
    (902, c"CUDA_ERROR_STREAM_CAPTURE_MERGE"),
    (903, c"CUDA_ERROR_STREAM_CAPTURE_UNMATCHED"),
    (904, c"CUDA_ERROR_STREAM_CAPTURE_UNJOINED"),
    (905, c"CUDA_ERROR_STREAM_CAPTURE_ISOLATION"),
    (906, c"CUDA_ERROR_STREAM_CAPTURE_IMPLICIT"),
    (907, c"CUDA_ERROR_CAPTURED_EVENT"),
    (908, c"CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD"),
    (909, c"CUDA_ERROR_TIMEOUT"),
    (910, c"CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE"),
    (911, c"CUDA_ERROR_EXTERNAL_DEVICE"),
    (912, c"CUDA_ERROR_INVALID_CLUSTER_SIZE"),
    (913, c"CUDA_ERROR_FUNCTION_NOT_LOADED"),
    (914, c"CUDA_ERROR_INVALID_RESOURCE_TYPE"),
    (915, c"CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION"),
    (916, c"CUDA_ERROR_KEY_ROTATION"),
    (917, c"CUDA_ERROR_STREAM_DETACHED"),
    (918, c"CUDA_ERROR_GRAPH_RECAPTURE_FAILURE"),
    (919, c"CUDA_ERROR_FABRIC_NOT_READY"),
    (999, c"CUDA_ERROR_UNKNOWN"),
];

fn lookup(code: u32) -> Option<&'static Described> {
    CODES.iter().find(|(known, ..)| *known as u32 == code)
}

/// What `cuGetErrorString` says about `code`: its description when the double returns it, else
/// its name in words ("CUDA_ERROR_LAUNCH_FAILED": "launch failed").
fn description(code: u32) -> Option<&'static CStr> {
    if let Some((_, _, description)) = lookup(code) {
        return Some(description);
    }
    static WORDS: OnceLock<Vec<CString>> = OnceLock::new();
    let words = WORDS.get_or_init(|| {
        NAMES
            .iter()
            .map(|(_, name)| {
                let name = name.to_str().expect("ASCII names");
                let words = name
                    .trim_start_matches("CUDA_ERROR_")
                    .to_lowercase()
                    .replace('_', " ");
                CString::new(words).expect("no NUL in a name")
            })
            .collect()
    });
    let index = NAMES.iter().position(|(known, _)| *known == code)?;
    Some(words[index].as_c_str())
}

/// The code named `text`: a name such as `CUDA_ERROR_NO_DEVICE` (or `NO_DEVICE`) or its number.
pub(crate) fn parse_code(text: &str) -> Option<CUresult> {
    let text = text.trim();
    if let Ok(number) = text.parse::<u32>() {
        return lookup(number).map(|(code, ..)| *code);
    }
    CODES.iter().find_map(|(code, name, _)| {
        let name = name.to_str().ok()?;
        (name == text || name.strip_prefix("CUDA_ERROR_") == Some(text)).then_some(*code)
    })
}

/// A code's entry in [`CODES`].
type Described = (CUresult, &'static CStr, &'static CStr);

fn name(code: u32) -> Option<&'static CStr> {
    NAMES
        .iter()
        .find(|(known, _)| *known == code)
        .map(|(_, name)| *name)
}

fn describe(
    operation: &'static str,
    code: u32,
    out: *mut *const c_char,
    pick: fn(u32) -> Option<&'static CStr>,
) -> CUresult {
    boundary(operation, || {
        let Some(text) = pick(code) else {
            // SAFETY: the caller's out-pointer; the real driver stores NULL for unknown codes.
            unsafe { write_out(out, std::ptr::null()) }?;
            return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
        };
        // SAFETY: the caller's out-pointer; the strings live as long as the process.
        unsafe { write_out(out, text.as_ptr()) }
    })
}

/// # Safety
/// `pStr` is null or valid for writing a pointer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGetErrorString(error: u32, pStr: *mut *const c_char) -> CUresult {
    describe("cuGetErrorString", error, pStr, description)
}

/// # Safety
/// `pStr` is null or valid for writing a pointer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGetErrorName(error: u32, pStr: *mut *const c_char) -> CUresult {
    describe("cuGetErrorName", error, pStr, name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_parse_by_name_short_name_and_number() {
        assert_eq!(
            parse_code("CUDA_ERROR_NO_DEVICE"),
            Some(CUresult::CUDA_ERROR_NO_DEVICE)
        );
        assert_eq!(
            parse_code("NO_DEVICE"),
            Some(CUresult::CUDA_ERROR_NO_DEVICE)
        );
        assert_eq!(parse_code("100"), Some(CUresult::CUDA_ERROR_NO_DEVICE));
        assert_eq!(parse_code("nonsense"), None);
        assert_eq!(parse_code("12345"), None);
    }

    #[test]
    fn every_code_has_a_name_and_a_description() {
        for (code, name) in NAMES {
            assert_eq!(super::name(*code), Some(*name));
            assert!(!description(*code).unwrap().is_empty());
        }
        assert_eq!(NAMES.len(), 106);
        assert_eq!(description(719).unwrap(), c"launch failed");
        assert_eq!(super::name(12345), None);
    }

    #[test]
    fn every_name_matches_the_code_it_describes() {
        for (code, name, _) in CODES {
            assert_eq!(name.to_str().unwrap(), format!("{code:?}"));
        }
    }
}
