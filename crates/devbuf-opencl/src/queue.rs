//! [`OpenClQueue`]: an in-order command queue with its own context on one device, implementing
//! devbuf's [`Queue`] over Intel USM or SVM.

use std::any::Any;
use std::collections::BTreeMap;
use std::ffi::c_void;
use std::fmt;
use std::ptr::NonNull;
use std::sync::Arc;

use cl3::error_codes::error_text;
use devbuf_core::{
    CompletedEvent, DeviceInfo, Error, Event, Interop, LastCommand, MemKind, Queue, QueueEvent,
    Result,
};
use opencl3::command_queue::CommandQueue;
use opencl3::context::Context;
use opencl3::device::Device;
use opencl3::error_codes::CL_INVALID_BUFFER_SIZE;
use opencl3::event::Event as ClEvent;
use opencl3::memory::{CL_MEM_READ_WRITE, CL_MEM_SVM_FINE_GRAIN_BUFFER};
use opencl3::types::{CL_FALSE, cl_int, cl_uint};
use parking_lot::Mutex;

use crate::device::{DeviceEntry, Memory, OPENCL};
use crate::event::OpenClEvent;
use crate::memory::{Allocator, SvmAllocation, svm_holding, usm_event};

/// An in-order command queue on one OpenCL device, in a context of its own.
pub struct OpenClQueue {
    // Declared before the context: fields drop in order, and a queue is released before its
    // context.
    pub(crate) queue: CommandQueue,
    pub(crate) context: Context,
    pub(crate) device: Device,
    pub(crate) info: DeviceInfo,
    pub(crate) allocator: Allocator,
    /// The event of the last command enqueued here, until a wait sees it complete. The queue is
    /// in order, so it completes after everything enqueued before it.
    pub(crate) last: LastCommand<ClEvent>,
    /// Identifies this queue in the events it records (shared with them, so never reused while
    /// one is alive).
    pub(crate) identity: Arc<()>,
}

impl OpenClQueue {
    /// The queue devbuf uses on `entry`'s device: made on first use, then shared.
    pub(crate) fn for_device(entry: &'static DeviceEntry) -> Result<Arc<OpenClQueue>> {
        /// The queue opened on each device, by its entry's address (entries live for the process).
        static OPENED: Mutex<Vec<(usize, Arc<OpenClQueue>)>> = Mutex::new(Vec::new());
        let key = std::ptr::from_ref(entry) as usize;
        let mut opened = OPENED.lock();
        if let Some((_, queue)) = opened.iter().find(|(known, _)| *known == key) {
            return Ok(Arc::clone(queue));
        }
        let queue = Arc::new(OpenClQueue::create(entry)?);
        opened.push((key, Arc::clone(&queue)));
        Ok(queue)
    }

    /// A context holding only this device (so that allocations and pointer queries concern this
    /// device alone) and an in-order queue on it.
    fn create(entry: &DeviceEntry) -> Result<OpenClQueue> {
        let context = Context::from_device(&entry.device)
            .map_err(|err| Error::runtime(OPENCL, "clCreateContext", err.to_string()))?;
        // Properties 0: in order, no profiling.
        let queue =
            CommandQueue::create_default_with_properties(&context, 0, 0).map_err(|err| {
                Error::runtime(
                    OPENCL,
                    "clCreateCommandQueueWithProperties",
                    err.to_string(),
                )
            })?;
        let allocator = match entry.memory {
            Memory::Usm(api) => Allocator::Usm(api),
            Memory::Svm => Allocator::Svm {
                allocations: Mutex::new(BTreeMap::new()),
                max_align: entry
                    .device
                    .mem_base_addr_align()
                    .map_or(0, |bits| bits as usize / 8)
                    .max(1),
            },
            Memory::None => Allocator::None,
        };
        Ok(OpenClQueue {
            queue,
            context,
            device: entry.device,
            info: entry.info.clone(),
            allocator,
            last: LastCommand::default(),
            identity: Arc::new(()),
        })
    }

    /// Enqueues a command with `enqueue` (which returns its event, or the error code) and records
    /// it as the last.
    fn submit(
        &self,
        operation: &'static str,
        enqueue: impl FnOnce(&CommandQueue) -> std::result::Result<ClEvent, cl_int>,
    ) -> Result<()> {
        self.last.submit(|| {
            enqueue(&self.queue).map_err(|code| Error::runtime(OPENCL, operation, error_text(code)))
        })?;
        // Submit now: an event polled with `is_complete` (not waited on, which flushes) would
        // otherwise never complete.
        self.queue
            .flush()
            .map_err(|err| Error::runtime(OPENCL, "clFlush", err.to_string()))
    }

    fn owns(&self, ptr: *const u8) -> bool {
        self.kind_of(ptr) != MemKind::Unknown
    }

    pub(crate) fn event(&self, event: Arc<ClEvent>) -> OpenClEvent {
        OpenClEvent {
            event,
            recorded_by: Arc::clone(&self.identity),
        }
    }

    fn unsupported(&self, what: String, reason: String) -> Error {
        Error::Unsupported {
            device: self.info.selector.clone(),
            what,
            reason,
        }
    }
}

impl fmt::Debug for OpenClQueue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let memory = match self.allocator {
            Allocator::Usm(_) => "usm",
            Allocator::Svm { .. } => "svm",
            Allocator::None => "none",
        };
        f.debug_struct("OpenClQueue")
            .field("device", &self.info.selector)
            .field("name", &self.info.name)
            .field("memory", &memory)
            .finish()
    }
}

impl Queue for OpenClQueue {
    fn device(&self) -> &DeviceInfo {
        &self.info
    }

    fn allocate(&self, kind: MemKind, size: usize, align: usize) -> Result<NonNull<u8>> {
        if !self.info.supports(kind) {
            let reason = self
                .info
                .unusable_reason
                .clone()
                .unwrap_or_else(|| format!("the device offers no {kind} memory"));
            return Err(self.unsupported(format!("{kind} allocation"), reason));
        }
        let alignment = cl_uint::try_from(align).map_err(|_| {
            self.unsupported(
                format!("alignment {align}"),
                "OpenCL takes alignments as 32-bit values".into(),
            )
        })?;
        let context = self.context.get();
        let (operation, ptr, code) = match &self.allocator {
            Allocator::Usm(api) => {
                let mut code = 0;
                let device = self.device.id();
                let properties = std::ptr::null();
                // SAFETY: the context and device are live, no properties, and `code` outlives
                // the call; each returns new memory or null with the error in `code`.
                let (operation, ptr) = unsafe {
                    match kind {
                        MemKind::Host => (
                            "clHostMemAllocINTEL",
                            (api.host_alloc)(context, properties, size, alignment, &mut code),
                        ),
                        MemKind::Device => (
                            "clDeviceMemAllocINTEL",
                            (api.device_alloc)(
                                context, device, properties, size, alignment, &mut code,
                            ),
                        ),
                        MemKind::Shared | MemKind::Unknown => (
                            "clSharedMemAllocINTEL",
                            (api.shared_alloc)(
                                context, device, properties, size, alignment, &mut code,
                            ),
                        ),
                    }
                };
                (operation, ptr, code)
            }
            Allocator::Svm {
                allocations,
                max_align,
            } => {
                let flags = match kind {
                    MemKind::Shared => CL_MEM_READ_WRITE | CL_MEM_SVM_FINE_GRAIN_BUFFER,
                    _ => CL_MEM_READ_WRITE,
                };
                let runtime_align = align.min(*max_align);
                let padded = size.checked_add(align - runtime_align);
                // SAFETY: the context is live; the call returns new SVM memory or an error.
                // (opencl3's SvmVec is not used: it panics on devices with fine-grained system
                // SVM.)
                let allocated = padded.map(|padded| unsafe {
                    cl3::memory::svm_alloc(context, flags, padded, runtime_align as cl_uint)
                });
                match allocated {
                    Some(Ok(base)) => {
                        let padding = (base as usize).next_multiple_of(align) - base as usize;
                        let ptr = base.cast::<u8>().wrapping_add(padding);
                        let allocation = SvmAllocation {
                            base: base as usize,
                            len: size,
                            kind,
                        };
                        allocations.lock().insert(ptr as usize, allocation);
                        ("clSVMAlloc", ptr.cast(), 0)
                    }
                    Some(Err(code)) => ("clSVMAlloc", std::ptr::null_mut(), code),
                    None => ("clSVMAlloc", std::ptr::null_mut(), CL_INVALID_BUFFER_SIZE),
                }
            }
            Allocator::None => {
                return Err(self.unsupported(
                    format!("{kind} allocation"),
                    "the device offers no memory devbuf can allocate".into(),
                ));
            }
        };
        NonNull::new(ptr.cast::<u8>()).ok_or_else(|| Error::OutOfMemory {
            kind,
            size,
            device: self.info.selector.clone(),
            reason: format!("{operation} returned no memory ({})", error_text(code)),
        })
    }

    unsafe fn deallocate(&self, ptr: NonNull<u8>, _kind: MemKind, _size: usize, _align: usize) {
        let context = self.context.get();
        match &self.allocator {
            Allocator::Usm(api) => {
                // SAFETY: `ptr` is a USM allocation of this context (the caller's contract);
                // the blocking free waits for the commands that may still use it.
                unsafe { (api.blocking_free)(context, ptr.as_ptr().cast()) };
            }
            Allocator::Svm { allocations, .. } => {
                // clSVMFree does not wait for commands: never free memory the device may still
                // be using. If waiting fails, leaking is the only safe choice.
                if !self.last.is_idle() && self.wait().is_err() {
                    return;
                }
                let Some(allocation) = allocations.lock().remove(&(ptr.as_ptr() as usize)) else {
                    return;
                };
                // SAFETY: `base` is an SVM allocation of this context with no work pending.
                let _ = unsafe { cl3::memory::svm_free(context, allocation.base as *mut c_void) };
            }
            Allocator::None => {}
        }
    }

    unsafe fn copy(&self, dst: *mut u8, src: *const u8, len: usize) -> Result<()> {
        if len == 0 {
            return Ok(());
        }
        let (dst, src) = (dst.cast::<c_void>(), src.cast::<c_void>());
        match &self.allocator {
            Allocator::Usm(api) => self.submit("clEnqueueMemcpyINTEL", |queue| {
                let mut event = std::ptr::null_mut();
                // SAFETY: the caller guarantees both ranges (USM or host memory, which the
                // extension accepts); the call writes the command's event on success.
                let code = unsafe {
                    (api.enqueue_copy)(
                        queue.get(),
                        CL_FALSE,
                        dst,
                        src,
                        len,
                        0,
                        std::ptr::null(),
                        &mut event,
                    )
                };
                usm_event(code, event)
            }),
            Allocator::Svm { .. } => self.submit("clEnqueueSVMMemcpy", |queue| {
                // SAFETY: the caller guarantees both ranges (SVM of this context or host
                // memory, which SVM copies accept).
                unsafe { queue.enqueue_svm_mem_cpy(CL_FALSE, dst, src, len, &[]) }
                    .map_err(|err| err.0)
            }),
            Allocator::None => {
                // Without an allocator this queue reaches host memory only: copy it here.
                // SAFETY: the caller guarantees both ranges are valid for `len` bytes.
                unsafe { std::ptr::copy(src.cast::<u8>(), dst.cast::<u8>(), len) };
                Ok(())
            }
        }
    }

    unsafe fn fill(&self, dst: *mut u8, byte: u8, len: usize) -> Result<()> {
        if len == 0 {
            return Ok(());
        }
        let dst_void = dst.cast::<c_void>();
        match &self.allocator {
            Allocator::Usm(api) if self.owns(dst) => {
                self.submit("clEnqueueMemFillINTEL", |queue| {
                    let mut event = std::ptr::null_mut();
                    // SAFETY: `dst` is our USM allocation, valid for `len` bytes (the caller's
                    // contract); the one-byte pattern is copied at enqueue time.
                    let code = unsafe {
                        (api.enqueue_fill)(
                            queue.get(),
                            dst_void,
                            (&raw const byte).cast(),
                            1,
                            len,
                            0,
                            std::ptr::null(),
                            &mut event,
                        )
                    };
                    usm_event(code, event)
                })
            }
            Allocator::Svm { .. } if self.owns(dst) => {
                self.submit("clEnqueueSVMMemFill", |queue| {
                    // SAFETY: `dst` is our SVM allocation, valid for `len` bytes (the caller's
                    // contract); the pattern is copied at enqueue time.
                    unsafe { queue.enqueue_svm_mem_fill(dst_void, &[byte], len, &[]) }
                        .map_err(|err| err.0)
                })
            }
            Allocator::None => {
                // Without an allocator this queue reaches host memory only (see `copy`).
                self.wait()?;
                // SAFETY: the caller guarantees `dst` is valid for `len` bytes.
                unsafe { std::ptr::write_bytes(dst, byte, len) };
                Ok(())
            }
            // Memory the runtime does not know may be anything, a device address included: the
            // host touches none of it.
            _ => Err(self.unsupported(
                format!("filling {len} bytes at {dst:p}"),
                "the OpenCL runtime does not know this memory, and devbuf never writes from the \
                 host to memory the runtime has not shown to be host memory"
                    .into(),
            )),
        }
    }

    fn wait(&self) -> Result<()> {
        self.last.wait(|last| self.event(Arc::clone(last)).wait())
    }

    fn record_event(&self) -> Result<Event> {
        // The queue is not shared with other libraries, so with nothing of ours pending there is
        // nothing to wait for.
        Ok(match self.last.get() {
            Some(last) => Event::new(self.event(last)),
            None => Event::new(CompletedEvent),
        })
    }

    fn wait_event(&self, event: &Event) -> Result<()> {
        match event.downcast_ref::<OpenClEvent>() {
            // Our own event: the queue is in order, so later work already follows it.
            Some(ours) if Arc::ptr_eq(&ours.recorded_by, &self.identity) => Ok(()),
            // Another queue's event belongs to another context (one per device), which OpenCL
            // wait lists do not accept; so does every other runtime's: the host waits.
            _ => event.wait(),
        }
    }

    fn kind_of(&self, ptr: *const u8) -> MemKind {
        if ptr.is_null() {
            return MemKind::Unknown;
        }
        match &self.allocator {
            Allocator::Usm(api) => api.kind_of(&self.context, ptr),
            Allocator::Svm { allocations, .. } => {
                svm_holding(&allocations.lock(), ptr).map_or(MemKind::Unknown, |(_, a)| a.kind)
            }
            Allocator::None => MemKind::Unknown,
        }
    }

    fn interop(&self) -> &dyn Interop {
        self
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
