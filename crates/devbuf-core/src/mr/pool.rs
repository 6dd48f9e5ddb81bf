//! [`PoolResource`]: sub-allocates from large upstream blocks with `offset-allocator` (a TLSF-style
//! allocator: O(1) allocate and free, neighbours merged on free), one arena per kind.
//!
//! In front of the allocator, each arena keeps a few small blocks freed with no work pending for the
//! next request of exactly the same size, as malloc's thread caches do: the allocate-use-free loop
//! of one size, the pool's most common use, then skips the allocator and the address map (most of
//! a pooled allocation's ~80 ns here). They are given back to the allocator before the pool grows or
//! releases memory, so they never make it take more from upstream.

use std::any::Any;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::ptr::NonNull;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use offset_allocator::{Allocation, Allocator};
use parking_lot::{Mutex, MutexGuard};

use super::{MemoryResource, refused};
use crate::blocking::blocking;
use crate::{DEFAULT_ALIGNMENT, Event, MemKind, Queue, Result};

/// The pool's unit of sub-allocation: every block handed out starts on a multiple of it.
const UNIT: usize = DEFAULT_ALIGNMENT;
/// The smallest upstream block the pool asks for when it grows.
const MIN_GROWTH: usize = 1 << 20;
/// How many freed blocks an arena keeps for the next request of the same size.
const RECENT_BLOCKS: usize = 16;
/// The largest request (64 KiB, in units) whose freed block is kept: the few kept never pin much.
const RECENT_MAX_UNITS: u32 = (64 << 10) / UNIT as u32;

/// How a pool starts and how far it may grow.
#[derive(Debug, Clone, Copy, Default)]
pub struct PoolOptions {
    /// Bytes the first upstream block of each kind holds at least (RMM's `initial_pool_size`),
    /// taken when that kind is first allocated.
    pub initial_size: usize,
    /// The most bytes the pool holds from upstream, all kinds together (`maximum_pool_size`).
    pub maximum_size: Option<usize>,
}

/// A pool that grows on demand and returns its blocks upstream on [`PoolResource::release`] and
/// when dropped. A freed block whose work may still run (the `after` event of
/// [`MemoryResource::deallocate`]) is handed out again only once that event has completed.
#[derive(Debug)]
pub struct PoolResource {
    upstream: Arc<dyn MemoryResource>,
    initial_size: usize,
    maximum_size: Option<usize>,
    arenas: [Mutex<Arena>; 3],
    upstream_bytes: AtomicUsize,
    upstream_peak: AtomicUsize,
}

/// One upstream block and the allocator of its units.
struct Block {
    base: usize,
    size: usize,
    units: Allocator,
    /// Allocations handed out from it (deferred frees included) and not yet returned.
    live: usize,
}

impl std::fmt::Debug for Block {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Block({:#x}, {} bytes, {} live)",
            self.base, self.size, self.live
        )
    }
}

/// Hashes addresses (multiples of the unit) by Fibonacci hashing: a multiply, not SipHash.
#[derive(Default)]
struct AddressHasher(u64);

impl Hasher for AddressHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for byte in bytes {
            self.0 = (self.0 << 8 | u64::from(*byte)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }
    fn write_usize(&mut self, addr: usize) {
        self.0 = (addr as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

/// The pool's memory of one kind.
#[derive(Debug)]
struct Arena {
    kind: MemKind,
    /// Slots of upstream blocks; a released block leaves `None` for the next growth to reuse.
    blocks: Vec<Option<Block>>,
    /// Address handed out → its block slot and sub-allocation.
    handed_out: HashMap<usize, (usize, AllocationDebug), BuildHasherDefault<AddressHasher>>,
    /// Freed addresses whose work may still be running, with the event that says when it is done.
    deferred: Vec<(usize, Event)>,
    /// Small blocks freed with no work pending, still handed out as far as the allocator and the
    /// address map know, kept for the next request of the same size (see the module's notes).
    recent: Vec<RecentBlock>,
}

/// A freed block kept for reuse, with the request it was made for.
#[derive(Debug, Clone, Copy)]
struct RecentBlock {
    addr: usize,
    units: u32,
    align: usize,
}

/// An `offset_allocator::Allocation` (which has no `Debug`).
#[derive(Clone, Copy)]
struct AllocationDebug(Allocation);

impl std::fmt::Debug for AllocationDebug {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Allocation(unit {})", self.0.offset)
    }
}

impl PoolResource {
    /// A pool over `upstream` (usually a [`super::QueueResource`]).
    ///
    /// ```
    /// use std::sync::Arc;
    ///
    /// use devbuf_core::mr::{MemoryResource, PoolOptions, PoolResource, QueueResource};
    /// use devbuf_core::{Backend, Buffer, HostBackend, MemKind};
    ///
    /// let queue = HostBackend.open("")?;
    /// let options = PoolOptions { initial_size: 1 << 20, maximum_size: Some(4 << 20) };
    /// let pool: Arc<dyn MemoryResource> = PoolResource::new(QueueResource::new(queue), options);
    /// let first = Buffer::alloc_from(&pool, MemKind::Device, 4096, 256)?;
    /// let address = first.ptr();
    /// drop(first); // back to the pool, not to the device
    /// let again = Buffer::alloc_from(&pool, MemKind::Device, 4096, 256)?;
    /// assert_eq!(again.ptr(), address);
    /// // Past the maximum, allocation fails instead of growing.
    /// assert!(Buffer::alloc_from(&pool, MemKind::Device, 8 << 20, 256).is_err());
    /// # Ok::<(), devbuf_core::Error>(())
    /// ```
    pub fn new(upstream: Arc<dyn MemoryResource>, options: PoolOptions) -> Arc<Self> {
        let arena = |kind| {
            Mutex::new(Arena {
                kind,
                blocks: Vec::new(),
                handed_out: HashMap::default(),
                deferred: Vec::new(),
                recent: Vec::with_capacity(RECENT_BLOCKS),
            })
        };
        Arc::new(PoolResource {
            upstream,
            initial_size: options.initial_size,
            maximum_size: options.maximum_size,
            arenas: MemKind::ALLOCATABLE.map(arena),
            upstream_bytes: AtomicUsize::new(0),
            upstream_peak: AtomicUsize::new(0),
        })
    }

    /// The resource the pool takes its blocks from.
    pub fn upstream(&self) -> &Arc<dyn MemoryResource> {
        &self.upstream
    }

    /// Bytes the pool holds from upstream now.
    pub fn pool_size(&self) -> usize {
        self.upstream_bytes.load(Ordering::Relaxed)
    }

    /// The most bytes the pool may hold from upstream (`maximum_pool_size`), if limited.
    pub fn maximum_pool_size(&self) -> Option<usize> {
        self.maximum_size
    }

    /// The most bytes the pool has held from upstream at once.
    pub fn peak_pool_size(&self) -> usize {
        self.upstream_peak.load(Ordering::Relaxed)
    }

    /// Returns every block with nothing handed out upstream (RMM's `release()`).
    pub fn release(&self) {
        let mut unused = Vec::new();
        for arena in &self.arenas {
            let mut arena = arena.lock();
            arena.sweep_completed();
            arena.free_recent();
            let kind = arena.kind;
            for slot in &mut arena.blocks {
                if slot.as_ref().is_some_and(|block| block.live == 0)
                    && let Some(block) = slot.take()
                {
                    unused.push((kind, block));
                }
            }
        }
        // Given back unlocked, as `grow` takes them.
        for (kind, block) in unused {
            self.give_back(kind, block, None);
        }
    }

    /// Takes a block of at least `bytes` from upstream into `arena`, which is unlocked while
    /// upstream allocates: upstream may be slow, or written in Python and need the GIL, which a
    /// thread waiting for this arena may hold. Returns the arena locked again.
    fn grow<'a>(
        &'a self,
        arena: MutexGuard<'a, Arena>,
        bytes: usize,
    ) -> (MutexGuard<'a, Arena>, Result<()>) {
        let kind = arena.kind;
        let size = bytes.div_ceil(UNIT).checked_mul(UNIT);
        let units = size.and_then(|size| u32::try_from(size / UNIT).ok());
        let (Some(size), Some(units)) = (size, units) else {
            let why = "the request is larger than a pool block can be".into();
            return (arena, Err(refused(self.queue(), kind, bytes, why)));
        };
        // Reserved before allocating, so that threads growing at once cannot pass the maximum.
        let reserved = self.upstream_bytes.fetch_update(
            Ordering::Relaxed,
            Ordering::Relaxed,
            |held| match self.maximum_size {
                Some(maximum) if held + size > maximum => None,
                _ => Some(held + size),
            },
        );
        let held = match reserved {
            Ok(before) => before + size,
            Err(held) => {
                let maximum = self.maximum_size.unwrap_or(held);
                let why = format!("the pool holds {held} bytes and may hold at most {maximum}");
                return (arena, Err(refused(self.queue(), kind, bytes, why)));
            }
        };
        self.upstream_peak.fetch_max(held, Ordering::Relaxed);
        let slot = slot_of(kind);
        drop(arena);
        let base = self.upstream.allocate(kind, size, UNIT);
        let mut arena = self.arenas[slot].lock();
        let base = match base {
            Ok(base) => base,
            Err(err) => {
                self.upstream_bytes.fetch_sub(size, Ordering::Relaxed);
                return (arena, Err(err));
            }
        };
        // Each allocation takes at least one unit, so a block never needs more nodes than units.
        let max_allocs = units.saturating_add(1).min(128 * 1024);
        let block = Block {
            base: base.as_ptr() as usize,
            size,
            units: Allocator::with_max_allocs(units, max_allocs),
            live: 0,
        };
        match arena.blocks.iter_mut().find(|slot| slot.is_none()) {
            Some(slot) => *slot = Some(block),
            None => arena.blocks.push(Some(block)),
        }
        (arena, Ok(()))
    }

    /// Frees an upstream block, after `after` when given.
    fn give_back(&self, kind: MemKind, block: Block, after: Option<Event>) {
        self.upstream_bytes.fetch_sub(block.size, Ordering::Relaxed);
        if let Some(base) = NonNull::new(block.base as *mut u8) {
            // SAFETY: the block came from `upstream.allocate(kind, size, UNIT)`, leaves the pool
            // here once, and nothing in it is handed out (or its work completes with `after`).
            unsafe {
                self.upstream
                    .deallocate(base, kind, block.size, UNIT, after)
            }
        }
    }

    /// How much to take from upstream for a request of `units` units that did not fit.
    fn growth(&self, units: usize) -> usize {
        // offset-allocator rounds a request up to its bin size (an eighth at most) when it looks
        // for space, so a block must be that much larger than the request it is made for.
        let needed = (units + units / 8 + 1) * UNIT;
        needed.max(MIN_GROWTH).max(self.pool_size() / 4)
    }
}

/// The units a request of `size` bytes aligned to `align` takes: blocks start on a unit, and a
/// larger alignment takes the slack to align within the block.
fn units_for(size: usize, align: usize) -> Option<usize> {
    let padded = size.checked_add(align.saturating_sub(UNIT))?;
    Some(padded.div_ceil(UNIT))
}

/// The arena of `kind` (an allocatable kind; Unknown shares the last, never used).
fn slot_of(kind: MemKind) -> usize {
    match kind {
        MemKind::Host => 0,
        MemKind::Device => 1,
        MemKind::Shared | MemKind::Unknown => 2,
    }
}

impl Arena {
    /// Frees the deferred allocations whose work has completed.
    fn sweep_completed(&mut self) {
        if self.deferred.is_empty() {
            return;
        }
        let deferred = std::mem::take(&mut self.deferred);
        for (addr, event) in deferred {
            if event.is_complete().unwrap_or(false) {
                self.free(addr);
            } else {
                self.deferred.push((addr, event));
            }
        }
    }

    /// Frees a deferred allocation whose work is `done`; one whose wait failed may still be in
    /// use, so its units stay taken for good (its block is never released).
    fn free_or_forget(&mut self, addr: usize, done: bool) {
        if done {
            self.free(addr);
        } else {
            self.handed_out.remove(&addr);
        }
    }

    /// Gives the blocks kept for reuse back to the allocator.
    fn free_recent(&mut self) {
        for recent in std::mem::take(&mut self.recent) {
            self.free(recent.addr);
        }
    }

    /// A block kept for reuse that was made for the same request, if there is one.
    fn reuse_recent(&mut self, units: u32, align: usize) -> Option<NonNull<u8>> {
        let index = self
            .recent
            .iter()
            .rposition(|recent| recent.units == units && recent.align == align)?;
        NonNull::new(self.recent.swap_remove(index).addr as *mut u8)
    }

    /// Frees the block at `addr`, made for a request of `units` aligned to `align`, with no work
    /// pending on it: kept for reuse when it is small and there is room, else freed.
    fn free_now(&mut self, addr: usize, units: u32, align: usize) {
        if units <= RECENT_MAX_UNITS && self.recent.len() < RECENT_BLOCKS {
            self.recent.push(RecentBlock { addr, units, align });
        } else {
            self.free(addr);
        }
    }

    fn try_allocate(&mut self, units: u32, align: usize) -> Option<NonNull<u8>> {
        for (slot, block) in self.blocks.iter_mut().enumerate() {
            let Some(block) = block else { continue };
            if let Some(allocation) = block.units.allocate(units) {
                block.live += 1;
                let start = block.base + allocation.offset as usize * UNIT;
                let addr = start.next_multiple_of(align);
                self.handed_out
                    .insert(addr, (slot, AllocationDebug(allocation)));
                return NonNull::new(addr as *mut u8);
            }
        }
        None
    }

    fn free(&mut self, addr: usize) {
        if let Some((slot, allocation)) = self.handed_out.remove(&addr)
            && let Some(Some(block)) = self.blocks.get_mut(slot)
        {
            block.units.free(allocation.0);
            block.live -= 1;
        }
    }
}

impl MemoryResource for PoolResource {
    fn queue(&self) -> &Arc<dyn Queue> {
        self.upstream.queue()
    }

    fn allocate(&self, kind: MemKind, size: usize, align: usize) -> Result<NonNull<u8>> {
        let too_large = || refused(self.queue(), kind, size, "the request is too large".into());
        if kind == MemKind::Unknown {
            return Err(refused(
                self.queue(),
                kind,
                size,
                "not an allocatable kind".into(),
            ));
        }
        let units = units_for(size, align).ok_or_else(too_large)?;
        let units32 = u32::try_from(units).map_err(|_| too_large())?;
        let mut arena = self.arenas[slot_of(kind)].lock();
        if let Some(ptr) = arena.reuse_recent(units32, align) {
            return Ok(ptr);
        }
        if let Some(ptr) = arena.try_allocate(units32, align) {
            return Ok(ptr);
        }
        // Before growing: the memory freed since, merged with its neighbours.
        arena.sweep_completed();
        arena.free_recent();
        if let Some(ptr) = arena.try_allocate(units32, align) {
            return Ok(ptr);
        }
        let mut growth = self.growth(units);
        if arena.blocks.is_empty() {
            growth = growth.max(self.initial_size);
        }
        let (mut arena, grown) = self.grow(arena, growth);
        if let Err(err) = grown {
            // Full: what is left is the memory whose work is still running. Wait for it without
            // holding the lock (a thread freeing meanwhile must not wait for us), then ask for
            // only as much as the request needs.
            let deferred = std::mem::take(&mut arena.deferred);
            drop(arena);
            let waited: Vec<(usize, bool)> = blocking(|| {
                deferred
                    .into_iter()
                    .map(|(addr, event)| (addr, event.wait().is_ok()))
                    .collect()
            });
            arena = self.arenas[slot_of(kind)].lock();
            for (addr, done) in waited {
                arena.free_or_forget(addr, done);
            }
            if let Some(ptr) = arena.try_allocate(units32, align) {
                return Ok(ptr);
            }
            let grown;
            (arena, grown) = self.grow(arena, (units + units / 8 + 1) * UNIT);
            grown.map_err(|_| err)?;
        }
        arena
            .try_allocate(units32, align)
            .ok_or_else(|| refused(self.queue(), kind, size, "no pool block fits it".into()))
    }

    unsafe fn deallocate(
        &self,
        ptr: NonNull<u8>,
        kind: MemKind,
        size: usize,
        align: usize,
        after: Option<Event>,
    ) {
        let mut arena = self.arenas[slot_of(kind)].lock();
        let addr = ptr.as_ptr() as usize;
        match after {
            Some(event) if !event.is_complete().unwrap_or(false) => {
                arena.deferred.push((addr, event))
            }
            _ => match units_for(size, align).and_then(|units| u32::try_from(units).ok()) {
                Some(units) => arena.free_now(addr, units, align),
                None => arena.free(addr),
            },
        }
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

impl Drop for PoolResource {
    fn drop(&mut self) {
        let mut blocks = Vec::new();
        for arena in &mut self.arenas {
            let arena = arena.get_mut();
            arena.sweep_completed();
            // Work on the deferred blocks runs on the upstream queue, in order: freeing after
            // the latest of it covers all of it.
            let after = arena.deferred.last().map(|(_, event)| event.clone());
            for (addr, _) in std::mem::take(&mut arena.deferred) {
                arena.free(addr);
            }
            arena.free_recent();
            // A block still in use by work whose wait failed is leaked: freeing it would be worse.
            let free = arena.blocks.drain(..).flatten().filter(|b| b.live == 0);
            blocks.extend(free.map(|block| (arena.kind, block, after.clone())));
        }
        for (kind, block, after) in blocks {
            self.give_back(kind, block, after);
        }
    }
}
