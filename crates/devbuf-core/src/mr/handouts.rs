//! [`Handouts`]: a resource's memory handed out as bare addresses (RMM's
//! `allocate(nbytes)`/`deallocate(ptr, nbytes)`, as bindings offer them), each freed only if it
//! was handed out here, with the size and kind it was handed out with, and only once.

use std::collections::HashMap;
use std::ptr::NonNull;
use std::sync::Arc;

use parking_lot::Mutex;

use super::{FreeAfter, MemoryResource};
use crate::{DEFAULT_ALIGNMENT, Error, MemKind, Result};

/// Memory allocated from a resource and handed out by address. An address it did not hand out
/// (or already took back), or one given back with another size or kind, is refused and nothing is
/// freed; what is still out when it is dropped goes back to the resource then.
///
/// ```
/// use devbuf_core::mr::{Handouts, QueueResource};
/// use devbuf_core::{Backend, HostBackend, MemKind};
///
/// let handouts = Handouts::new(QueueResource::new(HostBackend.open("")?));
/// let address = handouts.allocate(MemKind::Host, 64)?;
/// assert!(handouts.deallocate(address + 8, MemKind::Host, 64).is_err()); // not handed out
/// assert!(handouts.deallocate(address, MemKind::Host, 32).is_err()); // another size
/// handouts.deallocate(address, MemKind::Host, 64)?;
/// assert!(handouts.deallocate(address, MemKind::Host, 64).is_err()); // already back
/// # Ok::<(), devbuf_core::Error>(())
/// ```
#[derive(Debug)]
pub struct Handouts {
    resource: Arc<dyn MemoryResource>,
    /// Address → (kind, size) of each allocation handed out and not yet given back.
    live: Mutex<HashMap<usize, (MemKind, usize)>>,
}

impl Handouts {
    /// Hands out memory of `resource`.
    pub fn new(resource: Arc<dyn MemoryResource>) -> Self {
        Handouts {
            resource,
            live: Mutex::default(),
        }
    }

    /// The resource the memory comes from.
    pub fn resource(&self) -> &Arc<dyn MemoryResource> {
        &self.resource
    }

    /// The address of `size` new bytes of `kind`, aligned to [`DEFAULT_ALIGNMENT`]; 0 for 0
    /// bytes, as RMM gives a null pointer.
    pub fn allocate(&self, kind: MemKind, size: usize) -> Result<usize> {
        if size == 0 {
            return Ok(0);
        }
        if !self.resource.queue().supports(kind) {
            return Err(Error::invalid(
                "kind",
                format!(
                    "{} has no {kind} memory",
                    self.resource.queue().device().selector
                ),
            ));
        }
        let ptr = self.resource.allocate(kind, size, DEFAULT_ALIGNMENT)?;
        let address = ptr.as_ptr() as usize;
        self.live.lock().insert(address, (kind, size));
        Ok(address)
    }

    /// Gives back the memory at `address`, handed out by [`Handouts::allocate`] with `kind` and
    /// `size`. No work may still run on it, except on the resource's own queue.
    pub fn deallocate(&self, address: usize, kind: MemKind, size: usize) -> Result<()> {
        self.deallocate_after(address, kind, size, FreeAfter::Now)
    }

    /// As [`Handouts::deallocate`], for memory that may still be in use until `after` (RMM's
    /// `deallocate(ptr, bytes, stream)`: an event covering all work on that stream,
    /// [`crate::ordering::all_work_event`]): the resource hands it out again only then.
    pub fn deallocate_after(
        &self,
        address: usize,
        kind: MemKind,
        size: usize,
        after: FreeAfter,
    ) -> Result<()> {
        if address == 0 && size == 0 {
            return Ok(());
        }
        let mut live = self.live.lock();
        let refuse =
            |key, why: String| Err(Error::invalid(key, format!("{why}; nothing was freed")));
        match live.get(&address) {
            None => {
                return refuse(
                    "ptr",
                    format!(
                        "{address:#x} was not handed out by this resource's allocate, or was \
                         deallocated already"
                    ),
                );
            }
            Some(&(_, held)) if held != size => {
                return refuse(
                    "nbytes",
                    format!("{address:#x} was allocated with {held} bytes, not {size}"),
                );
            }
            Some(&(held, _)) if held != kind => {
                return refuse("kind", format!("{address:#x} is {held} memory, not {kind}"));
            }
            Some(_) => live.remove(&address),
        };
        drop(live);
        if let Some(ptr) = NonNull::new(address as *mut u8) {
            // SAFETY: `address` came from `resource.allocate(kind, size, DEFAULT_ALIGNMENT)` and
            // left the map just now, so it is freed once; its user vouches that no other queue's
            // work on it is still running after `after`.
            unsafe {
                self.resource
                    .deallocate(ptr, kind, size, DEFAULT_ALIGNMENT, after)
            };
        }
        Ok(())
    }

    /// How many allocations are handed out and not yet given back.
    pub fn outstanding(&self) -> usize {
        self.live.lock().len()
    }
}

impl Drop for Handouts {
    fn drop(&mut self) {
        for (address, (kind, size)) in self.live.get_mut().drain() {
            if let Some(ptr) = NonNull::new(address as *mut u8) {
                // SAFETY: as in `deallocate`: handed out by `allocate` and freed once, here.
                unsafe {
                    self.resource
                        .deallocate(ptr, kind, size, DEFAULT_ALIGNMENT, FreeAfter::Now)
                };
            }
        }
    }
}
