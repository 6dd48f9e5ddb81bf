//! Primary contexts (one per device, reference-counted) and each thread's context stack.
//!
//! A primary context is active while retained; when its last retain is released (or it is reset)
//! the driver destroys everything in it: its streams, events and memory. A context that met a
//! fault keeps its error (a "sticky" error): every later call in it fails with that code, as after
//! an illegal address on a GPU.

use std::cell::RefCell;
use std::ffi::c_void;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

use cudarc::driver::sys::{CUcontext, CUdevice, CUresult};
use parking_lot::Mutex;

use crate::config::{config, device_count};
use crate::device::{entry, ordinal};
use crate::errors::{DriverResult, write_out};

/// `CU_CTX_SCHED_MASK`: spin (1), yield (2), blocking sync (4).
const SCHEDULING_FLAGS: u32 = 0x07;
/// `CU_CTX_SYNC_MEMOPS`: "Ensures that synchronous memory operations initiated on this context
/// will always synchronize."
pub(crate) const SYNC_MEMOPS: u32 = 0x80;
/// `CU_CTX_FLAGS_MASK`: every flag `cuCtxCreate` documents (scheduling, `MAP_HOST`,
/// `LMEM_RESIZE_TO_MAX`, `COREDUMP_ENABLE`, `USER_COREDUMP_ENABLE`, `SYNC_MEMOPS`), which
/// `cuDevicePrimaryCtxSetFlags` takes too (its list omits `MAP_HOST`; the double accepts it there,
/// as CUDA runtime programs pass it through `cudaSetDeviceFlags(cudaDeviceMapHost)`).
const CONTEXT_FLAGS: u32 = 0xff;

/// Checks context flags: known ones only, and "Only one of the scheduling flags can be set when
/// creating a context." (cuCtxCreate, cuDevicePrimaryCtxSetFlags).
fn check_flags(flags: u32) -> DriverResult {
    let one_schedule = (flags & SCHEDULING_FLAGS).count_ones() <= 1;
    if flags & !CONTEXT_FLAGS != 0 || !one_schedule {
        return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
    }
    Ok(())
}

/// Context ids (`cuCtxGetId`): "unique for the life of the program".
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

pub(crate) struct Context {
    pub ordinal: usize,
    /// For a device's primary context its retains and flags; for a created one, its flags.
    primary: Mutex<Primary>,
    /// `None` for a primary context; for one from `cuCtxCreate`, whether it is not yet destroyed.
    created: Option<AtomicBool>,
    /// The sticky error code, 0 while there is none.
    sticky: AtomicU32,
    /// Bumped each time the context is destroyed: handles made before then are stale.
    generation: AtomicU64,
    /// `cuCtxGetId`: a new one each time the context is (re)created.
    id: AtomicU64,
}

#[derive(Default)]
struct Primary {
    retains: u32,
    flags: u32,
}

fn contexts() -> &'static [Context] {
    static CONTEXTS: OnceLock<Box<[Context]>> = OnceLock::new();
    CONTEXTS.get_or_init(|| {
        (0..device_count() as usize)
            .map(|ordinal| Context {
                ordinal,
                primary: Mutex::default(),
                created: None,
                sticky: AtomicU32::new(0),
                generation: AtomicU64::new(0),
                id: AtomicU64::new(NEXT_ID.fetch_add(1, Ordering::Relaxed)),
            })
            .collect()
    })
}

/// Contexts from `cuCtxCreate`, destroyed or not (a destroyed one's handle stays recognisable,
/// so that using it is CUDA_ERROR_CONTEXT_IS_DESTROYED rather than a crash).
fn created_contexts() -> &'static Mutex<Vec<&'static Context>> {
    static CREATED: Mutex<Vec<&'static Context>> = Mutex::new(Vec::new());
    &CREATED
}

/// Device `ordinal`'s primary context.
pub(crate) fn primary(ordinal: usize) -> &'static Context {
    &contexts()[ordinal]
}

impl Context {
    pub fn handle(&'static self) -> CUcontext {
        (self as *const Context).cast_mut().cast()
    }

    /// The context a handle names; CUDA_ERROR_INVALID_CONTEXT for anything else.
    pub fn from_handle(handle: CUcontext) -> DriverResult<&'static Context> {
        contexts()
            .iter()
            .find(|context| context.handle() == handle)
            .or_else(|| {
                let created = created_contexts().lock();
                created
                    .iter()
                    .copied()
                    .find(|context| context.handle() == handle)
            })
            .ok_or(CUresult::CUDA_ERROR_INVALID_CONTEXT)
    }

    /// The context's flags (`cuCtxGetFlags`).
    pub fn flags(&self) -> u32 {
        self.primary.lock().flags
    }

    /// `cuCtxGetId`: the id of the context's current incarnation.
    pub fn id(&self) -> u64 {
        self.id.load(Ordering::Acquire)
    }

    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    pub fn is_active(&self) -> bool {
        match &self.created {
            None => self.primary.lock().retains > 0,
            Some(alive) => alive.load(Ordering::Acquire),
        }
    }

    /// Ok while the context is alive and has met no fault; otherwise the code every call gets.
    pub fn usable(&self) -> DriverResult {
        if !self.is_active() {
            return Err(CUresult::CUDA_ERROR_CONTEXT_IS_DESTROYED);
        }
        self.sticky_error()
    }

    pub fn sticky_error(&self) -> DriverResult {
        match self.sticky.load(Ordering::Acquire) {
            0 => Ok(()),
            _ => Err(CUresult::CUDA_ERROR_ILLEGAL_ADDRESS),
        }
    }

    /// Records a fault: the context's error becomes CUDA_ERROR_ILLEGAL_ADDRESS for good, and the
    /// first fault says on stderr what happened.
    pub fn fault(&self, operation: &str, what: &str) {
        let first = self
            .sticky
            .compare_exchange(
                0,
                CUresult::CUDA_ERROR_ILLEGAL_ADDRESS as u32,
                Ordering::AcqRel,
                Ordering::Acquire,
            )
            .is_ok();
        if first {
            eprintln!(
                "devbuf CUDA test driver: illegal address in {operation} on device {}: {what}; \
                 every later call in this context fails with CUDA_ERROR_ILLEGAL_ADDRESS",
                self.ordinal
            );
        }
    }

    /// Marks a context from `cuCtxCreate` destroyed: CUDA_ERROR_INVALID_CONTEXT for a primary
    /// context, which cannot be destroyed this way, and CUDA_ERROR_CONTEXT_IS_DESTROYED for one
    /// destroyed before.
    pub fn end_created(&self) -> DriverResult {
        let Some(alive) = &self.created else {
            return Err(CUresult::CUDA_ERROR_INVALID_CONTEXT);
        };
        if !alive.swap(false, Ordering::AcqRel) {
            return Err(CUresult::CUDA_ERROR_CONTEXT_IS_DESTROYED);
        }
        Ok(())
    }

    /// Drops one retain of a primary context: whether it was the last (the context must then be
    /// destroyed); CUDA_ERROR_INVALID_CONTEXT when it was not retained.
    pub fn drop_retain(&self) -> DriverResult<bool> {
        let mut state = self.primary.lock();
        if state.retains == 0 {
            return Err(CUresult::CUDA_ERROR_INVALID_CONTEXT);
        }
        state.retains -= 1;
        Ok(state.retains == 0)
    }

    /// Starts the context's next incarnation once what lived in it is gone (see
    /// [`crate::context_teardown`]): handles made before are stale, the id is new, and the
    /// sticky error is cleared.
    pub fn renew(&self) {
        self.generation.fetch_add(1, Ordering::AcqRel);
        self.id
            .store(NEXT_ID.fetch_add(1, Ordering::Relaxed), Ordering::Release);
        self.sticky.store(0, Ordering::Release);
    }
}

thread_local! {
    static STACK: RefCell<Vec<&'static Context>> = const { RefCell::new(Vec::new()) };
}

/// The calling thread's current context, if any (alive or not).
pub(crate) fn current_raw() -> Option<&'static Context> {
    STACK.with(|stack| stack.borrow().last().copied())
}

/// Takes `context` off the top of the calling thread's stack if it is there.
pub(crate) fn leave_if_current(context: &Context) {
    STACK.with(|stack| {
        let mut stack = stack.borrow_mut();
        if stack.last().is_some_and(|top| std::ptr::eq(*top, context)) {
            stack.pop();
        }
    });
}

/// The calling thread's current context: CUDA_ERROR_INVALID_CONTEXT without one, and the
/// context's own error when it is destroyed or has faulted.
pub(crate) fn current() -> DriverResult<&'static Context> {
    let context = current_raw().ok_or(CUresult::CUDA_ERROR_INVALID_CONTEXT)?;
    context.usable()?;
    Ok(context)
}

/// # Safety
/// `context` is null or valid for writing a CUcontext.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDevicePrimaryCtxRetain(
    context: *mut CUcontext,
    device: CUdevice,
) -> CUresult {
    entry("cuDevicePrimaryCtxRetain", || {
        let ordinal = ordinal(device)?;
        if config().unavailable_devices.contains(&(ordinal as i32)) {
            return Err(CUresult::CUDA_ERROR_DEVICE_UNAVAILABLE);
        }
        let primary = primary(ordinal);
        primary.primary.lock().retains += 1;
        // SAFETY: the caller's out-pointer.
        unsafe { write_out(context, primary.handle()) }
    })
}

/// Creates a context of its own on `device` (not the primary one) and makes it current: it is
/// pushed on the calling thread's stack, and lives until `cuCtxDestroy`.
fn create(context: *mut CUcontext, flags: u32, device: CUdevice) -> DriverResult {
    let ordinal = ordinal(device)?;
    check_flags(flags)?;
    if context.is_null() {
        return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
    }
    if config().unavailable_devices.contains(&(ordinal as i32)) {
        return Err(CUresult::CUDA_ERROR_DEVICE_UNAVAILABLE);
    }
    let created: &'static Context = Box::leak(Box::new(Context {
        ordinal,
        primary: Mutex::new(Primary { retains: 0, flags }),
        created: Some(AtomicBool::new(true)),
        sticky: AtomicU32::new(0),
        generation: AtomicU64::new(0),
        id: AtomicU64::new(NEXT_ID.fetch_add(1, Ordering::Relaxed)),
    }));
    created_contexts().lock().push(created);
    STACK.with(|stack| stack.borrow_mut().push(created));
    // SAFETY: the caller's out-pointer, checked non-null.
    unsafe { write_out(context, created.handle()) }
}

/// # Safety
/// `context` is null or valid for writing a CUcontext.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuCtxCreate_v2(
    context: *mut CUcontext,
    flags: u32,
    device: CUdevice,
) -> CUresult {
    entry("cuCtxCreate", || create(context, flags, device))
}

/// Execution affinity "is only supported under Volta+ MPS", which the double is not: a context
/// with affinity parameters is CUDA_ERROR_NOT_SUPPORTED; without, a regular one.
///
/// # Safety
/// `context` is null or valid for writing a CUcontext.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuCtxCreate_v3(
    context: *mut CUcontext,
    _affinity: *mut c_void,
    affinity_count: i32,
    flags: u32,
    device: CUdevice,
) -> CUresult {
    entry("cuCtxCreate", || {
        if affinity_count != 0 {
            return Err(CUresult::CUDA_ERROR_NOT_SUPPORTED);
        }
        create(context, flags, device)
    })
}

/// `CUctxCreateParams`.
#[repr(C)]
pub struct CreateParams {
    affinity: *mut c_void,
    affinity_count: i32,
    cig: *mut c_void,
}

/// "A regular CUDA context can be created by setting ctxCreateParams to NULL"; execution affinity
/// (MPS only) and CIG mode ("will fail with CUDA_ERROR_NOT_SUPPORTED if CIG is not supported by
/// the device or the driver") are CUDA_ERROR_NOT_SUPPORTED.
///
/// # Safety
/// `context` is null or valid for writing a CUcontext; `params` null or valid for reading.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuCtxCreate_v4(
    context: *mut CUcontext,
    params: *const CreateParams,
    flags: u32,
    device: CUdevice,
) -> CUresult {
    entry("cuCtxCreate", || {
        if !params.is_null() {
            // SAFETY: non-null, valid for reading by the caller's contract.
            let params = unsafe { params.read_unaligned() };
            if !params.affinity.is_null() || params.affinity_count != 0 || !params.cig.is_null() {
                return Err(CUresult::CUDA_ERROR_NOT_SUPPORTED);
            }
        }
        create(context, flags, device)
    })
}

/// # Safety
/// `flags` and `active` are null or valid for writing an unsigned int / int.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDevicePrimaryCtxGetState(
    device: CUdevice,
    flags: *mut u32,
    active: *mut i32,
) -> CUresult {
    entry("cuDevicePrimaryCtxGetState", || {
        let state = primary(ordinal(device)?).primary.lock();
        // SAFETY: the caller's out-pointers.
        unsafe {
            write_out(flags, state.flags)?;
            write_out(active, (state.retains > 0) as i32)
        }
    })
}

fn set_flags(device: CUdevice, flags: u32) -> CUresult {
    entry("cuDevicePrimaryCtxSetFlags", || {
        let context = primary(ordinal(device)?);
        check_flags(flags)?;
        context.primary.lock().flags = flags;
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn cuDevicePrimaryCtxSetFlags_v2(device: CUdevice, flags: u32) -> CUresult {
    set_flags(device, flags)
}

#[unsafe(no_mangle)]
pub extern "C" fn cuDevicePrimaryCtxSetFlags(device: CUdevice, flags: u32) -> CUresult {
    set_flags(device, flags)
}

/// # Safety
/// `context` is null or valid for writing a CUcontext.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuCtxGetCurrent(context: *mut CUcontext) -> CUresult {
    entry("cuCtxGetCurrent", || {
        let current = current_raw().map_or(std::ptr::null_mut(), Context::handle);
        // SAFETY: the caller's out-pointer.
        unsafe { write_out(context, current) }
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn cuCtxSetCurrent(context: CUcontext) -> CUresult {
    entry("cuCtxSetCurrent", || {
        // NULL unbinds the current context; anything else replaces the top of the stack.
        let replacement = if context.is_null() {
            None
        } else {
            Some(Context::from_handle(context)?)
        };
        STACK.with(|stack| {
            let mut stack = stack.borrow_mut();
            stack.pop();
            stack.extend(replacement);
        });
        Ok(())
    })
}

fn push(context: CUcontext) -> CUresult {
    entry("cuCtxPushCurrent", || {
        let context = Context::from_handle(context)?;
        STACK.with(|stack| stack.borrow_mut().push(context));
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn cuCtxPushCurrent_v2(context: CUcontext) -> CUresult {
    push(context)
}

#[unsafe(no_mangle)]
pub extern "C" fn cuCtxPushCurrent(context: CUcontext) -> CUresult {
    push(context)
}

/// # Safety
/// `context` is null or valid for writing a CUcontext.
unsafe fn pop(context: *mut CUcontext) -> CUresult {
    entry("cuCtxPopCurrent", || {
        let popped = STACK
            .with(|stack| stack.borrow_mut().pop())
            .ok_or(CUresult::CUDA_ERROR_INVALID_CONTEXT)?;
        if !context.is_null() {
            // SAFETY: the caller's out-pointer, checked non-null.
            unsafe { write_out(context, popped.handle()) }?;
        }
        Ok(())
    })
}

/// # Safety
/// `context` is null or valid for writing a CUcontext.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuCtxPopCurrent_v2(context: *mut CUcontext) -> CUresult {
    // SAFETY: the same contract.
    unsafe { pop(context) }
}

/// # Safety
/// `context` is null or valid for writing a CUcontext.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuCtxPopCurrent(context: *mut CUcontext) -> CUresult {
    // SAFETY: the same contract.
    unsafe { pop(context) }
}
