//! [`FixedSizeResource`]: blocks of one size from chunks of upstream memory (RMM's
//! `fixed_size_memory_resource`).

use std::collections::BTreeMap;
use std::ptr::NonNull;
use std::sync::Arc;

use parking_lot::Mutex;

use super::{Adaptor, FreeAfter, MemoryResource, refused};
use crate::{DEFAULT_ALIGNMENT, Error, Event, MemKind, Result};

/// The default block size, as RMM's: 1 MiB.
pub const DEFAULT_BLOCK_SIZE: usize = 1 << 20;
/// How many blocks each chunk from upstream holds by default, as RMM's.
pub const DEFAULT_BLOCKS_TO_PREALLOCATE: usize = 128;
/// The most alignment a block promises (its chunk's alignment): blocks are laid end to end.
const MAX_BLOCK_ALIGNMENT: usize = 4096;

/// One chunk of upstream memory, cut into blocks.
#[derive(Debug)]
struct Chunk {
    /// One past its last byte (checked when it came from upstream).
    end: usize,
    /// Blocks handed out and not yet freed.
    outstanding: usize,
    /// A block was given to libraries devbuf cannot wait for ([`FreeAfter::ForeignWork`]): the
    /// chunk hands out no more blocks, and goes back upstream (whose free waits for them) once
    /// every block is freed.
    retired: bool,
}

/// The blocks of one kind.
#[derive(Debug, Default)]
struct Blocks {
    /// Chunks by base address.
    chunks: BTreeMap<usize, Chunk>,
    /// Blocks free to hand out.
    free: Vec<usize>,
    /// Blocks freed while work on the resource's queue may still use them.
    busy: Vec<(usize, Event)>,
}

/// Hands out blocks of `block_size` bytes (any request up to that size, aligned to up to the
/// largest power of two dividing it, at most 4096), cut from chunks of `blocks_to_preallocate`
/// blocks that it takes from `upstream` as needed and gives back when dropped. A larger request
/// is refused (MemoryError): [`super::BinningResource`] sends those elsewhere. A freed block is
/// handed out again only once the work on it is done; one given to other libraries devbuf cannot
/// wait for never is (its chunk goes back upstream once all its blocks are freed).
#[derive(Debug)]
pub struct FixedSizeResource {
    upstream: Arc<dyn MemoryResource>,
    block_size: usize,
    blocks_to_preallocate: usize,
    /// `block_size * blocks_to_preallocate`, which [`FixedSizeResource::new`] checked fits.
    chunk_size: usize,
    /// By kind, in [`MemKind::ALLOCATABLE`]'s order.
    blocks: [Mutex<Blocks>; 3],
}

impl FixedSizeResource {
    /// Blocks of `block_size` bytes (rounded up to a multiple of 256, RMM's alignment), taken
    /// from `upstream` `blocks_to_preallocate` (at least 1) at a time. A chunk that no address
    /// space can hold (more than `isize::MAX` bytes, the most any allocation may span) is an
    /// error naming the argument that made it so.
    pub fn new(
        upstream: Arc<dyn MemoryResource>,
        block_size: usize,
        blocks_to_preallocate: usize,
    ) -> Result<Arc<Self>> {
        let blocks_to_preallocate = blocks_to_preallocate.max(1);
        let rounded = block_size
            .max(1)
            .checked_next_multiple_of(DEFAULT_ALIGNMENT)
            .filter(|&rounded| isize::try_from(rounded).is_ok())
            .ok_or_else(|| {
                Error::invalid(
                    "block_size",
                    format!(
                        "blocks of {block_size} bytes, rounded up to a multiple of \
                         {DEFAULT_ALIGNMENT}, exceed the {} bytes an allocation may span",
                        isize::MAX
                    ),
                )
            })?;
        let chunk_size = chunk_bytes(rounded, blocks_to_preallocate).ok_or_else(|| {
            Error::invalid(
                "blocks_to_preallocate",
                format!(
                    "{blocks_to_preallocate} blocks of {rounded} bytes exceed the {} bytes an \
                     allocation may span",
                    isize::MAX
                ),
            )
        })?;
        Ok(Arc::new(FixedSizeResource {
            upstream,
            block_size: rounded,
            blocks_to_preallocate,
            chunk_size,
            blocks: Default::default(),
        }))
    }

    /// The size of every block.
    pub fn block_size(&self) -> usize {
        self.block_size
    }

    /// The blocks in each chunk taken from upstream.
    pub fn blocks_to_preallocate(&self) -> usize {
        self.blocks_to_preallocate
    }

    /// The alignment every block has.
    pub fn block_alignment(&self) -> usize {
        // A block size is a non-zero multiple of 256: the largest power of two dividing it.
        let largest = self.block_size & self.block_size.wrapping_neg();
        largest.min(MAX_BLOCK_ALIGNMENT)
    }

    /// Bytes taken from upstream, of every kind.
    pub fn upstream_bytes(&self) -> usize {
        let chunks: usize = self
            .blocks
            .iter()
            .map(|blocks| blocks.lock().chunks.len())
            .sum();
        // Every chunk is memory upstream handed out: their bytes fit in the address space.
        chunks.saturating_mul(self.chunk_size)
    }

    fn blocks_of(&self, kind: MemKind) -> Result<&Mutex<Blocks>> {
        let slot = MemKind::ALLOCATABLE.iter().position(|k| *k == kind);
        slot.map(|slot| &self.blocks[slot]).ok_or_else(|| {
            refused(
                self.upstream.queue(),
                kind,
                0,
                format!("{kind} memory cannot be allocated"),
            )
        })
    }

    /// Takes a free block, first moving blocks whose work is done out of `busy` (queried
    /// without the lock held), and counts it handed out.
    fn take_free(&self, blocks: &Mutex<Blocks>) -> Option<usize> {
        if let Some(addr) = pop_counted(&mut blocks.lock()) {
            return Some(addr);
        }
        let busy = std::mem::take(&mut blocks.lock().busy);
        let (done, still_busy): (Vec<_>, Vec<_>) = busy
            .into_iter()
            .partition(|(_, event)| event.is_complete().unwrap_or(false));
        let mut blocks = blocks.lock();
        blocks.busy.extend(still_busy);
        blocks.free.extend(done.into_iter().map(|(addr, _)| addr));
        pop_counted(&mut blocks)
    }
}

/// The bytes of a chunk of `blocks` blocks of `block_size` bytes, if an allocation can span them.
fn chunk_bytes(block_size: usize, blocks: usize) -> Option<usize> {
    block_size
        .checked_mul(blocks)
        .filter(|&bytes| isize::try_from(bytes).is_ok())
}

/// A free block, counted handed out in the same critical section (so that its chunk cannot go
/// back upstream meanwhile).
fn pop_counted(blocks: &mut Blocks) -> Option<usize> {
    let addr = blocks.free.pop()?;
    let chunk = chunk_of(blocks, addr).1;
    // At most `blocks_to_preallocate` blocks of a chunk are out at once.
    chunk.outstanding = chunk.outstanding.saturating_add(1);
    Some(addr)
}

/// The chunk holding the block at `addr`, and its base address.
fn chunk_of(blocks: &mut Blocks, addr: usize) -> (usize, &mut Chunk) {
    let (&base, chunk) = blocks
        .chunks
        .range_mut(..=addr)
        .next_back()
        .expect("a block handed out or freed here was cut from one of our chunks");
    (base, chunk)
}

impl Adaptor for FixedSizeResource {
    fn upstream(&self) -> &Arc<dyn MemoryResource> {
        &self.upstream
    }

    fn serve(&self, kind: MemKind, size: usize, align: usize) -> Result<NonNull<u8>> {
        if size > self.block_size || align > self.block_alignment() {
            return Err(refused(
                self.upstream.queue(),
                kind,
                size,
                format!(
                    "a fixed-size resource serves up to {} bytes aligned to up to {} ({align} \
                     asked)",
                    self.block_size,
                    self.block_alignment()
                ),
            ));
        }
        let blocks = self.blocks_of(kind)?;
        let addr = match self.take_free(blocks) {
            Some(addr) => addr,
            None => {
                let (chunk_size, alignment) = (self.chunk_size, self.block_alignment());
                let chunk = self.upstream.allocate(kind, chunk_size, alignment)?;
                let base = chunk.as_ptr() as usize;
                let Some(end) = base.checked_add(chunk_size) else {
                    // SAFETY: just allocated with these arguments, and never handed out.
                    unsafe {
                        self.upstream.deallocate(
                            chunk,
                            kind,
                            chunk_size,
                            alignment,
                            FreeAfter::Now,
                        );
                    }
                    return Err(refused(
                        self.upstream.queue(),
                        kind,
                        size,
                        format!(
                            "upstream returned a chunk at {base:#x} that wraps past the end \
                                 of the address space"
                        ),
                    ));
                };
                let mut blocks = blocks.lock();
                blocks.chunks.insert(
                    base,
                    Chunk {
                        end,
                        outstanding: 1,
                        retired: false,
                    },
                );
                // Handed out from the lowest address up: the chunk's blocks after the first.
                blocks
                    .free
                    .extend((base..end).step_by(self.block_size).skip(1).rev());
                base
            }
        };
        Ok(NonNull::new(addr as *mut u8).expect("blocks lie in non-null chunks"))
    }

    unsafe fn take_back(
        &self,
        ptr: NonNull<u8>,
        kind: MemKind,
        _size: usize,
        _align: usize,
        after: FreeAfter,
    ) {
        let Ok(blocks) = self.blocks_of(kind) else {
            return;
        };
        // Asked before locking: the lock is not held across an event query.
        let done = match &after {
            FreeAfter::Now => true,
            FreeAfter::Event(event) => event.is_complete().unwrap_or(false),
            FreeAfter::ForeignWork => false,
        };
        let addr = ptr.as_ptr() as usize;
        let chunk_size = self.chunk_size;
        let mut guard = blocks.lock();
        let (base, chunk) = chunk_of(&mut guard, addr);
        // The block was handed out (the caller's contract): at least it is outstanding.
        chunk.outstanding = chunk.outstanding.saturating_sub(1);
        let newly_retired = matches!(after, FreeAfter::ForeignWork) && !chunk.retired;
        chunk.retired |= newly_retired;
        let (retired, outstanding, end) = (chunk.retired, chunk.outstanding, chunk.end);
        let in_chunk = |block: usize| (base..end).contains(&block);
        if newly_retired {
            guard.free.retain(|&block| !in_chunk(block));
            guard.busy.retain(|(block, _)| !in_chunk(*block));
        } else if !retired {
            match after {
                FreeAfter::Event(event) if !done => guard.busy.push((addr, event)),
                _ => guard.free.push(addr),
            }
        }
        if retired && outstanding == 0 {
            guard.chunks.remove(&base);
            drop(guard);
            let chunk = NonNull::new(base as *mut u8).expect("chunks are non-null");
            // SAFETY: the chunk came from upstream's allocate with these arguments and no block
            // of it is handed out any more; upstream's free waits for the other libraries.
            unsafe {
                self.upstream.deallocate(
                    chunk,
                    kind,
                    chunk_size,
                    self.block_alignment(),
                    FreeAfter::ForeignWork,
                );
            }
        }
    }
}

impl Drop for FixedSizeResource {
    fn drop(&mut self) {
        let (chunk_size, alignment) = (self.chunk_size, self.block_alignment());
        for (blocks, kind) in self.blocks.iter_mut().zip(MemKind::ALLOCATABLE) {
            let blocks = std::mem::take(blocks.get_mut());
            let unfinished: Vec<usize> = crate::ordering::wait_for_freed_blocks(blocks.busy)
                .into_iter()
                .filter_map(|(addr, done)| (!done).then_some(addr))
                .collect();
            for (base, chunk) in blocks.chunks {
                let in_use = unfinished
                    .iter()
                    .any(|addr| (base..chunk.end).contains(addr));
                // A chunk still in use by work whose wait failed is leaked: freeing it would be
                // worse. Every buffer holds its resource, so no block is handed out now.
                if in_use || chunk.outstanding > 0 {
                    continue;
                }
                let after = if chunk.retired {
                    FreeAfter::ForeignWork
                } else {
                    FreeAfter::Now
                };
                let chunk_ptr = NonNull::new(base as *mut u8).expect("chunks are non-null");
                // SAFETY: the chunk came from upstream's allocate with these arguments, and
                // nothing of it is handed out or busy.
                unsafe {
                    self.upstream
                        .deallocate(chunk_ptr, kind, chunk_size, alignment, after);
                }
            }
        }
    }
}
