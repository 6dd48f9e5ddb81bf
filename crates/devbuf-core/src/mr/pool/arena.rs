//! The pool's memory of one kind: upstream blocks sub-allocated by an offset allocator, the
//! addresses handed out, and the freed ones whose work may still be running.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::ptr::NonNull;

use offset_allocator::{Allocation, Allocator};

use crate::{DEFAULT_ALIGNMENT, Event, MemKind};

/// The pool's unit of sub-allocation: every block handed out starts on a multiple of it.
pub(super) const UNIT: usize = DEFAULT_ALIGNMENT;

/// How many freed blocks an arena keeps for the next request of the same size.
pub(super) const RECENT_BLOCKS: usize = 16;

/// The largest request (64 KiB, in units) whose freed block is kept: the few kept never pin much.
pub(super) const RECENT_MAX_UNITS: u32 = (64 << 10) / UNIT as u32;

/// One upstream block and the allocator of its units.
pub(super) struct Block {
    pub(super) base: usize,
    pub(super) size: usize,
    pub(super) units: Allocator,
    /// Allocations handed out from it (deferred frees included) and not yet returned.
    pub(super) live: usize,
    /// Of `live`, those freed after [`crate::mr::FreeAfter::ForeignWork`]: never handed out again.
    pub(super) retired: usize,
    /// The units they take.
    pub(super) retired_units: usize,
    /// The block's allocator, set aside while one request takes the whole block
    /// ([`Arena::take_whole`]); `units` then serves that request alone.
    pub(super) set_aside: Option<Allocator>,
}

impl Block {
    /// Whether nothing in the block may be handed out again or is still in use by devbuf: it
    /// goes back upstream.
    pub(super) fn is_done(&self) -> bool {
        self.live == self.retired
    }
}

impl std::fmt::Debug for Block {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Block({:#x}, {} bytes, {} live, {} retired)",
            self.base, self.size, self.live, self.retired
        )
    }
}

/// Hashes addresses (multiples of the unit) by Fibonacci hashing: a multiply, not SipHash.
#[derive(Default)]
pub(super) struct AddressHasher(u64);

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
pub(super) struct Arena {
    pub(super) kind: MemKind,
    /// Slots of upstream blocks; a released block leaves `None` for the next growth to reuse.
    pub(super) blocks: Vec<Option<Block>>,
    /// Address handed out → its block slot and sub-allocation.
    pub(super) handed_out:
        HashMap<usize, (usize, AllocationDebug), BuildHasherDefault<AddressHasher>>,
    /// Freed addresses whose work may still be running, with the event that says when it is done.
    pub(super) deferred: Vec<(usize, Event)>,
    /// Blocks with retired allocations and nothing else in use, taken out of `blocks` to go back
    /// upstream once the arena is unlocked (the runtime's free may wait for other libraries).
    pub(super) drained: Vec<Block>,
}

/// An `offset_allocator::Allocation` (which has no `Debug`).
#[derive(Clone, Copy)]
pub(super) struct AllocationDebug(Allocation);

impl std::fmt::Debug for AllocationDebug {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Allocation(unit {})", self.0.offset)
    }
}

/// The units of the smallest free range offset-allocator hands a request of `units` units out
/// of: its size class, up to an eighth more than the request (None past the largest class).
pub(super) fn class_units(units: u32) -> Option<u32> {
    let class = offset_allocator::ext::min_allocator_size(units);
    // The largest classes wrap to 0 in offset-allocator's u32 arithmetic.
    (class >= units).then_some(class)
}

/// The units a request of `size` bytes aligned to `align` takes: blocks start on a unit, and a
/// larger alignment takes the slack to align within the block.
pub(super) fn units_for(size: usize, align: usize) -> Option<usize> {
    let padded = size.checked_add(align.saturating_sub(UNIT))?;
    Some(padded.div_ceil(UNIT))
}

/// The arena of `kind` (an allocatable kind; Unknown shares the last, never used).
pub(super) fn slot_of(kind: MemKind) -> usize {
    match kind {
        MemKind::Host => 0,
        MemKind::Device => 1,
        MemKind::Shared | MemKind::Unknown => 2,
    }
}

impl Arena {
    /// Frees the deferred allocations whose work has completed.
    pub(super) fn sweep_completed(&mut self) {
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
    pub(super) fn free_or_forget(&mut self, addr: usize, done: bool) {
        if done {
            self.free(addr);
        } else {
            self.handed_out.remove(&addr);
        }
    }

    pub(super) fn try_allocate(&mut self, units: u32, align: usize) -> Option<NonNull<u8>> {
        for (slot, entry) in self.blocks.iter_mut().enumerate() {
            let Some(block) = entry else { continue };
            // A block taken whole has room for nothing else (its allocator's is not memory).
            if block.set_aside.is_some() {
                continue;
            }
            if let Some(allocation) = block.units.allocate(units) {
                return self.hand_out(slot, allocation, align);
            }
        }
        self.take_whole(units, align)
    }

    /// Hands one request a block with nothing in it that holds its units, when no allocator
    /// found it space: offset-allocator serves a request only from a free range of its size
    /// class, up to an eighth more than it, so the block of exactly the request's size that a
    /// pool near its maximum can take (or its initial block, of the maximum) would refuse it.
    /// The block's allocator is set aside until the request is freed.
    fn take_whole(&mut self, units: u32, align: usize) -> Option<NonNull<u8>> {
        let class = class_units(units)?;
        let (slot, block) = self
            .blocks
            .iter_mut()
            .enumerate()
            .find_map(|(slot, entry)| {
                let block = entry.as_mut()?;
                let fits = block.size / UNIT >= units as usize;
                (fits && block.live == 0 && block.set_aside.is_none()).then_some((slot, block))
            })?;
        // Nodes for the allocation and the rest of its class; offset-allocator keeps one spare.
        let mut whole = Allocator::with_max_allocs(class, 3);
        let allocation = whole.allocate(units)?;
        block.set_aside = Some(std::mem::replace(&mut block.units, whole));
        self.hand_out(slot, allocation, align)
    }

    /// Records `allocation`, made in the block in `slot`, as handed out.
    fn hand_out(
        &mut self,
        slot: usize,
        allocation: Allocation,
        align: usize,
    ) -> Option<NonNull<u8>> {
        let block = self.blocks.get_mut(slot)?.as_mut()?;
        block.live = block.live.saturating_add(1);
        // Units offset-allocator handed out lie inside the block, padded for `align` (a block
        // taken whole holds the request's units): no sum here passes the block's end, an
        // address upstream handed out.
        #[allow(
            clippy::arithmetic_side_effects,
            reason = "inside the block, see above"
        )]
        let addr = (block.base + allocation.offset as usize * UNIT).next_multiple_of(align);
        self.handed_out
            .insert(addr, (slot, AllocationDebug(allocation)));
        NonNull::new(addr as *mut u8)
    }

    /// Bytes of the units handed out (deferred and retired frees included: their memory is
    /// still in use).
    pub(super) fn handed_out_bytes(&self) -> usize {
        self.handed_out
            .values()
            .filter_map(|(slot, allocation)| {
                let block = self.blocks.get(*slot)?.as_ref()?;
                Some((block.units.allocation_size(allocation.0) as usize).saturating_mul(UNIT))
            })
            .fold(0, usize::saturating_add)
    }

    pub(super) fn free(&mut self, addr: usize) {
        if let Some((slot, allocation)) = self.handed_out.remove(&addr)
            && let Some(Some(block)) = self.blocks.get_mut(slot)
        {
            block.units.free(allocation.0);
            block.live = block.live.saturating_sub(1);
            if block.live == 0
                && let Some(units) = block.set_aside.take()
            {
                block.units = units;
            }
            self.drain_if_done(slot);
        }
    }

    /// Never hands out the block at `addr` again: other libraries may still use it (see
    /// [`crate::mr::FreeAfter::ForeignWork`]). Its units stay taken; the rest of its upstream block is used
    /// as before.
    pub(super) fn retire(&mut self, addr: usize) {
        if let Some((slot, allocation)) = self.handed_out.remove(&addr)
            && let Some(Some(block)) = self.blocks.get_mut(slot)
        {
            block.retired = block.retired.saturating_add(1);
            let units = block.units.allocation_size(allocation.0) as usize;
            block.retired_units = block.retired_units.saturating_add(units);
            self.drain_if_done(slot);
        }
    }

    /// Takes the block in `slot` out to go back upstream when all that is left in it is retired
    /// and that is at least half of it: giving back a block at every retirement would cost an
    /// upstream free and allocation per exported block, more than the pool saves.
    pub(super) fn drain_if_done(&mut self, slot: usize) {
        if let Some(entry) = self.blocks.get_mut(slot)
            && entry.as_ref().is_some_and(|block| {
                let retired_bytes = block.retired_units.saturating_mul(UNIT);
                block.retired > 0
                    && block.is_done()
                    && retired_bytes.saturating_mul(2) >= block.size
            })
            && let Some(block) = entry.take()
        {
            self.drained.push(block);
        }
    }
}
