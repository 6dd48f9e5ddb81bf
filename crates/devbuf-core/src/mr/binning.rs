//! [`BinningResource`]: each request to the smallest bin it fits, larger ones upstream (RMM's
//! `binning_memory_resource`).

use std::collections::BTreeMap;
use std::ptr::NonNull;
use std::sync::{Arc, OnceLock};

use parking_lot::Mutex;

use super::{Adaptor, FixedSizeResource, FreeAfter, MemoryResource, check_upstream};
use crate::{DEFAULT_ALIGNMENT, Error, MemKind, Result};

/// Held while a bin is checked and added (see [`BinningResource::add_bin`]).
static GRAPH_EDITS: Mutex<()> = Mutex::new(());

/// A bin: the resource serving requests up to its size, and the most alignment it promises.
#[derive(Debug, Clone)]
struct Bin {
    resource: Arc<dyn MemoryResource>,
    alignment: usize,
}

/// Sends each request to the bin of the smallest size at least as large (and aligned enough),
/// the rest to `upstream`. [`BinningResource::with_exponents`] makes a [`FixedSizeResource`]
/// bin for each power of two in a range, as RMM's `binning_memory_resource(upstream,
/// min_size_exponent, max_size_exponent)`; [`BinningResource::add_bin`] adds one of any size,
/// of any resource on the same device.
#[derive(Debug)]
pub struct BinningResource {
    upstream: Arc<dyn MemoryResource>,
    /// Bins by their allocation size, while bins may be added.
    bins: Mutex<BTreeMap<usize, Bin>>,
    /// The bins, smallest first, fixed by the first allocation (a bin added later would route a
    /// free elsewhere than its allocation went): routes are looked up without a lock.
    routes: OnceLock<Vec<(usize, Bin)>>,
}

impl BinningResource {
    /// No bins: everything goes to `upstream` until [`BinningResource::add_bin`].
    pub fn new(upstream: Arc<dyn MemoryResource>) -> Arc<Self> {
        Arc::new(BinningResource {
            upstream,
            bins: Mutex::default(),
            routes: OnceLock::new(),
        })
    }

    /// A [`FixedSizeResource`] bin over `upstream` for each size `2^min_size_exponent` to
    /// `2^max_size_exponent` (chunks of 128 blocks, as RMM's).
    pub fn with_exponents(
        upstream: Arc<dyn MemoryResource>,
        min_size_exponent: u32,
        max_size_exponent: u32,
    ) -> Result<Arc<Self>> {
        if min_size_exponent > max_size_exponent || max_size_exponent >= usize::BITS - 1 {
            return Err(Error::invalid(
                "max_size_exponent",
                format!(
                    "bins from 2^{min_size_exponent} to 2^{max_size_exponent} bytes: the \
                     exponents must be ordered and below {}",
                    usize::BITS - 1
                ),
            ));
        }
        let binning = BinningResource::new(Arc::clone(&upstream));
        for exponent in min_size_exponent..=max_size_exponent {
            binning
                .add_bin(1 << exponent, None)
                .map_err(|err| match err {
                    // Too large a bin to lay out: the exponent made it so.
                    Error::InvalidDescriptor { message, .. } => {
                        Error::invalid("max_size_exponent", message)
                    }
                    other => other,
                })?;
        }
        Ok(binning)
    }

    /// Serves requests up to `allocation_size` bytes (and larger than the next smaller bin's)
    /// from `bin_resource`, or from a new [`FixedSizeResource`] of blocks of that size over
    /// upstream (RMM's `add_bin`). Bins are added before the first allocation, on upstream's
    /// device; a bin of a size there is already replaces it. A bin that allocates from this
    /// resource (itself, or a resource over it) is refused with [`Error::Recursion`], as is one
    /// that would make the stack deeper than [`super::MAX_DEPTH`]. Returns the bin's resource.
    pub fn add_bin(
        &self,
        allocation_size: usize,
        bin_resource: Option<Arc<dyn MemoryResource>>,
    ) -> Result<Arc<dyn MemoryResource>> {
        // One graph edit at a time: two resources given to each other at once must not both
        // pass the cycle check.
        let _editing = GRAPH_EDITS.lock();
        if let Some(resource) = &bin_resource {
            check_upstream(self, resource, "bin_resource")?;
        }
        // Checked and inserted under the lock that fixing the routes takes.
        let mut bins = self.bins.lock();
        if self.routes.get().is_some() {
            return Err(Error::invalid(
                "allocation_size",
                "bins are added before the binning resource's first allocation (its frees are \
                 routed by size)",
            ));
        }
        if allocation_size == 0 {
            return Err(Error::invalid(
                "allocation_size",
                "a bin of 0 bytes serves nothing",
            ));
        }
        let bin = match bin_resource {
            Some(resource) => {
                let (own, theirs) = (
                    &self.upstream.queue().device().selector,
                    &resource.queue().device().selector,
                );
                if own != theirs {
                    return Err(Error::invalid(
                        "bin_resource",
                        format!("it allocates on {theirs}, the binning resource on {own}"),
                    ));
                }
                let alignment = match resource.as_any().downcast_ref::<FixedSizeResource>() {
                    Some(fixed) if fixed.block_size() < allocation_size => {
                        return Err(Error::invalid(
                            "bin_resource",
                            format!(
                                "its blocks of {} bytes cannot serve a bin of {allocation_size}",
                                fixed.block_size()
                            ),
                        ));
                    }
                    Some(fixed) => fixed.block_alignment(),
                    None => DEFAULT_ALIGNMENT,
                };
                Bin {
                    resource,
                    alignment,
                }
            }
            None => {
                let fixed = FixedSizeResource::new(
                    Arc::clone(&self.upstream),
                    allocation_size,
                    super::fixed_size::DEFAULT_BLOCKS_TO_PREALLOCATE,
                )
                .map_err(|err| match err {
                    // The bin's blocks cannot be laid out: its size made it so.
                    Error::InvalidDescriptor { message, .. } => {
                        Error::invalid("allocation_size", message)
                    }
                    other => other,
                })?;
                Bin {
                    alignment: fixed.block_alignment(),
                    resource: fixed,
                }
            }
        };
        let resource = Arc::clone(&bin.resource);
        bins.insert(allocation_size, bin);
        Ok(resource)
    }

    /// The bins, by allocation size, smallest first (RMM's `bin_mrs`).
    pub fn bins(&self) -> Vec<(usize, Arc<dyn MemoryResource>)> {
        self.bins
            .lock()
            .iter()
            .map(|(&size, bin)| (size, Arc::clone(&bin.resource)))
            .collect()
    }

    /// The resource serving `size` bytes aligned to `align`: the same for an allocation and its
    /// free, as no bin is added once allocations began.
    fn route(&self, size: usize, align: usize) -> &Arc<dyn MemoryResource> {
        let routes = self.routes.get_or_init(|| {
            let bins = self.bins.lock();
            bins.iter()
                .map(|(&size, bin)| (size, bin.clone()))
                .collect()
        });
        let at = routes.partition_point(|(bin_size, _)| *bin_size < size);
        match routes.get(at) {
            Some((_, bin)) if align <= bin.alignment => &bin.resource,
            _ => &self.upstream,
        }
    }
}

impl Adaptor for BinningResource {
    fn upstream(&self) -> &Arc<dyn MemoryResource> {
        &self.upstream
    }

    fn serves(&self, asked: MemKind, size: usize, align: usize) -> MemKind {
        self.route(size, align).serves(asked, size, align)
    }

    fn also_allocates_from(&self) -> Vec<Arc<dyn MemoryResource>> {
        self.bins
            .lock()
            .values()
            .map(|bin| Arc::clone(&bin.resource))
            .collect()
    }

    fn serve(&self, kind: MemKind, size: usize, align: usize) -> Result<NonNull<u8>> {
        self.route(size, align).allocate(kind, size, align)
    }

    unsafe fn take_back(
        &self,
        ptr: NonNull<u8>,
        kind: MemKind,
        size: usize,
        align: usize,
        after: FreeAfter,
    ) {
        // SAFETY: forwarded from our caller; the route is the one the allocation took.
        unsafe {
            self.route(size, align)
                .deallocate(ptr, kind, size, align, after)
        }
    }
}
