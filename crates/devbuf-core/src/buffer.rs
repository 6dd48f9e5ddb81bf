//! [`Buffer`]: bytes with an owner.
//!
//! Either devbuf allocated the bytes (they go back to the queue that made them, exactly once,
//! when the last view is dropped), or they are foreign and the caller says how they are kept
//! alive: an owner object held until the last view goes, or a deleter run exactly once then.

use std::any::Any;
use std::fmt;
use std::ops::Range;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::ptr::NonNull;
use std::sync::Arc;

use parking_lot::Mutex;

use crate::{DeviceInfo, Error, MemKind, Queue, Result};

/// Alignment of [`Buffer::alloc`]: DLPack's recommended data alignment, and CUDA's own.
pub const DEFAULT_ALIGNMENT: usize = 256;

/// What keeps foreign memory alive, or frees it.
pub enum Owner {
    /// An object that keeps the memory alive while held (a Python producer, an Arc of a runtime
    /// allocation...). It is dropped after the last view.
    KeepAlive(Box<dyn Any + Send + Sync>),
    /// A deleter run exactly once, after the last view.
    Deleter(Box<dyn FnOnce() + Send>),
}

impl Owner {
    /// Keeps `owner` alive as long as the memory is viewed.
    pub fn keep_alive(owner: impl Any + Send + Sync) -> Self {
        Owner::KeepAlive(Box::new(owner))
    }

    /// Runs `deleter` once, after the last view.
    pub fn deleter(deleter: impl FnOnce() + Send + 'static) -> Self {
        Owner::Deleter(Box::new(deleter))
    }
}

impl fmt::Debug for Owner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Owner::KeepAlive(_) => "KeepAlive",
            Owner::Deleter(_) => "Deleter",
        })
    }
}

/// How an allocation is released when its last view is dropped.
enum Release {
    /// devbuf allocated it: back to the queue that made it.
    Queue { size: usize, align: usize },
    /// Foreign memory: drop the owner (taken out exactly once, in `Drop`).
    Foreign(Mutex<Option<Owner>>),
}

/// One allocation, shared by every [`Buffer`] that views it.
struct Allocation {
    /// Address of the first byte (0 only for empty foreign memory).
    base: usize,
    kind: MemKind,
    queue: Arc<dyn Queue>,
    release: Release,
}

impl Drop for Allocation {
    fn drop(&mut self) {
        match &mut self.release {
            Release::Queue { size, align } => {
                if let Some(ptr) = NonNull::new(self.base as *mut u8) {
                    // SAFETY: this allocation came from `queue.allocate(kind, size, align)` and
                    // Drop runs once, after the last Buffer referring to it is gone.
                    unsafe { self.queue.deallocate(ptr, self.kind, *size, *align) };
                }
            }
            Release::Foreign(owner) => {
                if let Some(owner) = owner.get_mut().take() {
                    // A panicking deleter must not unwind into a C caller (DLPack deleters run
                    // this from `extern "C"` code); the panic message has already been printed.
                    let _ = catch_unwind(AssertUnwindSafe(move || match owner {
                        Owner::KeepAlive(keep) => drop(keep),
                        Owner::Deleter(delete) => delete(),
                    }));
                }
            }
        }
    }
}

/// A contiguous range of bytes in one allocation; cheap to clone, and every clone or sub-view
/// keeps the allocation alive.
#[derive(Clone)]
pub struct Buffer {
    alloc: Arc<Allocation>,
    offset: usize,
    len: usize,
}

impl Buffer {
    /// Allocates `nbytes` of `kind` memory on `queue`, aligned to [`DEFAULT_ALIGNMENT`].
    pub fn alloc(queue: &Arc<dyn Queue>, kind: MemKind, nbytes: usize) -> Result<Buffer> {
        Self::alloc_aligned(queue, kind, nbytes, DEFAULT_ALIGNMENT)
    }

    /// Allocates `nbytes` of `kind` memory on `queue`, aligned to `align` (a power of two).
    ///
    /// A zero-byte buffer still owns a real (1-byte) allocation, so its pointer is unique and
    /// classifies as `kind`.
    pub fn alloc_aligned(
        queue: &Arc<dyn Queue>,
        kind: MemKind,
        nbytes: usize,
        align: usize,
    ) -> Result<Buffer> {
        if !align.is_power_of_two() {
            return Err(Error::invalid(
                "alignment",
                format!("{align} is not a power of two"),
            ));
        }
        if kind == MemKind::Unknown {
            return Err(Error::invalid(
                "kind",
                "\"unknown\" memory cannot be allocated",
            ));
        }
        if !queue.supports(kind) {
            let device = queue.device();
            return Err(Error::Unsupported {
                device: device.selector.clone(),
                what: format!("{kind} allocation"),
                reason: device
                    .unusable_reason
                    .clone()
                    .unwrap_or_else(|| format!("the device has no {kind} memory")),
            });
        }
        let size = nbytes.max(1);
        let ptr = queue.allocate(kind, size, align)?;
        Ok(Buffer {
            alloc: Arc::new(Allocation {
                base: ptr.as_ptr() as usize,
                kind,
                queue: Arc::clone(queue),
                release: Release::Queue { size, align },
            }),
            offset: 0,
            len: nbytes,
        })
    }

    /// Wraps foreign memory. `queue` is the queue that can reach it (for copies and fills) and
    /// `owner` keeps it alive or frees it after the last view.
    ///
    /// # Safety
    /// `ptr` is valid for `len` bytes of `kind` memory reachable by `queue` (or `len` is 0) for as
    /// long as `owner` has not been dropped or run.
    pub unsafe fn from_foreign(
        queue: Arc<dyn Queue>,
        ptr: *mut u8,
        len: usize,
        kind: MemKind,
        owner: Owner,
    ) -> Buffer {
        Buffer {
            alloc: Arc::new(Allocation {
                base: ptr as usize,
                kind,
                queue,
                release: Release::Foreign(Mutex::new(Some(owner))),
            }),
            offset: 0,
            len,
        }
    }

    /// Address of the first byte of this view.
    pub fn ptr(&self) -> *mut u8 {
        (self.alloc.base + self.offset) as *mut u8
    }

    /// Length of this view in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether this view has no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The kind of memory.
    pub fn kind(&self) -> MemKind {
        self.alloc.kind
    }

    /// The queue that allocated (or can reach) this memory.
    pub fn queue(&self) -> &Arc<dyn Queue> {
        &self.alloc.queue
    }

    /// The device the memory belongs to.
    pub fn device(&self) -> &DeviceInfo {
        self.alloc.queue.device()
    }

    /// Whether devbuf allocated this memory (rather than wrapping foreign memory).
    pub fn is_owned(&self) -> bool {
        matches!(self.alloc.release, Release::Queue { .. })
    }

    /// Whether the host CPU may read and write these bytes directly.
    pub fn is_host_accessible(&self) -> bool {
        self.alloc.queue.host_accessible(self.alloc.kind)
    }

    /// Whether two views share one allocation.
    pub fn same_allocation(&self, other: &Buffer) -> bool {
        Arc::ptr_eq(&self.alloc, &other.alloc)
    }

    /// A sub-view of `range` (relative to this view), sharing ownership of the allocation.
    pub fn slice(&self, range: Range<usize>) -> Result<Buffer> {
        if range.start > range.end || range.end > self.len {
            return Err(Error::invalid(
                "range",
                format!(
                    "{}..{} is outside the buffer of {} bytes",
                    range.start, range.end, self.len
                ),
            ));
        }
        Ok(Buffer {
            alloc: Arc::clone(&self.alloc),
            offset: self.offset + range.start,
            len: range.end - range.start,
        })
    }

    /// Copies all of `src` into this view (same length) and waits for the copy. Works across
    /// kinds, queues and backends: the copy runs on whichever queue reaches both sides, or is
    /// staged through host memory when none does.
    pub fn copy_from(&self, src: &Buffer) -> Result<()> {
        if src.len != self.len {
            return Err(Error::invalid(
                "nbytes",
                format!("source has {} bytes, destination has {}", src.len, self.len),
            ));
        }
        if self.len == 0 {
            return Ok(());
        }
        if self.same_allocation(src) && ranges_overlap(self, src) {
            return Err(Error::invalid(
                "src",
                "source and destination views overlap",
            ));
        }
        let (dst_queue, src_queue) = (self.queue(), src.queue());
        let queue = if reaches(dst_queue, src) {
            dst_queue
        } else if reaches(src_queue, self) {
            src_queue
        } else {
            let staged = src.to_vec()?;
            return self.copy_from_host(&staged);
        };
        // SAFETY: both views are alive (we hold them), in range and disjoint, the queue reaches
        // both, and we wait for the copy before returning.
        unsafe { queue.copy(self.ptr(), src.ptr(), self.len)? };
        queue.wait()
    }

    /// Copies `src` (host memory, same length) into this view and waits for the copy.
    pub fn copy_from_host(&self, src: &[u8]) -> Result<()> {
        if src.len() != self.len {
            return Err(Error::invalid(
                "nbytes",
                format!(
                    "source has {} bytes, destination has {}",
                    src.len(),
                    self.len
                ),
            ));
        }
        if self.len == 0 {
            return Ok(());
        }
        // SAFETY: `src` is borrowed host memory and the view is alive; we wait before returning,
        // so `src` outlives the copy.
        unsafe { self.queue().copy(self.ptr(), src.as_ptr(), self.len)? };
        self.queue().wait()
    }

    /// Copies this view into `dst` (host memory, same length) and waits for the copy.
    pub fn copy_to_host(&self, dst: &mut [u8]) -> Result<()> {
        if dst.len() != self.len {
            return Err(Error::invalid(
                "nbytes",
                format!(
                    "destination has {} bytes, source has {}",
                    dst.len(),
                    self.len
                ),
            ));
        }
        if self.len == 0 {
            return Ok(());
        }
        // SAFETY: `dst` is exclusively borrowed host memory; we wait before returning.
        unsafe { self.queue().copy(dst.as_mut_ptr(), self.ptr(), self.len)? };
        self.queue().wait()
    }

    /// The bytes of this view, copied to a new host vector.
    pub fn to_vec(&self) -> Result<Vec<u8>> {
        let mut bytes = vec![0; self.len];
        self.copy_to_host(&mut bytes)?;
        Ok(bytes)
    }

    /// Sets every byte of this view to `byte` and waits.
    pub fn fill(&self, byte: u8) -> Result<()> {
        if self.len == 0 {
            return Ok(());
        }
        // SAFETY: the view is alive and in range; we wait before returning.
        unsafe { self.queue().fill(self.ptr(), byte, self.len)? };
        self.queue().wait()
    }
}

/// Whether `queue` can address `buffer` in a copy: its own memory, memory its context knows, or
/// memory the host can dereference (which every runtime's copy treats as host memory).
fn reaches(queue: &Arc<dyn Queue>, buffer: &Buffer) -> bool {
    Arc::ptr_eq(queue, buffer.queue())
        || buffer.is_host_accessible()
        || queue.kind_of(buffer.ptr()) != MemKind::Unknown
}

fn ranges_overlap(a: &Buffer, b: &Buffer) -> bool {
    a.offset < b.offset + b.len && b.offset < a.offset + a.len
}

impl fmt::Debug for Buffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Buffer")
            .field("ptr", &self.ptr())
            .field("len", &self.len)
            .field("kind", &self.kind())
            .field("device", &self.device().selector)
            .field("owned", &self.is_owned())
            .finish()
    }
}
