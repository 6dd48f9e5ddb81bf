//! The result codes the double returns, their names and descriptions (`cuGetErrorName`,
//! `cuGetErrorString`), and the boundary every exported entry point goes through.

use std::ffi::{CStr, c_char};
use std::panic::{AssertUnwindSafe, catch_unwind};

use cudarc::driver::sys::CUresult;

/// What an entry point's body returns: `Err` carries the failure code.
pub(crate) type DriverResult<T = ()> = Result<T, CUresult>;

/// Runs an entry point's body, turning its result into the C return code. A panic must not unwind
/// into C: it becomes CUDA_ERROR_UNKNOWN, with a line on stderr saying where it came from.
pub(crate) fn boundary(name: &str, body: impl FnOnce() -> DriverResult) -> CUresult {
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
/// real driver's name and a description that says who produced it.
const CODES: &[Described] = &[
    (
        CUresult::CUDA_SUCCESS,
        c"CUDA_SUCCESS",
        c"no error (devbuf CUDA test driver)",
    ),
    (
        CUresult::CUDA_ERROR_INVALID_VALUE,
        c"CUDA_ERROR_INVALID_VALUE",
        c"invalid argument (devbuf CUDA test driver)",
    ),
    (
        CUresult::CUDA_ERROR_OUT_OF_MEMORY,
        c"CUDA_ERROR_OUT_OF_MEMORY",
        c"out of memory (devbuf CUDA test driver)",
    ),
    (
        CUresult::CUDA_ERROR_NOT_INITIALIZED,
        c"CUDA_ERROR_NOT_INITIALIZED",
        c"initialization error: cuInit has not been called (devbuf CUDA test driver)",
    ),
    (
        CUresult::CUDA_ERROR_DEINITIALIZED,
        c"CUDA_ERROR_DEINITIALIZED",
        c"driver shutting down (devbuf CUDA test driver)",
    ),
    (
        CUresult::CUDA_ERROR_DEVICE_UNAVAILABLE,
        c"CUDA_ERROR_DEVICE_UNAVAILABLE",
        c"CUDA-capable device(s) is/are busy or unavailable (devbuf CUDA test driver)",
    ),
    (
        CUresult::CUDA_ERROR_NO_DEVICE,
        c"CUDA_ERROR_NO_DEVICE",
        c"no CUDA-capable device is detected (devbuf CUDA test driver)",
    ),
    (
        CUresult::CUDA_ERROR_INVALID_DEVICE,
        c"CUDA_ERROR_INVALID_DEVICE",
        c"invalid device ordinal (devbuf CUDA test driver)",
    ),
    (
        CUresult::CUDA_ERROR_INVALID_CONTEXT,
        c"CUDA_ERROR_INVALID_CONTEXT",
        c"invalid device context (devbuf CUDA test driver)",
    ),
    (
        CUresult::CUDA_ERROR_ECC_UNCORRECTABLE,
        c"CUDA_ERROR_ECC_UNCORRECTABLE",
        c"uncorrectable ECC error encountered (devbuf CUDA test driver)",
    ),
    (
        CUresult::CUDA_ERROR_INVALID_HANDLE,
        c"CUDA_ERROR_INVALID_HANDLE",
        c"invalid resource handle (devbuf CUDA test driver)",
    ),
    (
        CUresult::CUDA_ERROR_NOT_FOUND,
        c"CUDA_ERROR_NOT_FOUND",
        c"named symbol not found (devbuf CUDA test driver)",
    ),
    (
        CUresult::CUDA_ERROR_NOT_READY,
        c"CUDA_ERROR_NOT_READY",
        c"device not ready (devbuf CUDA test driver)",
    ),
    (
        CUresult::CUDA_ERROR_ILLEGAL_ADDRESS,
        c"CUDA_ERROR_ILLEGAL_ADDRESS",
        c"an illegal memory access was encountered (devbuf CUDA test driver)",
    ),
    (
        CUresult::CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE,
        c"CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE",
        c"primary context active (devbuf CUDA test driver)",
    ),
    (
        CUresult::CUDA_ERROR_CONTEXT_IS_DESTROYED,
        c"CUDA_ERROR_CONTEXT_IS_DESTROYED",
        c"context is destroyed (devbuf CUDA test driver)",
    ),
    (
        CUresult::CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED,
        c"CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED",
        c"part or all of the requested memory range is already mapped (devbuf CUDA test driver)",
    ),
    (
        CUresult::CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED,
        c"CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED",
        c"pointer does not correspond to a registered memory region (devbuf CUDA test driver)",
    ),
    (
        CUresult::CUDA_ERROR_NOT_PERMITTED,
        c"CUDA_ERROR_NOT_PERMITTED",
        c"operation not permitted (devbuf CUDA test driver)",
    ),
    (
        CUresult::CUDA_ERROR_NOT_SUPPORTED,
        c"CUDA_ERROR_NOT_SUPPORTED",
        c"operation not supported by the devbuf CUDA test driver (no kernels, modules or graphs)",
    ),
    (
        CUresult::CUDA_ERROR_SYSTEM_DRIVER_MISMATCH,
        c"CUDA_ERROR_SYSTEM_DRIVER_MISMATCH",
        c"system has unsupported display driver / cuda driver combination (devbuf CUDA test driver)",
    ),
    (
        CUresult::CUDA_ERROR_UNKNOWN,
        c"CUDA_ERROR_UNKNOWN",
        c"unknown error (devbuf CUDA test driver)",
    ),
];

fn lookup(code: u32) -> Option<&'static Described> {
    CODES.iter().find(|(known, ..)| *known as u32 == code)
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

fn describe(code: u32, out: *mut *const c_char, pick: fn(&Described) -> &'static CStr) -> CUresult {
    boundary("cuGetErrorString", || {
        let Some(entry) = lookup(code) else {
            // SAFETY: the caller's out-pointer; the real driver stores NULL for unknown codes.
            unsafe { write_out(out, std::ptr::null()) }?;
            return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
        };
        // SAFETY: the caller's out-pointer; the strings are static.
        unsafe { write_out(out, pick(entry).as_ptr()) }
    })
}

/// # Safety
/// `pStr` is null or valid for writing a pointer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGetErrorString(error: u32, pStr: *mut *const c_char) -> CUresult {
    describe(error, pStr, |(_, _, description)| description)
}

/// # Safety
/// `pStr` is null or valid for writing a pointer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGetErrorName(error: u32, pStr: *mut *const c_char) -> CUresult {
    describe(error, pStr, |(_, name, _)| name)
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
    fn every_name_matches_the_code_it_describes() {
        for (code, name, description) in CODES {
            assert_eq!(name.to_str().unwrap(), format!("{code:?}"));
            assert!(
                description
                    .to_str()
                    .unwrap()
                    .contains("devbuf CUDA test driver")
            );
        }
    }
}
