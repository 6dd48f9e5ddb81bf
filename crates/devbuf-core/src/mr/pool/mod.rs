//! [`PoolResource`]: sub-allocates from large upstream blocks with `offset-allocator` (a TLSF-style
//! allocator: O(1) allocate and free, neighbours merged on free), one arena per kind.
//!
//! In front of the allocator, each arena keeps a few small blocks freed with no work pending for the
//! next request of exactly the same size, as malloc's thread caches do: the allocate-use-free loop
//! of one size, the pool's most common use, then skips the allocator and the address map (most of
//! a pooled allocation's ~80 ns here), and the arena's lock too. They sit in atomic slots shared
//! by all threads ([`recent::RecentBlocks`]), one compare-exchange to take or keep one, and are
//! given back to the allocator before the pool grows or releases memory, so they never make it take
//! more from upstream.

mod arena;
mod recent;

/// The bytes of a block any request of `units` units fits in: its size class (offset-allocator
/// looks for a free range of the class, up to an eighth more than the request). Saturates: so
/// large a request is refused by the growth that follows.
fn growth_for(units: usize) -> usize {
    u32::try_from(units)
        .ok()
        .and_then(arena::class_units)
        .map_or(usize::MAX, |class| (class as usize).saturating_mul(UNIT))
}

#[cfg(test)]
mod contract_tests;

use std::collections::HashMap;
use std::ptr::NonNull;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use offset_allocator::Allocator;
use parking_lot::{Mutex, MutexGuard};

use super::{Adaptor, FreeAfter, MemoryResource, refused};
use crate::blocking::blocking;
use crate::debug_log::{LogLevel, debug_log};
use crate::{Event, MemKind, Result};
use arena::{Arena, Block, UNIT, slot_of, units_for};
use recent::RecentBlocks;

/// The smallest upstream block the pool asks for when it grows.
const MIN_GROWTH: usize = 1 << 20;
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
/// [`MemoryResource::deallocate`]) is handed out again only once that event has completed; one
/// other libraries may still use on queues devbuf cannot wait for ([`FreeAfter::ForeignWork`]) is
/// never handed out again: its upstream block goes back upstream, whose free waits for that work,
/// once nothing else in it is in use and such blocks are at least half of it, or on release.
#[derive(Debug)]
pub struct PoolResource {
    upstream: Arc<dyn MemoryResource>,
    initial_size: usize,
    maximum_size: Option<usize>,
    arenas: [Mutex<Arena>; 3],
    /// Each arena's small freed blocks kept for reuse (see the module's notes), outside its lock.
    recent: [RecentBlocks; 3],
    upstream_bytes: AtomicUsize,
    upstream_peak: AtomicUsize,
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
                drained: Vec::new(),
            })
        };
        Arc::new(PoolResource {
            upstream,
            initial_size: options.initial_size,
            maximum_size: options.maximum_size,
            arenas: MemKind::ALLOCATABLE.map(arena),
            recent: Default::default(),
            upstream_bytes: AtomicUsize::new(0),
            upstream_peak: AtomicUsize::new(0),
        })
    }

    /// A pool over `upstream` that keeps RMM's contract for its sizes: `initial_size` more than
    /// `maximum_size` is refused (`initial_pool_size: ...`, naming both), and the initial block
    /// of `reserve`'s arena is taken now, so that a size the upstream cannot give fails here
    /// (its out-of-memory error) rather than at some later allocation. Other kinds take their
    /// initial block on their first allocation, as [`PoolResource::new`]'s do.
    pub fn reserved(
        upstream: Arc<dyn MemoryResource>,
        options: PoolOptions,
        reserve: MemKind,
    ) -> Result<Arc<Self>> {
        if let Some(maximum) = options.maximum_size
            && options.initial_size > maximum
        {
            return Err(crate::Error::invalid(
                "initial_pool_size",
                format!(
                    "{} bytes is more than maximum_pool_size, {maximum} bytes",
                    options.initial_size
                ),
            ));
        }
        let pool = PoolResource::new(upstream, options);
        if options.initial_size > 0 {
            let arena = pool.arenas[slot_of(reserve)].lock();
            let (arena, grown) = pool.grow(arena, options.initial_size);
            drop(arena);
            grown?;
        }
        Ok(pool)
    }

    /// Bytes handed out now (RMM's `pool_size()` less what is free in it; cuda.core's
    /// `used_mem_current`), freed blocks whose work is still running included. Blocks kept for
    /// reuse, and freed ones whose work is done, go back to the pool's allocator first, as before
    /// a growth, so they count as free.
    pub fn used_size(&self) -> usize {
        self.arenas
            .iter()
            .map(|arena| {
                let mut arena = arena.lock();
                arena.sweep_completed();
                self.free_recent(&mut arena);
                let used = arena.handed_out_bytes();
                self.give_back_drained(arena);
                used
            })
            .sum()
    }

    /// The bytes the pool was made to reserve (`initial_pool_size`).
    pub fn initial_pool_size(&self) -> usize {
        self.initial_size
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
        for arena in &self.arenas {
            let mut arena = arena.lock();
            arena.sweep_completed();
            self.free_recent(&mut arena);
            let mut done = std::mem::take(&mut arena.drained);
            for slot in &mut arena.blocks {
                if slot.as_ref().is_some_and(Block::is_done)
                    && let Some(block) = slot.take()
                {
                    done.push(block);
                }
            }
            let kind = arena.kind;
            // Given back unlocked, as `grow` takes them.
            drop(arena);
            for block in done {
                self.give_back(kind, block, None);
            }
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
        let reserved =
            self.upstream_bytes
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |held| {
                    let total = held.checked_add(size)?;
                    match self.maximum_size {
                        Some(maximum) if total > maximum => None,
                        _ => Some(total),
                    }
                });
        let held = match reserved {
            // The update above checked this sum.
            Ok(before) => before.saturating_add(size),
            Err(held) => {
                let maximum = self.maximum_size.unwrap_or(held);
                let why = format!("the pool holds {held} bytes and may hold at most {maximum}");
                debug_log!(
                    LogLevel::Error,
                    "[A][PoolResource][{}][Upstream {size}B][FAILURE maximum pool size exceeded: {why}]",
                    self.queue().device().selector
                );
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
        debug_log!(
            LogLevel::Debug,
            "[A][PoolResource][{}][{kind}][Upstream {size}B][{base:?}]",
            self.queue().device().selector
        );
        // Each allocation takes at least one unit, so a block never needs more nodes than units.
        let max_allocs = units.saturating_add(1).min(128 * 1024);
        let block = Block {
            base: base.as_ptr() as usize,
            size,
            units: Allocator::with_max_allocs(units, max_allocs),
            live: 0,
            retired: 0,
            retired_units: 0,
            set_aside: None,
        };
        match arena.blocks.iter_mut().find(|slot| slot.is_none()) {
            Some(slot) => *slot = Some(block),
            None => arena.blocks.push(Some(block)),
        }
        (arena, Ok(()))
    }

    /// Frees an upstream block, after `after` when given. A block with retired allocations goes
    /// back for the runtime's free alone, which may block until other libraries' work is done.
    fn give_back(&self, kind: MemKind, block: Block, after: Option<Event>) {
        self.upstream_bytes.fetch_sub(block.size, Ordering::Relaxed);
        let Some(base) = NonNull::new(block.base as *mut u8) else {
            return;
        };
        debug_log!(
            LogLevel::Debug,
            "[D][PoolResource][{}][{kind}][Upstream {}B][{base:?}]",
            self.queue().device().selector,
            block.size
        );
        // SAFETY: the block came from `upstream.allocate(kind, size, UNIT)`, leaves the pool here
        // once, and nothing in it is handed out (or its work completes with `after`, or only the
        // runtime's free waits for it).
        let free = |after| unsafe {
            self.upstream
                .deallocate(base, kind, block.size, UNIT, after)
        };
        if block.retired > 0 {
            blocking(|| free(FreeAfter::ForeignWork));
        } else {
            free(after.into());
        }
    }

    /// Gives back the blocks `arena` drained, after unlocking it.
    #[inline]
    fn give_back_drained(&self, arena: MutexGuard<'_, Arena>) {
        if !arena.drained.is_empty() {
            self.give_back_drained_now(arena);
        }
    }

    #[cold]
    fn give_back_drained_now(&self, mut arena: MutexGuard<'_, Arena>) {
        let (kind, drained) = (arena.kind, std::mem::take(&mut arena.drained));
        drop(arena);
        for block in drained {
            self.give_back(kind, block, None);
        }
    }

    /// Gives the blocks kept for reuse back to `arena`'s allocator.
    fn free_recent(&self, arena: &mut Arena) {
        for addr in self.recent[slot_of(arena.kind)].take_all() {
            arena.free(addr);
        }
    }

    /// The smallest block that serves a request of `units` units: one of its size class, or,
    /// under a maximum that leaves no room for that, one of exactly its size, which it then takes
    /// whole (`Arena::take_whole`): a pool serves one request of up to its maximum size.
    fn needed_for(&self, units: usize) -> usize {
        let class = growth_for(units);
        match self.maximum_size {
            Some(maximum) if class > maximum.saturating_sub(self.pool_size()) => {
                units.saturating_mul(UNIT)
            }
            _ => class,
        }
    }

    /// How much to take from upstream for a request of `units` units that did not fit.
    fn growth(&self, units: usize) -> usize {
        let needed = self.needed_for(units);
        let wanted = needed.max(MIN_GROWTH).max(self.pool_size() / 4);
        // Under a maximum, no more than is left: a small request fits a nearly full pool.
        match self.maximum_size {
            Some(maximum) => wanted
                .min(maximum.saturating_sub(self.pool_size()))
                .max(needed),
            None => wanted,
        }
    }
}

// The pool serves memory from its blocks: upstream is asked for blocks, not allocations.
impl Adaptor for PoolResource {
    /// The resource the pool takes its blocks from.
    fn upstream(&self) -> &Arc<dyn MemoryResource> {
        &self.upstream
    }

    fn serve(&self, kind: MemKind, size: usize, align: usize) -> Result<NonNull<u8>> {
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
        let slot = slot_of(kind);
        if let Some(request) = recent::request(units32, align)
            && let Some(ptr) = self.recent[slot].take(request)
        {
            return Ok(ptr);
        }
        let mut arena = self.arenas[slot].lock();
        if let Some(ptr) = arena.try_allocate(units32, align) {
            return Ok(ptr);
        }
        // Before growing: the memory freed since, merged with its neighbours.
        arena.sweep_completed();
        self.free_recent(&mut arena);
        if let Some(ptr) = arena.try_allocate(units32, align) {
            self.give_back_drained(arena);
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
            let waited = crate::ordering::wait_for_freed_blocks(deferred);
            arena = self.arenas[slot].lock();
            for (addr, done) in waited {
                arena.free_or_forget(addr, done);
            }
            if let Some(ptr) = arena.try_allocate(units32, align) {
                self.give_back_drained(arena);
                return Ok(ptr);
            }
            let grown;
            (arena, grown) = self.grow(arena, self.needed_for(units));
            grown.map_err(|_| err)?;
        }
        let allocated = arena
            .try_allocate(units32, align)
            .ok_or_else(|| refused(self.queue(), kind, size, "no pool block fits it".into()));
        self.give_back_drained(arena);
        allocated
    }

    unsafe fn take_back(
        &self,
        ptr: NonNull<u8>,
        kind: MemKind,
        size: usize,
        align: usize,
        after: FreeAfter,
    ) {
        let addr = ptr.as_ptr() as usize;
        // Asked before locking: the arena's lock is not held across an event query.
        let done = match &after {
            FreeAfter::Now => true,
            FreeAfter::Event(event) => event.is_complete().unwrap_or(false),
            FreeAfter::ForeignWork => false,
        };
        let slot = slot_of(kind);
        let kept = units_for(size, align)
            .and_then(|units| u32::try_from(units).ok())
            .and_then(|units| recent::request(units, align))
            .and_then(|request| recent::entry(addr, request));
        if done
            && let Some(entry) = kept
            && self.recent[slot].keep(entry)
        {
            return;
        }
        let mut arena = self.arenas[slot].lock();
        match after {
            FreeAfter::ForeignWork => arena.retire(addr),
            FreeAfter::Event(event) if !done => arena.deferred.push((addr, event)),
            FreeAfter::Now | FreeAfter::Event(_) => arena.free(addr),
        }
        self.give_back_drained(arena);
    }
}

impl Drop for PoolResource {
    fn drop(&mut self) {
        let mut blocks = Vec::new();
        for (arena, recent) in self.arenas.iter_mut().zip(&self.recent) {
            let arena = arena.get_mut();
            arena.sweep_completed();
            // Work on the deferred blocks runs on the upstream queue, in order: freeing after
            // the latest of it covers all of it.
            let after = arena.deferred.last().map(|(_, event)| event.clone());
            for (addr, _) in std::mem::take(&mut arena.deferred) {
                arena.free(addr);
            }
            for addr in recent.take_all() {
                arena.free(addr);
            }
            // A block still in use by work whose wait failed is leaked: freeing it would be worse.
            let free = arena.blocks.drain(..).flatten().filter(Block::is_done);
            let done = free.chain(std::mem::take(&mut arena.drained));
            blocks.extend(done.map(|block| (arena.kind, block, after.clone())));
        }
        for (kind, block, after) in blocks {
            self.give_back(kind, block, after);
        }
    }
}
