//! [`RecentBlocks`]: the small blocks an arena keeps for the next request of the same size, in
//! atomic slots outside the arena's lock, so that the allocate-use-free loop of one size takes
//! one atomic read-modify-write each way and no lock. The slots' entries encode a block and the
//! request it was made for.

use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};

use super::arena::{RECENT_BLOCKS, RECENT_MAX_UNITS, UNIT};

/// Bits of a slot that hold the request a block was made for: its units (at most
/// [`RECENT_MAX_UNITS`], 9 bits) and the base-2 logarithm of its alignment (6 bits).
const REQUEST_BITS: u32 = 15;
const ALIGN_BITS: u32 = 6;
const REQUEST_MASK: u64 = (1 << REQUEST_BITS) - 1;
const _: () = assert!(RECENT_MAX_UNITS < 1 << (REQUEST_BITS - ALIGN_BITS));

/// Freed blocks, each slot 0 (empty) or a block's address in units above the request it was made
/// for. A block in a slot is still handed out as far as the arena knows (its allocator and
/// address map); [`RecentBlocks::take_all`], under the arena's lock, gives them back there.
#[derive(Debug, Default)]
pub(super) struct RecentBlocks {
    slots: [AtomicU64; RECENT_BLOCKS],
}

/// A request's bits in a slot; `None` for one whose block is not kept.
#[inline]
pub(super) fn request(units: u32, align: usize) -> Option<u64> {
    (units <= RECENT_MAX_UNITS)
        .then(|| u64::from(units) << ALIGN_BITS | u64::from(align.trailing_zeros()))
}

/// The slot entry of the block at `addr` (a multiple of the unit) made for `request`; `None` for
/// an address a slot cannot hold.
#[inline]
pub(super) fn entry(addr: usize, request: u64) -> Option<u64> {
    u64::try_from(addr / UNIT)
        .ok()
        .filter(|&at| addr.is_multiple_of(UNIT) && at != 0 && at < 1 << (64 - REQUEST_BITS))
        .map(|at| at << REQUEST_BITS | request)
}

/// Whether a slot's `entry` holds a block made for `request`.
#[inline]
fn holds(entry: u64, request: u64) -> bool {
    entry != 0 && entry & REQUEST_MASK == request
}

/// The address of the block in a (non-empty) slot entry.
#[inline]
#[allow(
    clippy::arithmetic_side_effects,
    reason = "the entry holds an address divided by UNIT: multiplying back restores it"
)]
fn address(entry: u64) -> usize {
    (entry >> REQUEST_BITS) as usize * UNIT
}

impl RecentBlocks {
    /// A kept block made for `request` ([`request`]), taken out, if there is one.
    #[inline]
    pub(super) fn take(&self, request: u64) -> Option<NonNull<u8>> {
        for slot in &self.slots {
            let entry = slot.load(Ordering::Relaxed);
            // Acquire: the thread that freed the block was done with it before its release.
            if holds(entry, request)
                && slot
                    .compare_exchange(entry, 0, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
            {
                return NonNull::new(address(entry) as *mut u8);
            }
        }
        None
    }

    /// Keeps the block of `entry` ([`entry`]), with no work pending on it; `false` when no slot
    /// is free: the caller frees it.
    #[inline]
    pub(super) fn keep(&self, entry: u64) -> bool {
        self.slots.iter().any(|slot| {
            slot.load(Ordering::Relaxed) == 0
                && slot
                    .compare_exchange(0, entry, Ordering::Release, Ordering::Relaxed)
                    .is_ok()
        })
    }

    /// Takes every kept block out: their addresses.
    pub(super) fn take_all(&self) -> impl Iterator<Item = usize> + '_ {
        self.slots.iter().filter_map(|slot| {
            let entry = slot.swap(0, Ordering::Acquire);
            (entry != 0).then(|| address(entry))
        })
    }
}

#[cfg(test)]
#[allow(
    clippy::arithmetic_side_effects,
    reason = "tests: expected positions and addresses from small constants"
)]
mod tests {
    use super::*;

    /// The entry of the block at `at` units made for `units` aligned to `align`.
    fn kept(at: usize, units: u32, align: usize) -> u64 {
        entry(at * UNIT, request(units, align).unwrap()).unwrap()
    }

    #[test]
    fn a_block_is_reused_only_for_the_request_it_was_made_for() {
        let recent = RecentBlocks::default();
        assert!(recent.keep(kept(4, 4, 256)));
        assert_eq!(recent.take(request(4, 512).unwrap()), None);
        assert_eq!(recent.take(request(3, 256).unwrap()), None);
        let taken = recent.take(request(4, 256).unwrap());
        assert_eq!(taken.map(|p| p.as_ptr() as usize), Some(4 * UNIT));
        assert_eq!(recent.take(request(4, 256).unwrap()), None);
    }

    #[test]
    fn at_most_the_slots_are_kept_and_all_come_back() {
        let recent = RecentBlocks::default();
        for at in 1..=RECENT_BLOCKS {
            assert!(recent.keep(kept(at, 1, 1)));
        }
        assert!(!recent.keep(kept(RECENT_BLOCKS + 1, 1, 1)));
        assert_eq!(request(RECENT_MAX_UNITS + 1, 1), None);
        assert_eq!(entry(UNIT + 1, request(1, 1).unwrap()), None);
        let mut back: Vec<usize> = recent.take_all().collect();
        back.sort_unstable();
        assert_eq!(
            back,
            (1..=RECENT_BLOCKS).map(|at| at * UNIT).collect::<Vec<_>>()
        );
        assert_eq!(recent.take(request(1, 1).unwrap()), None);
    }
}
