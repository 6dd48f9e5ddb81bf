//! What a program told the driver about its managed memory (`cuMemAdvise`) and where it last asked
//! for it (`cuMemPrefetchAsync`), page by page, and what `cuMemRangeGetAttribute` answers from
//! that. Advice applies to whole CPU pages: "The start address and end address of the memory
//! range will be rounded down and rounded up respectively to be aligned to CPU page size before
//! the advice is applied", and each answer is about "all pages in the memory range".

use std::ops::Range;
use std::sync::OnceLock;

use cudarc::driver::sys::{CUdevice, CUresult};

use crate::errors::DriverResult;
use crate::location::{DEVICE_CPU, DEVICE_INVALID, LOCATION_NONE, Location};

/// `CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY` .. `_LAST_PREFETCH_LOCATION_ID`.
const READ_MOSTLY: u32 = 1;
const PREFERRED_LOCATION: u32 = 2;
const ACCESSED_BY: u32 = 3;
const LAST_PREFETCH_LOCATION: u32 = 4;
const PREFERRED_LOCATION_TYPE: u32 = 5;
const PREFERRED_LOCATION_ID: u32 = 6;
const LAST_PREFETCH_LOCATION_TYPE: u32 = 7;
const LAST_PREFETCH_LOCATION_ID: u32 = 8;

/// One page's hints.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct PageHints {
    pub read_mostly: bool,
    pub preferred: Option<Location>,
    /// The processors with `CU_MEM_ADVISE_SET_ACCESSED_BY`: device ordinals, `CU_DEVICE_CPU` for
    /// the host.
    pub accessed_by: Vec<CUdevice>,
    pub last_prefetch: Option<Location>,
}

/// An allocation's hints: the same for every page until a page is advised or prefetched.
#[derive(Debug, Default)]
pub(crate) struct RangeHints {
    /// Every page's hints before any was changed: a managed pool's allocations have the pool's
    /// location as their preferred location ("For managed memory pools, CUmemLocation will be
    /// treated as the preferred location for all allocations created from the pool").
    initial: PageHints,
    /// Each page's, once one was changed.
    pages: Vec<PageHints>,
}

/// The CPU page size.
fn page_size() -> u64 {
    static SIZE: OnceLock<u64> = OnceLock::new();
    // SAFETY: sysconf reads a constant of the system.
    *SIZE.get_or_init(|| unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as u64)
}

/// The pages of an allocation starting at `start` that `[address, address + len)` touches, as
/// indices from the allocation's first page.
pub(crate) fn pages(start: u64, address: u64, len: usize) -> Range<usize> {
    let page = page_size();
    let first = address / page - start / page;
    let end = (address + len as u64).div_ceil(page) - start / page;
    first as usize..end as usize
}

impl RangeHints {
    /// Hints of an allocation whose pages prefer `preferred` (a managed pool's location), or
    /// nothing in particular.
    pub(crate) fn new(preferred: Location) -> RangeHints {
        let preferred = (preferred.kind != LOCATION_NONE).then_some(preferred);
        RangeHints {
            initial: PageHints {
                preferred,
                ..PageHints::default()
            },
            pages: Vec::new(),
        }
    }

    /// Applies `change` to `pages` of an allocation of `total` pages.
    pub(crate) fn update(
        &mut self,
        pages: Range<usize>,
        total: usize,
        mut change: impl FnMut(&mut PageHints),
    ) {
        if self.pages.is_empty() {
            self.pages = vec![self.initial.clone(); total];
        }
        self.pages[pages].iter_mut().for_each(&mut change);
    }

    fn each(&self, pages: Range<usize>) -> impl Iterator<Item = &PageHints> {
        let materialized = !self.pages.is_empty();
        pages.map(move |page| match materialized {
            true => &self.pages[page],
            false => &self.initial,
        })
    }

    /// What every page of `pages` says, if they agree.
    fn common<T: PartialEq>(
        &self,
        pages: Range<usize>,
        pick: impl Fn(&PageHints) -> T,
    ) -> Option<T> {
        let mut each = self.each(pages).map(pick);
        let first = each.next()?;
        each.all(|other| other == first).then_some(first)
    }

    /// `cuMemRangeGetAttribute`'s answer for `pages`: the 32-bit integers to write (every
    /// attribute is an int or a `CUmemLocationType`, an enum of the same size), `data_size`
    /// bytes of them.
    pub(crate) fn answer(
        &self,
        pages: Range<usize>,
        attribute: u32,
        data_size: usize,
    ) -> DriverResult<Vec<i32>> {
        let int = std::mem::size_of::<i32>();
        if attribute == ACCESSED_BY {
            // "dataSize must be a non-zero multiple of 4".
            if data_size == 0 || !data_size.is_multiple_of(int) {
                return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
            }
            return Ok(self.accessed_by(pages, data_size / int));
        }
        // Every other attribute: "dataSize must be 4" (or sizeof(CUmemLocationType), also 4).
        if data_size != int {
            return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
        }
        let preferred = || self.common(pages.clone(), |page| page.preferred).flatten();
        let prefetched = || {
            self.common(pages.clone(), |page| page.last_prefetch)
                .flatten()
        };
        let value = match attribute {
            READ_MOSTLY => self.each(pages.clone()).all(|page| page.read_mostly) as i32,
            PREFERRED_LOCATION => preferred().map_or(DEVICE_INVALID, Location::as_device),
            LAST_PREFETCH_LOCATION => prefetched().map_or(DEVICE_INVALID, Location::as_device),
            // CU_MEM_LOCATION_TYPE_INVALID (0) when the pages do not agree or have none.
            PREFERRED_LOCATION_TYPE => preferred().map_or(0, |location| location.kind as i32),
            LAST_PREFETCH_LOCATION_TYPE => prefetched().map_or(0, |location| location.kind as i32),
            // "if it returns any other location type, the id should be ignored".
            PREFERRED_LOCATION_ID => preferred().map_or(DEVICE_INVALID, |location| location.id),
            LAST_PREFETCH_LOCATION_ID => {
                prefetched().map_or(DEVICE_INVALID, |location| location.id)
            }
            _ => return Err(CUresult::CUDA_ERROR_INVALID_VALUE),
        };
        Ok(vec![value])
    }

    /// "a list of device ids that had CU_MEM_ADVISE_SET_ACCESSED_BY set for that entire memory
    /// range", `slots` long, padded with CU_DEVICE_INVALID. Devices in ordinal order, then the
    /// host (NVIDIA's cuda-bindings `test_cuda_mem_range_attr` advises the host first and
    /// expects `[0, CU_DEVICE_CPU, CU_DEVICE_INVALID]`).
    fn accessed_by(&self, pages: Range<usize>, slots: usize) -> Vec<i32> {
        let mut each = self.each(pages);
        let mut common = each
            .next()
            .map_or_else(Vec::new, |page| page.accessed_by.clone());
        for page in each {
            common.retain(|processor| page.accessed_by.contains(processor));
        }
        common.sort_by_key(|&processor| (processor == DEVICE_CPU, processor));
        common.resize(slots, DEVICE_INVALID);
        common
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::location::LOCATION_HOST;

    #[test]
    fn pages_round_out_to_whole_cpu_pages() {
        let page = page_size();
        assert_eq!(pages(4 * page, 4 * page, 1), 0..1);
        assert_eq!(pages(4 * page, 5 * page - 1, 2), 0..2);
        assert_eq!(pages(4 * page, 6 * page, page as usize), 2..3);
    }

    #[test]
    fn answers_are_about_all_pages_of_the_range() {
        let mut hints = RangeHints::new(Location::NONE);
        let whole = 0..4;
        assert_eq!(hints.answer(whole.clone(), READ_MOSTLY, 4), Ok(vec![0]));
        assert_eq!(
            hints.answer(whole.clone(), PREFERRED_LOCATION, 4),
            Ok(vec![-2])
        );
        hints.update(0..2, 4, |page| {
            page.read_mostly = true;
            page.preferred = Some(Location::HOST);
        });
        assert_eq!(hints.answer(0..2, READ_MOSTLY, 4), Ok(vec![1]));
        assert_eq!(hints.answer(whole.clone(), READ_MOSTLY, 4), Ok(vec![0]));
        assert_eq!(
            hints.answer(0..2, PREFERRED_LOCATION, 4),
            Ok(vec![DEVICE_CPU])
        );
        assert_eq!(
            hints.answer(0..2, PREFERRED_LOCATION_TYPE, 4),
            Ok(vec![LOCATION_HOST as i32])
        );
        assert_eq!(hints.answer(whole, PREFERRED_LOCATION_TYPE, 4), Ok(vec![0]));
        assert_eq!(
            hints.answer(0..1, READ_MOSTLY, 8),
            Err(CUresult::CUDA_ERROR_INVALID_VALUE)
        );
    }

    #[test]
    fn accessed_by_lists_devices_then_the_host_padded_with_invalid() {
        let mut hints = RangeHints::new(Location::device(1));
        assert_eq!(hints.answer(0..1, PREFERRED_LOCATION, 4), Ok(vec![1]));
        hints.update(0..2, 2, |page| page.accessed_by = vec![DEVICE_CPU, 1, 0]);
        hints.update(1..2, 2, |page| page.accessed_by.retain(|&p| p != 1));
        assert_eq!(hints.answer(0..2, ACCESSED_BY, 16), Ok(vec![0, -1, -2, -2]));
        assert_eq!(hints.answer(0..1, ACCESSED_BY, 4), Ok(vec![0]));
        assert_eq!(
            hints.answer(0..1, ACCESSED_BY, 6),
            Err(CUresult::CUDA_ERROR_INVALID_VALUE)
        );
    }
}
