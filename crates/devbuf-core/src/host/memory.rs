//! The host queue's memory: aligned blocks from the global allocator, a registry of them so that
//! `kind_of` answers for devbuf's host memory (and only it), and a few small freed blocks kept
//! for reuse.
//!
//! Like malloc's thread caches and devbuf's pool, a few small freed blocks are kept for the next
//! request of exactly the same size, alignment and kind: the allocate-use-free loop of one size
//! then skips the system allocator's aligned path (`posix_memalign` splits and merges chunks for
//! every 256-byte-aligned request) and the registry's update, most of an allocation's cost. A kept
//! block stays in the registry: it is still the queue's memory, and no other owner can hand out an
//! address inside it. The queue frees a block only once `Buffer` has ordered the release after
//! every use of it, so reusing one is as safe as freeing it.

use std::alloc::{Layout, alloc, dealloc};
use std::collections::BTreeMap;
use std::ptr::NonNull;

use parking_lot::Mutex;

use super::HOST;
use crate::interop::Holder;
use crate::{Error, MemKind, Result};

/// How many freed blocks are kept for the next request of the same size.
const RECENT_BLOCKS: usize = 16;
/// The largest block kept (64 KiB): the few kept never pin much memory.
const RECENT_MAX_SIZE: usize = 64 << 10;

/// The memory of one host queue.
#[derive(Debug)]
pub(super) struct HostMemory {
    /// Start address → (size, kind) of each live allocation, and of each block kept in `recent`.
    allocations: Mutex<BTreeMap<usize, (usize, MemKind)>>,
    /// Small freed blocks kept for reuse (see the module's notes).
    recent: Mutex<Vec<RecentBlock>>,
}

/// A freed block kept for reuse, with the request it was made for.
#[derive(Debug, Clone, Copy)]
struct RecentBlock {
    addr: usize,
    size: usize,
    align: usize,
    kind: MemKind,
}

impl Default for HostMemory {
    fn default() -> Self {
        HostMemory {
            allocations: Mutex::new(BTreeMap::new()),
            recent: Mutex::new(Vec::with_capacity(RECENT_BLOCKS)),
        }
    }
}

impl Drop for HostMemory {
    fn drop(&mut self) {
        for block in self.recent.get_mut().drain(..) {
            // SAFETY: a kept block came from `alloc` with this size and alignment, and left the
            // registry's users when it was freed; it is freed here once.
            unsafe {
                dealloc(
                    block.addr as *mut u8,
                    Layout::from_size_align_unchecked(block.size, block.align),
                )
            }
        }
    }
}

impl HostMemory {
    /// `size` bytes (not 0) of `kind` aligned to `align` (a power of two).
    #[inline]
    pub(super) fn allocate(&self, kind: MemKind, size: usize, align: usize) -> Result<NonNull<u8>> {
        let oom = |reason: &str| Error::OutOfMemory {
            kind,
            size,
            device: HOST.into(),
            reason: reason.into(),
        };
        let layout = Layout::from_size_align(size, align)
            .map_err(|_| oom("the size rounded up to the alignment overflows isize"))?;
        if size == 0 {
            return Err(oom("zero-sized allocation requested"));
        }
        if size <= RECENT_MAX_SIZE {
            let mut recent = self.recent.lock();
            if let Some(index) = recent
                .iter()
                .rposition(|b| b.size == size && b.align == align && b.kind == kind)
            {
                let block = recent.swap_remove(index);
                drop(recent);
                // SAFETY: kept blocks are non-null addresses from `alloc`.
                return Ok(unsafe { NonNull::new_unchecked(block.addr as *mut u8) });
            }
        }
        // SAFETY: the layout has a non-zero size.
        let ptr = NonNull::new(unsafe { alloc(layout) })
            .ok_or_else(|| oom("the system allocator returned null"))?;
        advise_huge_pages(ptr, size);
        self.allocations
            .lock()
            .insert(ptr.as_ptr() as usize, (size, kind));
        Ok(ptr)
    }

    /// Frees a block from [`HostMemory::allocate`] (or keeps it for the same request).
    ///
    /// # Safety
    /// `ptr`, `kind`, `size` and `align` are exactly those of one earlier `allocate`, freed once.
    #[inline]
    pub(super) unsafe fn deallocate(
        &self,
        ptr: NonNull<u8>,
        kind: MemKind,
        size: usize,
        align: usize,
    ) {
        let addr = ptr.as_ptr() as usize;
        if size <= RECENT_MAX_SIZE {
            let mut recent = self.recent.lock();
            if recent.len() < RECENT_BLOCKS {
                recent.push(RecentBlock {
                    addr,
                    size,
                    align,
                    kind,
                });
                return;
            }
        }
        self.allocations.lock().remove(&addr);
        // SAFETY: the caller passes back exactly what `allocate` returned and was given, once.
        unsafe { dealloc(ptr.as_ptr(), Layout::from_size_align_unchecked(size, align)) }
    }

    /// The kind of the allocation holding `ptr`; Unknown where none of ours does.
    pub(super) fn kind_of(&self, ptr: *const u8) -> MemKind {
        let addr = ptr as usize;
        match self.allocations.lock().range(..=addr).next_back() {
            // Registered allocations are memory: their ends do not wrap.
            Some((&start, &(size, kind))) if addr < start.saturating_add(size) => kind,
            _ => MemKind::Unknown,
        }
    }

    /// The allocation holding `ptr` by the registry; any other address may be host memory of
    /// the process, which nothing can tell from garbage: unchecked, its producer trusted.
    pub(super) fn holder_of(&self, ptr: *const u8) -> Holder {
        let addr = ptr as usize;
        match self.allocations.lock().range(..=addr).next_back() {
            Some((&start, &(size, kind))) if addr < start.saturating_add(size) => {
                Holder::Allocation {
                    kind,
                    range: start..start.saturating_add(size),
                }
            }
            _ => Holder::Unchecked,
        }
    }
}

/// Blocks from this size up are advised to use transparent huge pages, as NumPy advises its
/// arrays (`NUMPY_MADVISE_HUGEPAGE`): where the kernel's THP mode is `madvise`, memory gets huge
/// pages only when asked, and without them a 64 MiB block sent through a socket read 2–8% slower
/// than NumPy's (BENCHMARKS-archive.md, the Dask row).
const HUGE_PAGE_ADVICE_FROM: usize = 4 << 20;

/// The huge page size the advice is aligned to (x86-64 and aarch64 with 4 KiB base pages).
const HUGE_PAGE: usize = 2 << 20;

/// Advises the whole huge pages inside a fresh block (before its first write, when the kernel
/// would fault in small pages) to be backed by transparent huge pages. Advice only: an error
/// (a kernel without THP) leaves the block as it is. `DEVBUF_MADVISE_HUGEPAGE=0` turns it off,
/// as NumPy's variable does for NumPy.
#[cfg(target_os = "linux")]
fn advise_huge_pages(ptr: NonNull<u8>, size: usize) {
    static ADVISE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    if size < HUGE_PAGE_ADVICE_FROM
        || !*ADVISE
            .get_or_init(|| std::env::var_os("DEVBUF_MADVISE_HUGEPAGE").is_none_or(|v| v != "0"))
    {
        return;
    }
    // A block just allocated: its end does not wrap.
    let block_end = (ptr.as_ptr() as usize).saturating_add(size);
    let start = (ptr.as_ptr() as usize).checked_next_multiple_of(HUGE_PAGE);
    let end = (block_end / HUGE_PAGE).saturating_mul(HUGE_PAGE);
    if let Some(start) = start.filter(|&start| end > start) {
        let len = end.saturating_sub(start);
        // SAFETY: [start, end) lies inside the block just allocated; advice changes no contents.
        unsafe { libc::madvise(start as *mut libc::c_void, len, libc::MADV_HUGEPAGE) };
    }
}

#[cfg(not(target_os = "linux"))]
fn advise_huge_pages(_ptr: NonNull<u8>, _size: usize) {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_freed_small_block_is_reused_for_the_same_request_only() {
        let memory = HostMemory::default();
        let first = memory.allocate(MemKind::Host, 1024, 256).unwrap();
        // SAFETY: freed once, with the arguments it was allocated with.
        unsafe { memory.deallocate(first, MemKind::Host, 1024, 256) };
        // Another kind, size or alignment never gets the kept block, and classifies as itself.
        let others = [
            (MemKind::Device, 1024, 256),
            (MemKind::Host, 512, 256),
            (MemKind::Host, 1024, 512),
        ]
        .map(|(kind, size, align)| {
            let ptr = memory.allocate(kind, size, align).unwrap();
            assert_ne!(ptr, first, "{kind} {size} {align}");
            assert_eq!(memory.kind_of(ptr.as_ptr()), kind);
            (ptr, kind, size, align)
        });
        let again = memory.allocate(MemKind::Host, 1024, 256).unwrap();
        assert_eq!(again, first);
        assert_eq!(memory.kind_of(again.as_ptr()), MemKind::Host);
        // Live blocks are never handed out twice.
        let second = memory.allocate(MemKind::Host, 1024, 256).unwrap();
        assert_ne!(second, again);
        for (ptr, kind, size, align) in others.into_iter().chain([
            (again, MemKind::Host, 1024, 256),
            (second, MemKind::Host, 1024, 256),
        ]) {
            // SAFETY: each freed once, with the arguments it was allocated with.
            unsafe { memory.deallocate(ptr, kind, size, align) };
        }
    }

    #[test]
    fn large_blocks_and_blocks_past_the_cache_go_back_to_the_system() {
        let memory = HostMemory::default();
        let large = memory
            .allocate(MemKind::Host, RECENT_MAX_SIZE + 1, 256)
            .unwrap();
        // SAFETY: freed once, with the arguments it was allocated with.
        unsafe { memory.deallocate(large, MemKind::Host, RECENT_MAX_SIZE + 1, 256) };
        assert_eq!(memory.kind_of(large.as_ptr()), MemKind::Unknown);
        let small: Vec<_> = (0..=RECENT_BLOCKS)
            .map(|_| memory.allocate(MemKind::Host, 64, 256).unwrap())
            .collect();
        for &ptr in &small {
            // SAFETY: each freed once, with the arguments it was allocated with.
            unsafe { memory.deallocate(ptr, MemKind::Host, 64, 256) };
        }
        let kept = small
            .iter()
            .filter(|ptr| memory.kind_of(ptr.as_ptr()) == MemKind::Host)
            .count();
        assert_eq!(kept, RECENT_BLOCKS);
    }

    /// A large block is eligible for transparent huge pages where the kernel gives them only to
    /// memory that asks (THP mode `madvise`, as here); under `always` every block is, and under
    /// `never` none is, so the test says so and checks nothing there.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_large_block_asks_for_huge_pages() {
        let mode = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled")
            .unwrap_or_default();
        if !mode.contains("[madvise]") {
            eprintln!(
                "THP mode is not madvise ({}): nothing to check",
                mode.trim()
            );
            return;
        }
        let size = 16 << 20;
        let memory = HostMemory::default();
        let ptr = memory.allocate(MemKind::Host, size, 256).unwrap();
        // The advice covers the whole huge pages inside the block: the mapping there.
        let addr = (ptr.as_ptr() as usize).next_multiple_of(HUGE_PAGE);
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        // The mapping holding the block, and its THPeligible line.
        let mut eligible = None;
        let mut inside = false;
        for line in smaps.lines() {
            if let Some((range, _)) = line.split_once(' ')
                && let Some((from, to)) = range.split_once('-')
                && let (Ok(from), Ok(to)) = (
                    usize::from_str_radix(from, 16),
                    usize::from_str_radix(to, 16),
                )
            {
                inside = (from..to).contains(&addr);
            } else if inside && let Some(value) = line.strip_prefix("THPeligible:") {
                eligible = Some(value.trim() == "1");
            }
        }
        // SAFETY: freed once, with the arguments it was allocated with.
        unsafe { memory.deallocate(ptr, MemKind::Host, size, 256) };
        assert_eq!(
            eligible,
            Some(true),
            "the block's mapping is not THP-eligible"
        );
    }
}
