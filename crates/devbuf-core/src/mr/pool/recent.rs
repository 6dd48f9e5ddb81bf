//! [`RecentBlocks`]: the small blocks an arena keeps for the next request of the same size, in
//! atomic slots outside the arena's lock, so that the allocate-use-free loop of one size takes
//! one atomic read-modify-write each way and no lock.

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
fn request(units: u32, align: usize) -> Option<u64> {
    (units <= RECENT_MAX_UNITS)
        .then(|| u64::from(units) << ALIGN_BITS | u64::from(align.trailing_zeros()))
}

impl RecentBlocks {
    /// A kept block made for the same request, taken out, if there is one.
    #[inline]
    pub(super) fn take(&self, units: u32, align: usize) -> Option<NonNull<u8>> {
        let request = request(units, align)?;
        for slot in &self.slots {
            let entry = slot.load(Ordering::Relaxed);
            // Acquire: the thread that freed the block was done with it before its release.
            if entry != 0
                && entry & REQUEST_MASK == request
                && slot
                    .compare_exchange(entry, 0, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
            {
                return NonNull::new(((entry >> REQUEST_BITS) as usize * UNIT) as *mut u8);
            }
        }
        None
    }

    /// Keeps the block at `addr` (a multiple of the unit), made for a request of `units` aligned
    /// to `align`, with no work pending on it; `false` when it is not kept (too large, an
    /// address the slot cannot hold, or no slot free): the caller frees it.
    #[inline]
    pub(super) fn keep(&self, addr: usize, units: u32, align: usize) -> bool {
        let Some(request) = request(units, align) else {
            return false;
        };
        let Some(entry) = u64::try_from(addr / UNIT)
            .ok()
            .filter(|&at| addr.is_multiple_of(UNIT) && at != 0 && at < 1 << (64 - REQUEST_BITS))
            .map(|at| at << REQUEST_BITS | request)
        else {
            return false;
        };
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
            (entry != 0).then(|| (entry >> REQUEST_BITS) as usize * UNIT)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_block_is_reused_only_for_the_request_it_was_made_for() {
        let recent = RecentBlocks::default();
        assert!(recent.keep(4 * UNIT, 4, 256));
        assert_eq!(recent.take(4, 512), None);
        assert_eq!(recent.take(3, 256), None);
        assert_eq!(
            recent.take(4, 256).map(|p| p.as_ptr() as usize),
            Some(4 * UNIT)
        );
        assert_eq!(recent.take(4, 256), None);
    }

    #[test]
    fn at_most_the_slots_are_kept_and_all_come_back() {
        let recent = RecentBlocks::default();
        for at in 1..=RECENT_BLOCKS {
            assert!(recent.keep(at * UNIT, 1, 1));
        }
        assert!(!recent.keep((RECENT_BLOCKS + 1) * UNIT, 1, 1));
        assert!(!recent.keep(UNIT, RECENT_MAX_UNITS + 1, 1));
        let mut back: Vec<usize> = recent.take_all().collect();
        back.sort_unstable();
        assert_eq!(
            back,
            (1..=RECENT_BLOCKS).map(|at| at * UNIT).collect::<Vec<_>>()
        );
        assert_eq!(recent.take(1, 1), None);
    }
}
