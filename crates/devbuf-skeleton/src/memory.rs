//! Allocation and pointer classification: aligned blocks from the process's allocator, and a
//! registry of them so that the queue knows its own memory, and only it.

use std::alloc::{Layout, alloc, dealloc};
use std::collections::BTreeMap;
use std::ptr::NonNull;

use devbuf_core::interop::Holder;
use devbuf_core::{Error, MemKind, Result};
use parking_lot::Mutex;

use crate::device::SKELETON;

/// The live allocations: start address → (size, kind).
#[derive(Debug, Default)]
pub(crate) struct Memory {
    allocations: Mutex<BTreeMap<usize, (usize, MemKind)>>,
}

impl Memory {
    /// `size` bytes (not 0) of `kind` aligned to `align` (a power of two).
    pub(crate) fn allocate(&self, kind: MemKind, size: usize, align: usize) -> Result<NonNull<u8>> {
        let oom = |reason: &str| Error::OutOfMemory {
            kind,
            size,
            device: SKELETON.into(),
            reason: reason.into(),
        };
        let layout = Layout::from_size_align(size, align).map_err(|_| oom("no such layout"))?;
        if size == 0 {
            return Err(oom("zero bytes"));
        }
        // SAFETY: the layout's size is not zero.
        let ptr = NonNull::new(unsafe { alloc(layout) }).ok_or_else(|| oom("allocator failed"))?;
        self.allocations
            .lock()
            .insert(ptr.as_ptr() as usize, (size, kind));
        Ok(ptr)
    }

    /// Frees a block of [`Memory::allocate`].
    ///
    /// # Safety
    /// `ptr`, `size` and `align` are those of one live allocation, freed once.
    pub(crate) unsafe fn deallocate(&self, ptr: NonNull<u8>, size: usize, align: usize) {
        self.allocations.lock().remove(&(ptr.as_ptr() as usize));
        // SAFETY: the caller's contract: this layout allocated `ptr`, which is freed once.
        unsafe { dealloc(ptr.as_ptr(), Layout::from_size_align_unchecked(size, align)) }
    }

    /// The allocation holding `ptr`, if it is one of ours.
    pub(crate) fn holder_of(&self, ptr: *const u8) -> Holder {
        let addr = ptr as usize;
        let allocations = self.allocations.lock();
        match allocations.range(..=addr).next_back() {
            Some((&start, &(size, kind))) if addr.wrapping_sub(start) < size => {
                Holder::Allocation {
                    kind,
                    range: start..start.saturating_add(size),
                }
            }
            _ => Holder::Unknown,
        }
    }

    /// The kind of `ptr`'s allocation, [`MemKind::Unknown`] where it is not ours.
    pub(crate) fn kind_of(&self, ptr: *const u8) -> MemKind {
        match self.holder_of(ptr) {
            Holder::Allocation { kind, .. } => kind,
            _ => MemKind::Unknown,
        }
    }
}
