//! The one door to the CUDA driver.
//!
//! cudarc's `sys` functions load `libcuda` and each entry point lazily, and *panic* when the library
//! or a symbol is missing. Every call in this crate goes through [`call`], which catches such a
//! panic and turns it, like any failure code, into a [`DriverError`]; so nothing unwinds into our
//! callers, let alone across an `extern "C"` boundary. [`driver`] probes the library, the symbols we
//! use and `cuInit` once, before any other call, so that a missing runtime is a reason a user can
//! act on rather than a panic message.

use std::any::Any;
use std::ffi::{CStr, c_char};
use std::fmt;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::OnceLock;

use cudarc::driver::sys::{self, CUresult};
use devbuf_core::Error;

/// The backend's name, the first part of its selectors.
pub const BACKEND: &str = "cuda";

/// Driver entry points devbuf cannot work without (all present since CUDA 10.0).
pub(crate) const REQUIRED_ENTRY_POINTS: &[&str] = &[
    "cuInit",
    "cuDriverGetVersion",
    "cuGetErrorString",
    "cuDeviceGetCount",
    "cuDeviceGet",
    "cuDeviceGetName",
    "cuDeviceGetAttribute",
    "cuDeviceTotalMem_v2",
    "cuMemGetInfo_v2",
    "cuDeviceGetUuid",
    "cuDevicePrimaryCtxRetain",
    "cuDevicePrimaryCtxRelease_v2",
    "cuDevicePrimaryCtxGetState",
    "cuCtxGetCurrent",
    "cuCtxPushCurrent_v2",
    "cuCtxPopCurrent_v2",
    "cuCtxSynchronize",
    "cuStreamCreate",
    "cuStreamCreateWithPriority",
    "cuStreamDestroy_v2",
    "cuStreamGetCtx",
    "cuStreamSynchronize",
    "cuStreamQuery",
    "cuStreamWaitEvent",
    "cuEventCreate",
    "cuEventRecord",
    "cuEventQuery",
    "cuEventSynchronize",
    "cuEventElapsedTime",
    "cuEventDestroy_v2",
    "cuMemAlloc_v2",
    "cuMemFree_v2",
    "cuMemHostAlloc",
    "cuMemFreeHost",
    "cuMemAllocManaged",
    "cuMemcpyAsync",
    "cuMemcpy2DAsync_v2",
    "cuMemcpyPeerAsync",
    "cuDeviceCanAccessPeer",
    "cuPointerGetAttribute",
    "cuMemsetD8Async",
    "cuPointerGetAttributes",
    "cuMemGetAddressRange_v2",
    "cuIpcGetMemHandle",
    "cuIpcOpenMemHandle_v2",
    "cuIpcCloseMemHandle",
];

/// The stream-ordered allocator's entry points (CUDA 11.2); without them device memory comes from
/// `cuMemAlloc`.
pub(crate) const STREAM_ORDERED_ENTRY_POINTS: &[&str] = &["cuMemAllocAsync", "cuMemFreeAsync"];

/// `cuCtxGetId` (CUDA 12.0), by which a primary context reset by another library is noticed;
/// called where the driver has it: without it, [`call`] answers with an error and devbuf cannot
/// tell a reset context (`PrimaryContext::check_not_reset`).
pub(crate) const CONTEXT_ID_ENTRY_POINT: &str = "cuCtxGetId";

/// A failed driver call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DriverError {
    /// The driver function that failed.
    pub operation: &'static str,
    /// The code it returned; `None` when cudarc panicked before calling it (no library, no symbol).
    pub code: Option<CUresult>,
    /// What went wrong, in the driver's words.
    pub message: String,
}

impl DriverError {
    /// Whether the driver returned `code`.
    pub fn is(&self, code: CUresult) -> bool {
        self.code == Some(code)
    }
}

impl fmt::Display for DriverError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} failed: {}", self.operation, self.message)
    }
}

impl std::error::Error for DriverError {}

/// Keeps the driver's code: callers match it as `Error::Runtime { code: Some(c), .. }` with
/// `c == CUresult::... as i64`, or ask [`returned`].
impl From<DriverError> for Error {
    fn from(err: DriverError) -> Self {
        Error::Runtime {
            backend: BACKEND,
            operation: err.operation,
            code: err.code.map(|code| code as i64),
            message: err.message,
        }
    }
}

/// Whether `err` is a failed driver call that returned `code`.
pub fn returned(err: &Error, code: CUresult) -> bool {
    matches!(
        err,
        Error::Runtime {
            backend: BACKEND,
            code: Some(returned),
            ..
        } if *returned == code as i64
    )
}

/// Runs one driver call. `entry` is the `unsafe` call itself; a failure code and a cudarc panic
/// both come back as a [`DriverError`] naming `operation`.
pub(crate) fn call(
    operation: &'static str,
    entry: impl FnOnce() -> CUresult,
) -> Result<(), DriverError> {
    // The closure only holds out-pointers the driver writes on success, so a panic (raised by
    // cudarc's loader before the driver is entered) leaves nothing half-updated.
    match catch_unwind(AssertUnwindSafe(entry)) {
        Ok(CUresult::CUDA_SUCCESS) => Ok(()),
        Ok(code) => Err(DriverError {
            operation,
            code: Some(code),
            message: describe(code),
        }),
        Err(panic) => Err(DriverError {
            operation,
            code: None,
            message: panic_message(panic.as_ref()),
        }),
    }
}

/// The code's name and the driver's description of it. CUDA_ERROR_NOT_READY is an answer, not a
/// failure (a query of work still running: `cuEventQuery`, `cuStreamQuery`), asked on hot paths:
/// its name alone, without a second driver call.
fn describe(code: CUresult) -> String {
    if code == CUresult::CUDA_ERROR_NOT_READY {
        return format!("{code:?}");
    }
    let mut text: *const c_char = std::ptr::null();
    let described = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: `text` is a valid out-pointer; the driver stores a static string in it.
        unsafe { sys::cuGetErrorString(code, &mut text) }
    }));
    match described {
        Ok(CUresult::CUDA_SUCCESS) if !text.is_null() => {
            // SAFETY: on success the driver returned a NUL-terminated string it keeps forever.
            let text = unsafe { CStr::from_ptr(text) };
            format!("{code:?} ({})", text.to_string_lossy())
        }
        _ => format!("{code:?}"),
    }
}

fn panic_message(panic: &(dyn Any + Send)) -> String {
    panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "the CUDA bindings panicked".into())
}

/// What the loaded driver offers, probed once per process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Driver {
    /// `cuDriverGetVersion`: 1000 × major + 10 × minor.
    pub version: i32,
    /// Number of devices the driver shows this process.
    pub device_count: u32,
    /// Whether `cuMemAllocAsync`/`cuMemFreeAsync` exist (a device must also support pools).
    pub stream_ordered_allocator: bool,
}

impl Driver {
    /// The CUDA version the driver supports, e.g. "12.8".
    pub fn cuda_version(&self) -> String {
        format!("{}.{}", self.version / 1000, self.version % 1000 / 10)
    }
}

/// The driver, once it is loaded and initialised; otherwise why it cannot be used.
pub(crate) fn driver() -> Result<&'static Driver, &'static str> {
    static PROBE: OnceLock<Result<Driver, String>> = OnceLock::new();
    PROBE.get_or_init(probe).as_ref().map_err(String::as_str)
}

/// The driver, or [`Error::Unavailable`] with the reason.
pub(crate) fn loaded() -> Result<&'static Driver, Error> {
    driver().map_err(|reason| Error::Unavailable {
        backend: BACKEND,
        reason: reason.into(),
    })
}

fn probe() -> Result<Driver, String> {
    // SAFETY: loading libcuda runs only its own initialisers, as in every CUDA program.
    let present = catch_unwind(|| unsafe { sys::is_culib_present() }).unwrap_or(false);
    if !present {
        return Err(
            "the NVIDIA driver library libcuda.so.1 was not found: install the NVIDIA \
                    driver, or add the directory holding libcuda.so.1 to LD_LIBRARY_PATH"
                .into(),
        );
    }
    let missing: Vec<&str> = REQUIRED_ENTRY_POINTS
        .iter()
        .copied()
        .filter(|name| !has_entry_point(name))
        .collect();
    if !missing.is_empty() {
        return Err(format!(
            "the NVIDIA driver is too old for devbuf: libcuda lacks {}; install a driver for \
             CUDA 11.2 or newer",
            missing.join(", ")
        ));
    }
    // SAFETY: cuInit takes no pointers; flags must be 0.
    call("cuInit", || unsafe { sys::cuInit(0) }).map_err(|err| init_failure(&err))?;
    let mut version = 0;
    // SAFETY: `version` is a valid out-pointer.
    call("cuDriverGetVersion", || unsafe {
        sys::cuDriverGetVersion(&mut version)
    })
    .map_err(|err| err.to_string())?;
    let mut count = 0;
    // SAFETY: `count` is a valid out-pointer and the driver is initialised.
    call("cuDeviceGetCount", || unsafe {
        sys::cuDeviceGetCount(&mut count)
    })
    .map_err(|err| err.to_string())?;
    let driver = Driver {
        version,
        device_count: count.max(0) as u32,
        stream_ordered_allocator: STREAM_ORDERED_ENTRY_POINTS
            .iter()
            .all(|name| has_entry_point(name)),
    };
    if driver.device_count == 0 {
        return Err(format!(
            "the NVIDIA driver (CUDA {}) shows this process no CUDA device{}",
            driver.cuda_version(),
            visible_devices_hint()
        ));
    }
    Ok(driver)
}

/// Whether libcuda exports `name`. Only called once the library is known to load.
fn has_entry_point(name: &str) -> bool {
    catch_unwind(|| {
        // SAFETY: looking a symbol up does not call it; the type is only what `get` hands back.
        unsafe { sys::culib().get::<unsafe extern "C" fn()>(name.as_bytes()) }.is_ok()
    })
    .unwrap_or(false)
}

fn init_failure(err: &DriverError) -> String {
    if err.is(CUresult::CUDA_ERROR_NO_DEVICE) {
        format!(
            "cuInit found no CUDA device ({}){}",
            err.message,
            visible_devices_hint()
        )
    } else {
        format!(
            "the NVIDIA driver failed to initialise: {err}; check that `nvidia-smi` works and \
             that the driver matches its kernel module"
        )
    }
}

fn visible_devices_hint() -> String {
    match std::env::var("CUDA_VISIBLE_DEVICES") {
        Ok(visible) => format!(": CUDA_VISIBLE_DEVICES is {visible:?}"),
        Err(_) => ": check that `nvidia-smi` lists a GPU".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_code_names_the_operation_and_the_code() {
        let err = call("cuTest", || CUresult::CUDA_ERROR_INVALID_VALUE).unwrap_err();
        assert!(err.is(CUresult::CUDA_ERROR_INVALID_VALUE));
        assert_eq!(err.operation, "cuTest");
        assert!(err.message.contains("CUDA_ERROR_INVALID_VALUE"), "{err}");
        let err = Error::from(err);
        assert!(matches!(
            err,
            Error::Runtime {
                backend: BACKEND,
                operation: "cuTest",
                code: Some(code),
                ..
            } if code == CUresult::CUDA_ERROR_INVALID_VALUE as i64
        ));
        assert!(returned(&err, CUresult::CUDA_ERROR_INVALID_VALUE));
        assert!(!returned(&err, CUresult::CUDA_ERROR_NOT_FOUND));
        let panicked = Error::from(call("cuTest", || panic!("no driver")).unwrap_err());
        assert!(!returned(&panicked, CUresult::CUDA_ERROR_INVALID_VALUE));
    }

    #[test]
    fn a_panic_inside_the_call_becomes_an_error() {
        let err = call("cuTest", || panic!("Missing symbol cuTest")).unwrap_err();
        assert_eq!(err.code, None);
        assert_eq!(err.message, "Missing symbol cuTest");
    }

    #[test]
    fn without_libcuda_a_raw_driver_call_is_an_error_not_a_panic() {
        // SAFETY: cuInit takes no pointers.
        let result = call("cuInit", || unsafe { sys::cuInit(0) });
        // SAFETY: probing for the library only loads it.
        if unsafe { sys::is_culib_present() } {
            eprintln!("skip: libcuda is present here, so cuInit really ran: {result:?}");
            return;
        }
        let err = result.unwrap_err();
        assert_eq!(err.code, None);
        assert!(err.message.contains("cuda"), "{err}");
    }

    #[test]
    fn versions_read_as_major_dot_minor() {
        let driver = Driver {
            version: 12080,
            device_count: 1,
            stream_ordered_allocator: true,
        };
        assert_eq!(driver.cuda_version(), "12.8");
    }

    /// The hints about managed memory (`hints`), in the ABIs CUDA 12.2 added: looked up on first
    /// use; an older driver's lack of them makes the hints unsupported, not the driver unusable.
    const MANAGED_HINT_ENTRY_POINTS: &[&str] = &["cuMemPrefetchAsync_v2", "cuMemAdvise_v2"];

    /// Every entry point the crate calls is probed up front (the managed-memory hints excepted),
    /// so an old driver is reported as unavailable with the names it lacks, not found missing in
    /// the middle of some operation.
    #[test]
    fn every_driver_entry_point_called_is_probed() {
        // Every source file of the crate, found by listing the folder: a new module is checked
        // without being named here.
        let folder = concat!(env!("CARGO_MANIFEST_DIR"), "/src");
        let mut sources = vec![];
        for entry in std::fs::read_dir(folder).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|ext| ext == "rs") {
                sources.push(std::fs::read_to_string(&path).unwrap());
            }
        }
        assert!(
            sources.len() >= 10,
            "found only {} files in {folder}",
            sources.len()
        );
        let mut called = vec![];
        for source in &sources {
            for (at, _) in source.match_indices("sys::cu") {
                let name: String = source
                    .get(at + "sys::".len()..)
                    .unwrap_or_default()
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                // Entry points are `cu` + a capital (`culib` is cudarc's loader, not the driver).
                if name.len() > 2 && name.as_bytes()[2].is_ascii_uppercase() {
                    called.push(name);
                }
            }
        }
        assert!(called.len() > 20, "found only {called:?}");
        for name in called {
            assert!(
                REQUIRED_ENTRY_POINTS.contains(&name.as_str())
                    || STREAM_ORDERED_ENTRY_POINTS.contains(&name.as_str())
                    || MANAGED_HINT_ENTRY_POINTS.contains(&name.as_str())
                    || name == CONTEXT_ID_ENTRY_POINT,
                "{name} is called but not probed"
            );
        }
    }
}
