//! Finding and loading `libDPCTLSyclInterface.so`, dpctl's SYCL C API.
//!
//! Lookup order: an explicit path ([`Runtime::load`]), then [`Runtime::find`]: the environment
//! variable [`LIBRARY_ENV`] (which the Python package sets to the dpctl it imports), then the
//! dynamic loader's search path. A loaded library is never unloaded: SYCL objects
//! and handles exported to other libraries may outlive every devbuf object.

use std::ffi::{CStr, OsStr, OsString, c_char};

use devbuf_sycl_sys::{DpctlSyclInterface, LIBRARY_NAME};
use parking_lot::Mutex;

/// The backend's name and the first part of its selectors ("sycl:opencl:cpu:0").
pub const SYCL: &str = "sycl";

/// Environment variable naming the library to load (`ci/env.sh` sets it).
pub const LIBRARY_ENV: &str = "DEVBUF_SYCL_LIBRARY";

/// Every library loaded so far, one per location.
static LOADED: Mutex<Vec<&'static Runtime>> = Mutex::new(Vec::new());

/// dpctl's SYCL C API, loaded.
pub struct Runtime {
    api: DpctlSyclInterface,
    location: OsString,
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Runtime({})", self.location.display())
    }
}

impl Runtime {
    /// Loads the library at `location` (a path, or a bare file name for the dynamic loader to
    /// search), once per location and process.
    pub fn load(location: impl AsRef<OsStr>) -> Result<&'static Runtime, String> {
        let location = location.as_ref();
        let mut loaded = LOADED.lock();
        if let Some(&runtime) = loaded.iter().find(|rt| rt.location == location) {
            return Ok(runtime);
        }
        // SAFETY: loading runs the initialisers of dpctl's library and of the SYCL runtime it
        // links, which have no preconditions.
        let api = unsafe { DpctlSyclInterface::new(location) }.map_err(|err| error_chain(&err))?;
        let missing = missing_symbols(&api);
        if !missing.is_empty() {
            return Err(format!(
                "{}: lacks {} (this dpctl's C API is older or newer than devbuf supports)",
                location.display(),
                missing.join(", ")
            ));
        }
        let runtime: &'static Runtime = Box::leak(Box::new(Runtime {
            api,
            location: location.to_owned(),
        }));
        loaded.push(runtime);
        Ok(runtime)
    }

    /// Finds and loads the library: [`LIBRARY_ENV`], then the dynamic loader's search path. The
    /// error lists every attempt.
    pub fn find() -> Result<&'static Runtime, String> {
        let mut candidates: Vec<(String, OsString)> = Vec::new();
        if let Some(path) = std::env::var_os(LIBRARY_ENV) {
            candidates.push((format!("${LIBRARY_ENV}"), path));
        }
        candidates.push(("the dynamic loader's path".into(), LIBRARY_NAME.into()));
        let mut tried = Vec::new();
        for (source, location) in candidates {
            match Runtime::load(&location) {
                Ok(runtime) => return Ok(runtime),
                Err(err) => tried.push(format!("{source}: {err}")),
            }
        }
        Err(format!(
            "dpctl's SYCL C API ({LIBRARY_NAME}) not found; tried {}",
            tried.join("; ")
        ))
    }

    /// Where the library was loaded from, as given to the loader.
    pub fn location(&self) -> &OsStr {
        &self.location
    }

    /// The raw C API. Every function devbuf-sycl calls is checked present at load time; calling
    /// any other one panics if this library lacks it.
    pub fn api(&self) -> &DpctlSyclInterface {
        &self.api
    }

    /// Copies a string the C API allocated, and frees it. Null gives an empty string.
    pub(crate) fn take_string(&self, ptr: *const c_char) -> String {
        if ptr.is_null() {
            return String::new();
        }
        // SAFETY: the C API returns NUL-terminated strings that the caller owns.
        let text = unsafe { CStr::from_ptr(ptr) }
            .to_string_lossy()
            .into_owned();
        // SAFETY: `ptr` came from the C API, which wants it back through DPCTLCString_Delete, once.
        unsafe { self.api.DPCTLCString_Delete(ptr) };
        text
    }
}

/// An error with its sources ("dlopen failed: <the loader's reason>").
fn error_chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        text.push_str(&format!(": {cause}"));
        source = cause.source();
    }
    text
}

macro_rules! required_symbols {
    ($($symbol:ident),* $(,)?) => {
        /// The C API functions devbuf-sycl calls: a library lacking one is not loaded.
        #[cfg(test)]
        const REQUIRED_SYMBOLS: &[&str] = &[$(stringify!($symbol)),*];

        fn missing_symbols(api: &DpctlSyclInterface) -> Vec<&'static str> {
            let mut missing = Vec::new();
            $(if api.$symbol.is_err() { missing.push(stringify!($symbol)); })*
            missing
        }
    };
}

required_symbols!(
    DPCTLCString_Delete,
    DPCTLContext_AreEq,
    DPCTLContext_Copy,
    DPCTLContext_Delete,
    DPCTLContext_GetDevices,
    DPCTLDeviceMgr_GetCachedContext,
    DPCTLDeviceMgr_GetDevices,
    DPCTLDeviceMgr_GetPositionInDevices,
    DPCTLDeviceMgr_GetRelativeId,
    DPCTLDeviceSelector_Delete,
    DPCTLDeviceVector_Delete,
    DPCTLDeviceVector_GetAt,
    DPCTLDeviceVector_Size,
    DPCTLDevice_Copy,
    DPCTLDevice_CreateFromSelector,
    DPCTLDevice_AreEq,
    DPCTLDevice_Delete,
    DPCTLDevice_GetBackend,
    DPCTLDevice_GetDeviceType,
    DPCTLDevice_GetDriverVersion,
    DPCTLDevice_GetGlobalMemSize,
    DPCTLDevice_GetName,
    DPCTLDevice_GetParentDevice,
    DPCTLDevice_GetVendor,
    DPCTLDevice_HasAspect,
    DPCTLDevice_Hash,
    DPCTLEvent_Copy,
    DPCTLEvent_Create,
    DPCTLEvent_Delete,
    DPCTLEvent_GetCommandExecutionStatus,
    DPCTLEvent_GetProfilingInfoEnd,
    DPCTLEvent_Wait,
    DPCTLFilterSelector_Create,
    DPCTLKernelBundle_CreateFromOCLSource,
    DPCTLKernelBundle_Delete,
    DPCTLKernelBundle_GetKernel,
    DPCTLKernel_Delete,
    DPCTLQueue_AreEq,
    DPCTLQueue_Copy,
    DPCTLQueue_Create,
    DPCTLQueue_Delete,
    DPCTLQueue_GetContext,
    DPCTLQueue_GetDevice,
    DPCTLQueue_HasEnableProfiling,
    DPCTLQueue_IsInOrder,
    DPCTLQueue_MemAdvise,
    DPCTLQueue_Memcpy,
    DPCTLQueue_Memset,
    DPCTLQueue_Prefetch,
    DPCTLQueue_SubmitBarrier,
    DPCTLQueue_SubmitBarrierForEvents,
    DPCTLQueue_SubmitRange,
    DPCTLUSM_GetPointerDevice,
    DPCTLUSM_GetPointerType,
    DPCTLaligned_alloc_device,
    DPCTLaligned_alloc_host,
    DPCTLaligned_alloc_shared,
    DPCTLfree_with_queue,
    DPCTLmalloc_host,
);

#[cfg(test)]
mod tests {
    use super::REQUIRED_SYMBOLS;

    /// A C API call missing from REQUIRED_SYMBOLS could panic on an older library instead of
    /// making it unavailable: every `.DPCTL...(` call in this crate's sources must be listed.
    #[test]
    fn every_called_symbol_is_checked_at_load_time() {
        let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut unlisted = Vec::new();
        for entry in std::fs::read_dir(&src).unwrap() {
            let text = std::fs::read_to_string(entry.unwrap().path()).unwrap();
            for (at, _) in text.match_indices(".DPCTL") {
                let name: String = text
                    .get(at + 1..)
                    .unwrap_or_default()
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                let is_call = text
                    .get(at + 1 + name.len()..)
                    .is_some_and(|rest| rest.starts_with('('));
                if is_call && !REQUIRED_SYMBOLS.contains(&name.as_str()) {
                    unlisted.push(name);
                }
            }
        }
        assert!(unlisted.is_empty(), "not in REQUIRED_SYMBOLS: {unlisted:?}");
    }
}
