//! [`Magazine`]: one freed block per kind that a thread keeps for its next request of the same size
//! from one pool, as tcmalloc's per-thread caches do, taken and kept with plain loads and stores:
//! no atomic read-modify-write, which the pool's shared slots ([`super::recent`]) take each way.
//!
//! A kept block is still handed out as far as the arena knows. It comes back to the pool when the
//! thread exits or moves on to other pools ([`Local`]'s drop and eviction), when the pool is
//! dropped (which no thread can be using meanwhile: it reads every magazine) and before the pool
//! grows or releases memory ([`take_back_all`]). That last one runs on any thread while owners may
//! be using their magazines: it sets each one's `revoked`, then runs a full memory barrier on
//! every thread of the process (`membarrier(2)`), so that each owner either sees `revoked` and
//! leaves its blocks alone, or is seen `busy` and waited for (the asymmetric Dekker pattern: the
//! owner's side needs no fence of its own). Where `membarrier` is missing, threads keep no
//! magazine.

use std::cell::{Cell, RefCell};
use std::ptr::{self, NonNull};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering, compiler_fence};
use std::sync::{Arc, OnceLock, Weak};

use parking_lot::Mutex;

use super::recent::{address, holds};

/// How many pools a thread keeps magazines for; the least recently adopted goes back first.
const POOLS_PER_THREAD: usize = 4;

/// What a thread's magazine gives its blocks back to when the thread is done with it: the pool.
pub(super) trait Home: Send + Sync + std::fmt::Debug {
    /// The home's registry of magazines.
    fn magazines(&self) -> &Magazines;
    /// Frees a block a magazine kept, of arena `slot`.
    fn free_kept(&self, slot: usize, addr: usize);
}

/// A pool's magazines, one per thread that kept one of its blocks. Its address (inside the pool)
/// is the pool's identity for the threads.
#[derive(Debug)]
pub(super) struct Magazines {
    list: Mutex<Vec<Arc<Magazine>>>,
    /// The pool, for the threads' magazines to give their blocks back to when they go.
    home: Weak<dyn Home>,
}

impl Magazines {
    /// The registry of the pool `home` will point to.
    pub(super) fn new(home: Weak<dyn Home>) -> Self {
        Magazines {
            list: Mutex::new(Vec::new()),
            home,
        }
    }

    /// Takes every block out of the magazines of a pool being dropped (no thread can be using
    /// them), arena `slot`'s: their addresses.
    pub(super) fn take_all_dropped(&mut self, slot: usize) -> Vec<usize> {
        let list = self.list.get_mut();
        list.iter().filter_map(|m| m.take_out(slot)).collect()
    }
}

/// The blocks one thread keeps for one pool, shared by that thread (its owner) and the pool.
#[derive(Debug, Default)]
pub(super) struct Magazine {
    /// Per arena: 0, or a block's entry as in [`super::recent`]. The owner reads and writes them
    /// with plain loads and stores while `busy`; anyone else swaps, and only while the owner is
    /// kept out (`revoked`, then not `busy`) or gone.
    blocks: [AtomicU64; 3],
    /// Set by the owner while it reads or writes `blocks`.
    busy: AtomicBool,
    /// Set while another thread takes the blocks back: the owner leaves them alone.
    revoked: AtomicBool,
}

impl Magazine {
    /// Runs `access` on the blocks unless they are being taken back (the owner's side).
    #[inline]
    fn owned<R>(&self, access: impl FnOnce(&[AtomicU64; 3]) -> Option<R>) -> Option<R> {
        // Relaxed: what orders this store before the load of `revoked` is the barrier a thread
        // taking the blocks back makes every thread run (`membarrier`): this fence only keeps
        // the compiler from swapping the two.
        self.busy.store(true, Ordering::Relaxed);
        compiler_fence(Ordering::SeqCst);
        // Acquire: after a take-back, its swaps of `blocks` are seen with its reset of `revoked`.
        let result = if self.revoked.load(Ordering::Acquire) {
            None
        } else {
            access(&self.blocks)
        };
        // Release: a thread waiting for `busy` to clear sees what `access` wrote.
        self.busy.store(false, Ordering::Release);
        result
    }

    /// The kept block of arena `slot` made for `request`, taken out (the owner's side).
    #[inline]
    fn take(&self, slot: usize, request: u64) -> Option<usize> {
        self.owned(|blocks| {
            // Relaxed: only the owner writes a block in, and a take-back's swap is ordered by
            // `revoked` and `busy` (above).
            let entry = blocks[slot].load(Ordering::Relaxed);
            holds(entry, request).then(|| {
                blocks[slot].store(0, Ordering::Relaxed);
                address(entry)
            })
        })
    }

    /// Keeps a block's `entry` in arena `slot`'s place if it is free (the owner's side).
    #[inline]
    fn keep(&self, slot: usize, entry: u64) -> bool {
        self.owned(|blocks| {
            // Relaxed: as in `take`.
            (blocks[slot].load(Ordering::Relaxed) == 0).then(|| {
                blocks[slot].store(entry, Ordering::Relaxed);
            })
        })
        .is_some()
    }

    /// Takes arena `slot`'s block out, by the owner outside its plain accesses, by a pool that
    /// kept the owner out, or by a dropped pool (which no owner can be using).
    fn take_out(&self, slot: usize) -> Option<usize> {
        // Acquire: the owner's plain store of the block came before its release of `busy` (or
        // of the pool's count, for a dropped pool).
        let entry = self.blocks[slot].swap(0, Ordering::Acquire);
        (entry != 0).then(|| address(entry))
    }
}

/// The calling thread's magazine for `pool`, if it has one: its block of arena `slot` made for
/// `request`, taken out.
#[inline]
pub(super) fn take(pool: &Magazines, slot: usize, request: u64) -> Option<NonNull<u8>> {
    let addr = LOCAL
        .try_with(|local| local.magazine_of(pool)?.take(slot, request))
        .ok()??;
    NonNull::new(addr as *mut u8)
}

/// Keeps the block of `entry` (arena `slot`, no work pending on it) in the calling thread's
/// magazine for `pool`, which the thread adopts first if it has none; `false` when it is not kept
/// (the place is taken, or the thread keeps no magazine).
#[inline]
pub(super) fn keep(pool: &Magazines, slot: usize, entry: u64) -> bool {
    LOCAL
        .try_with(|local| {
            let magazine = match local.magazine_of(pool) {
                Some(magazine) => magazine,
                None => local.adopt(pool)?,
            };
            Some(magazine.keep(slot, entry))
        })
        .ok()
        .flatten()
        .unwrap_or(false)
}

/// Takes every thread's block of arena `slot` out of `pool`'s magazines (see the module's notes),
/// for the pool to free: their addresses.
pub(super) fn take_back_all(pool: &Magazines, slot: usize) -> Vec<usize> {
    // Held throughout: a second take-back must not clear `revoked` while this one swaps.
    let magazines = pool.list.lock();
    if magazines.is_empty() {
        return Vec::new();
    }
    for magazine in magazines.iter() {
        magazine.revoked.store(true, Ordering::Relaxed);
    }
    // Magazines exist only where the barrier was registered, so it does not fail; were it to,
    // an owner might still be using its block, which then stays where it is (taken back when
    // its thread exits or the pool is dropped).
    let barrier = heavy_barrier();
    let mut taken = Vec::new();
    for magazine in magazines.iter() {
        if barrier {
            // Acquire: the owner's accesses came before it cleared `busy`.
            while magazine.busy.load(Ordering::Acquire) {
                std::thread::yield_now();
            }
            taken.extend(magazine.take_out(slot));
        }
        // Release: the owner's next access sees the block taken.
        magazine.revoked.store(false, Ordering::Release);
    }
    taken
}

thread_local! {
    static LOCAL: Local = const { Local::new() };
}

/// The calling thread's magazines, one per pool it adopted (at most [`POOLS_PER_THREAD`]).
struct Local {
    /// The pool of `magazine`, the one last used (null for none): the fast path's test.
    pool: Cell<*const Magazines>,
    magazine: Cell<*const Magazine>,
    /// The magazines, each with its pool (whose `Weak` keeps the pool's address from being
    /// reused by another pool while the thread may compare it).
    held: RefCell<Vec<Held>>,
}

/// A thread's magazine for one pool.
struct Held {
    /// The pool's registry: its identity.
    pool: *const Magazines,
    /// The pool (which keeps `pool`'s address from being reused by another pool while the thread
    /// may compare it).
    home: Weak<dyn Home>,
    magazine: Arc<Magazine>,
}

impl Local {
    const fn new() -> Self {
        Local {
            pool: Cell::new(ptr::null()),
            magazine: Cell::new(ptr::null()),
            held: RefCell::new(Vec::new()),
        }
    }

    /// This thread's magazine for `pool`, if it has one.
    #[inline]
    fn magazine_of(&self, pool: &Magazines) -> Option<&Magazine> {
        if ptr::eq(self.pool.get(), pool) {
            // SAFETY: `magazine` is one of `held`'s, which keeps it alive until it is evicted,
            // which resets both cells first.
            return Some(unsafe { &*self.magazine.get() });
        }
        self.find(pool)
    }

    /// The magazine for `pool` among those held, made the fast path's.
    #[cold]
    fn find(&self, pool: &Magazines) -> Option<&Magazine> {
        let held = self.held.borrow();
        let magazine = Arc::as_ptr(&held.iter().find(|h| ptr::eq(h.pool, pool))?.magazine);
        self.pool.set(pool);
        self.magazine.set(magazine);
        // SAFETY: as in `magazine_of`: held until evicted, which resets the cells.
        Some(unsafe { &*magazine })
    }

    /// Starts a magazine for `pool` (evicting the oldest past [`POOLS_PER_THREAD`]); `None` where
    /// threads keep none.
    #[cold]
    fn adopt(&self, pool: &Magazines) -> Option<&Magazine> {
        if !barrier_registered() {
            return None;
        }
        let evicted = {
            let mut held = self.held.borrow_mut();
            let evicted = (held.len() >= POOLS_PER_THREAD).then(|| held.remove(0));
            let magazine = Arc::new(Magazine::default());
            pool.list.lock().push(Arc::clone(&magazine));
            held.push(Held {
                pool,
                home: pool.home.clone(),
                magazine,
            });
            evicted
        };
        self.pool.set(ptr::null());
        if let Some(evicted) = evicted {
            evicted.give_back();
        }
        self.find(pool)
    }
}

impl Drop for Local {
    fn drop(&mut self) {
        self.pool.set(ptr::null());
        for held in self.held.take() {
            held.give_back();
        }
    }
}

impl Held {
    /// Returns the magazine's blocks to its pool, if the pool is still alive (a dropped one took
    /// them), and unregisters it there.
    fn give_back(self) {
        let Some(home) = self.home.upgrade() else {
            return;
        };
        let magazine = &self.magazine;
        home.magazines()
            .list
            .lock()
            .retain(|m| !Arc::ptr_eq(m, magazine));
        for slot in 0..magazine.blocks.len() {
            if let Some(addr) = magazine.take_out(slot) {
                home.free_kept(slot, addr);
            }
        }
    }
}

// The `membarrier(2)` commands (linux/membarrier.h): "MEMBARRIER_CMD_PRIVATE_EXPEDITED (since
// Linux 4.14): Execute a memory barrier on each running thread belonging to the same process as
// the calling thread", which a process must first register for.
#[cfg(target_os = "linux")]
const MEMBARRIER_CMD_PRIVATE_EXPEDITED: libc::c_long = 1 << 3;
#[cfg(target_os = "linux")]
const MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED: libc::c_long = 1 << 4;

/// Whether this process may use [`heavy_barrier`] (registered once, on first use).
fn barrier_registered() -> bool {
    static REGISTERED: OnceLock<bool> = OnceLock::new();
    *REGISTERED.get_or_init(|| {
        #[cfg(target_os = "linux")]
        {
            // SAFETY: a registration with no pointer arguments.
            let registered = unsafe {
                libc::syscall(
                    libc::SYS_membarrier,
                    MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED,
                    0,
                    0,
                )
            };
            registered == 0
        }
        #[cfg(not(target_os = "linux"))]
        false
    })
}

/// A full memory barrier on every running thread of the process; `false` if it failed.
fn heavy_barrier() -> bool {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: a barrier with no pointer arguments, registered for in `barrier_registered`.
        let done =
            unsafe { libc::syscall(libc::SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0) };
        done == 0
    }
    #[cfg(not(target_os = "linux"))]
    false
}

#[cfg(test)]
mod tests;
