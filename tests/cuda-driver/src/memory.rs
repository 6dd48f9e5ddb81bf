//! What the driver knows about memory: every allocation's record, where its bytes live, and the
//! reserved address range device pointers come from.
//!
//! Device pointers are addresses in one big `PROT_NONE` reservation, so the host faults when it
//! dereferences one, as it would on a GPU; their bytes live in a separate mapping that only stream
//! operations touch. Addresses are handed out by a bump pointer and never reused (except by the
//! pool's immediate reuse, when asked for), so a freed pointer stays unknown to the driver and
//! inaccessible to the host. Pinned host and managed memory are host mappings (see
//! [`crate::storage`]); when freed they become `PROT_NONE` and stay reserved, so a host access
//! after the free faults too.

use std::collections::BTreeMap;
use std::fs::File;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use cudarc::driver::sys::CUresult;
use parking_lot::{Condvar, Mutex, RwLock};

use crate::config::{config, device_count};
use crate::context::Context;
use crate::errors::DriverResult;
use crate::managed_hints::RangeHints;
use crate::storage::Storage;

/// Alignment of every device allocation (the real driver's is at least 256 bytes).
const DEVICE_ALIGNMENT: u64 = 512;
/// Untouchable bytes left after each device allocation, so that an overrun is not in a neighbour.
const RED_ZONE: u64 = 4096;
/// The block CUDA IPC shares: CUDA Programming Guide, "Interprocess Communication": memory from
/// cudaMalloc may be sub-allocated from a larger block, IPC shares the whole block, so "only
/// share allocations with a 2MiB aligned size". The double places a device allocation whose size
/// is a multiple of it at a multiple of it, as a block of its own; smaller ones are packed at
/// [`DEVICE_ALIGNMENT`] (their IPC mappings still cover the allocation alone: the neighbours a GPU
/// would expose in the same block are not modelled).
pub(crate) const IPC_BLOCK: u64 = 2 << 20;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// `cuMemAlloc`, `cuMemAllocAsync`: the host cannot touch it.
    Device,
    /// `cuMemHostAlloc`, `cuMemAllocHost`: pinned, host-accessible.
    PinnedHost,
    /// `cuMemAllocManaged`: host- and device-accessible.
    Managed,
}

/// Where an allocation came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Origin {
    /// `cuMemAlloc`, `cuMemHostAlloc`, `cuMemAllocHost`, `cuMemAllocManaged`.
    Allocated,
    /// A memory pool (`cuMemAllocAsync`, `cuMemAllocFromPoolAsync`): the pool's handle. Such
    /// memory belongs to the pool's device, not to a context.
    Pooled(usize),
    /// Another process's device allocation, mapped here by `cuIpcOpenMemHandle`.
    Imported,
    /// The program's own host memory, page-locked by `cuMemHostRegister`.
    Registered,
}

/// Where an allocation stands in stream order (the host's free request is
/// [`Record::free_requested`]: work enqueued before it may still run).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum State {
    /// `cuMemAllocAsync` returned, but its stream has not reached the allocation yet.
    AllocationPending,
    Live,
    /// A free was reached (synchronous, or in stream order).
    Freed,
}

/// One allocation, as the driver tracks it.
pub(crate) struct Record {
    pub start: u64,
    pub size: usize,
    pub kind: Kind,
    /// The context the memory belongs to; `None` for stream-ordered (pool) memory, which belongs
    /// to its device alone.
    pub context: Option<&'static Context>,
    /// The device the memory belongs to (for pinned and managed memory, the allocating context's).
    pub ordinal: usize,
    /// The `cuMemHostAlloc` flags of pinned memory.
    pub host_flags: u32,
    pub origin: Origin,
    /// A number unique to this allocation (`CU_POINTER_ATTRIBUTE_BUFFER_ID`).
    pub id: u64,
    /// Held for reading by a stream operation while it touches the bytes, and for writing to
    /// free them.
    pub state: RwLock<State>,
    /// Stream operations enqueued on this allocation that have not completed.
    pub pending: AtomicUsize,
    /// Those of them that synchronous calls (`cuMemcpyHtoD`, `cuMemsetD8`, ...) enqueued, which
    /// `cuMemFree` waits for (see `alloc::cuMemFree_v2`).
    pub synchronous: Mutex<usize>,
    pub synchronous_done: Condvar,
    /// The program asked to free it (`cuMemFree*` called, or `cuMemFreeAsync` enqueued).
    pub free_requested: AtomicBool,
    /// Device bytes this record counts against its device's memory.
    pub accounted: AtomicUsize,
    pub storage: Arc<Storage>,
    /// `CU_POINTER_ATTRIBUTE_SYNC_MEMOPS`, set by `cuPointerSetAttribute`.
    pub sync_memops: AtomicBool,
    /// The pool handed the block to a new allocation before this one's free was reached
    /// (`DEVBUF_CUDA_TEST_POOL_REUSE=immediate`): the free gives nothing back to the pool.
    pub handed_on: AtomicBool,
    /// Managed memory's advice and prefetch locations (see [`crate::managed_hints`]).
    pub hints: Mutex<RangeHints>,
}

impl Record {
    pub fn end(&self) -> u64 {
        self.start + self.size as u64
    }

    /// Blocks until the operations synchronous calls enqueued on this allocation have completed.
    pub fn wait_for_synchronous_calls(&self) {
        let mut pending = self.synchronous.lock();
        while *pending > 0 {
            self.synchronous_done.wait(&mut pending);
        }
    }

    /// Where the bytes at `offset` are, for a stream operation holding the state lock.
    pub fn data(&self, offset: usize) -> *mut u8 {
        (self.storage.data() + offset) as *mut u8
    }
}

/// The `PROT_NONE` range device addresses come from.
struct AddressSpace {
    base: u64,
    size: u64,
    next: Mutex<u64>,
}

fn address_space() -> &'static AddressSpace {
    static SPACE: OnceLock<AddressSpace> = OnceLock::new();
    SPACE.get_or_init(|| {
        // Large enough never to run out in a test run; a smaller one where address space is
        // limited (ulimit -v).
        for size in [4u64 << 40, 1 << 40, 64 << 30, 4 << 30] {
            // SAFETY: reserves fresh address space that nothing can access; nothing refers to it.
            let base = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    size as usize,
                    libc::PROT_NONE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                    -1,
                    0,
                )
            };
            if base != libc::MAP_FAILED {
                return AddressSpace {
                    base: base as u64,
                    size,
                    // The first allocation is not at the start: a pointer just below one is not
                    // valid either.
                    next: Mutex::new(base as u64 + RED_ZONE),
                };
            }
        }
        AddressSpace {
            base: 0,
            size: 0,
            next: Mutex::new(0),
        }
    })
}

/// Whether `address` is in the device range (allocated or not).
pub(crate) fn is_device_address(address: u64) -> bool {
    let space = address_space();
    address >= space.base && address < space.base + space.size
}

fn reserve_device_addresses(size: usize) -> DriverResult<u64> {
    let space = address_space();
    let mut next = space.next.lock();
    let alignment = match size as u64 % IPC_BLOCK {
        0 if size > 0 => IPC_BLOCK,
        _ => DEVICE_ALIGNMENT,
    };
    let start = next.next_multiple_of(alignment);
    let end = start
        .checked_add(size as u64 + RED_ZONE)
        .filter(|&end| end <= space.base + space.size)
        .ok_or(CUresult::CUDA_ERROR_OUT_OF_MEMORY)?;
    *next = end;
    Ok(start)
}

static REGISTRY: RwLock<BTreeMap<u64, Arc<Record>>> = RwLock::new(BTreeMap::new());
/// Bytes freed from each pool (by handle) that the pool still keeps reserved (see
/// `crate::pool::Pool::kept`).
static KEPT: Mutex<BTreeMap<usize, u64>> = Mutex::new(BTreeMap::new());

/// The bytes pool `pool` (its handle) keeps reserved after their free was reached.
pub(crate) fn pool_bytes_kept(pool: usize) -> u64 {
    KEPT.lock().get(&pool).copied().unwrap_or(0)
}

/// Sets what pool `pool` keeps to `change` of what it keeps now.
pub(crate) fn change_pool_bytes_kept(pool: usize, change: impl FnOnce(u64) -> u64) {
    let mut kept = KEPT.lock();
    let entry = kept.entry(pool).or_default();
    *entry = change(*entry);
}
static NEXT_ID: AtomicU64 = AtomicU64::new(1);
static ALLOCATION_CALLS: AtomicU64 = AtomicU64::new(0);

/// Counts one allocation call: CUDA_ERROR_OUT_OF_MEMORY when `DEVBUF_CUDA_TEST_FAIL_ALLOCATIONS`
/// names its number.
pub(crate) fn count_allocation_call() -> DriverResult {
    let number = ALLOCATION_CALLS.fetch_add(1, Ordering::AcqRel) + 1;
    match config()
        .failing_allocations
        .iter()
        .find(|(failing, _)| *failing == number)
    {
        Some(&(_, code)) => Err(code),
        None => Ok(()),
    }
}

fn device_memory_used() -> &'static [AtomicUsize] {
    static USED: OnceLock<Box<[AtomicUsize]>> = OnceLock::new();
    USED.get_or_init(|| (0..device_count()).map(|_| AtomicUsize::new(0)).collect())
}

/// Bytes of device memory in use on device `ordinal`.
pub(crate) fn used(ordinal: usize) -> usize {
    device_memory_used()[ordinal].load(Ordering::Acquire)
}

/// The parts of a new allocation its caller decides.
pub(crate) struct NewAllocation {
    pub size: usize,
    pub kind: Kind,
    /// The allocating context (for pool memory, a context of the pool's device).
    pub context: &'static Context,
    pub host_flags: u32,
    pub origin: Origin,
    pub state: State,
}

/// Creates and registers an allocation of fresh addresses.
pub(crate) fn allocate(new: NewAllocation) -> DriverResult<Arc<Record>> {
    if new.size == 0 {
        return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
    }
    let (start, storage, accounted) = match new.kind {
        Kind::Device => {
            let used = &device_memory_used()[new.context.ordinal];
            let total = config().total_memory as usize;
            used.fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                used.checked_add(new.size).filter(|&after| after <= total)
            })
            .map_err(|_| CUresult::CUDA_ERROR_OUT_OF_MEMORY)?;
            let placed = reserve_device_addresses(new.size)
                .and_then(|start| Ok((start, Storage::device(new.size)?)));
            match placed {
                Ok((start, storage)) => (start, storage, new.size),
                Err(code) => {
                    used.fetch_sub(new.size, Ordering::AcqRel);
                    return Err(code);
                }
            }
        }
        Kind::Managed if !config().concurrent_managed_access => {
            let storage = Storage::managed_without_concurrent_access(new.size)?;
            (host_address(&storage), storage, 0)
        }
        Kind::PinnedHost | Kind::Managed => {
            let storage = Storage::host(new.size)?;
            (host_address(&storage), storage, 0)
        }
    };
    let record = Arc::new(Record {
        start,
        size: new.size,
        kind: new.kind,
        context: owning_context(new.origin, new.context),
        ordinal: new.context.ordinal,
        host_flags: new.host_flags,
        origin: new.origin,
        id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
        state: RwLock::new(new.state),
        pending: AtomicUsize::new(0),
        synchronous: Mutex::new(0),
        synchronous_done: Condvar::new(),
        free_requested: AtomicBool::new(false),
        accounted: AtomicUsize::new(accounted),
        storage,
        sync_memops: AtomicBool::new(false),
        handed_on: AtomicBool::new(false),
        hints: Mutex::new(RangeHints::default()),
    });
    REGISTRY.write().insert(start, Arc::clone(&record));
    Ok(record)
}

/// CUDA Programming Guide, "Stream Ordered Memory Allocator", "Pointer Attributes": "Since stream
/// ordered allocations are not context associated, querying CU_POINTER_ATTRIBUTE_CONTEXT will
/// succeed but return NULL in *data." Every other allocation belongs to its context.
fn owning_context(origin: Origin, context: &'static Context) -> Option<&'static Context> {
    (!matches!(origin, Origin::Pooled(_))).then_some(context)
}

fn host_address(storage: &Storage) -> u64 {
    storage.host_address().expect("host memory has a host view") as u64
}

/// A new owner for `previous`'s block (the pool's immediate reuse): same addresses, same bytes,
/// not usable before its stream reaches the allocation. Ops enqueued from now on find it.
pub(crate) fn reassign(previous: &Record, size: usize) -> Arc<Record> {
    previous.handed_on.store(true, Ordering::Release);
    let record = Arc::new(Record {
        start: previous.start,
        size,
        kind: previous.kind,
        context: None,
        ordinal: previous.ordinal,
        host_flags: 0,
        origin: previous.origin,
        id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
        state: RwLock::new(State::AllocationPending),
        pending: AtomicUsize::new(0),
        synchronous: Mutex::new(0),
        synchronous_done: Condvar::new(),
        free_requested: AtomicBool::new(false),
        accounted: AtomicUsize::new(previous.accounted.swap(0, Ordering::AcqRel)),
        storage: Arc::clone(&previous.storage),
        sync_memops: AtomicBool::new(false),
        handed_on: AtomicBool::new(false),
        hints: Mutex::new(RangeHints::default()),
    });
    REGISTRY.write().insert(record.start, Arc::clone(&record));
    record
}

/// Maps `size` bytes of another process's device memory, held in `file`, at fresh device
/// addresses of `context`. They count against the exporter's device memory, not this one's.
pub(crate) fn import(
    file: &File,
    size: usize,
    context: &'static Context,
) -> DriverResult<Arc<Record>> {
    let start = reserve_device_addresses(size)?;
    let record = Arc::new(Record {
        start,
        size,
        kind: Kind::Device,
        context: Some(context),
        ordinal: context.ordinal,
        host_flags: 0,
        origin: Origin::Imported,
        id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
        state: RwLock::new(State::Live),
        pending: AtomicUsize::new(0),
        synchronous: Mutex::new(0),
        synchronous_done: Condvar::new(),
        free_requested: AtomicBool::new(false),
        accounted: AtomicUsize::new(0),
        storage: Storage::imported(file, size)?,
        sync_memops: AtomicBool::new(false),
        handed_on: AtomicBool::new(false),
        hints: Mutex::new(RangeHints::default()),
    });
    REGISTRY.write().insert(start, Arc::clone(&record));
    Ok(record)
}

/// Registers `size` bytes of the program's host memory at `address` as pinned memory of
/// `context`; CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED when part of it is already known.
pub(crate) fn register(
    address: u64,
    size: usize,
    context: &'static Context,
    flags: u32,
) -> DriverResult<Arc<Record>> {
    let end = address
        .checked_add(size as u64)
        .ok_or(CUresult::CUDA_ERROR_INVALID_VALUE)?;
    let mut registry = REGISTRY.write();
    let overlaps = registry
        .range(..end)
        .next_back()
        .is_some_and(|(_, record)| record.end() > address);
    if overlaps {
        return Err(CUresult::CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED);
    }
    let record = Arc::new(Record {
        start: address,
        size,
        kind: Kind::PinnedHost,
        context: Some(context),
        ordinal: context.ordinal,
        host_flags: flags,
        origin: Origin::Registered,
        id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
        state: RwLock::new(State::Live),
        pending: AtomicUsize::new(0),
        synchronous: Mutex::new(0),
        synchronous_done: Condvar::new(),
        free_requested: AtomicBool::new(false),
        accounted: AtomicUsize::new(0),
        storage: Storage::registered(address as usize, size),
        sync_memops: AtomicBool::new(false),
        handed_on: AtomicBool::new(false),
        hints: Mutex::new(RangeHints::default()),
    });
    registry.insert(address, Arc::clone(&record));
    Ok(record)
}

/// The allocation `address` lies in, if the driver knows one (including one whose
/// stream-ordered free has not been reached yet).
pub(crate) fn find(address: u64) -> Option<Arc<Record>> {
    let registry = REGISTRY.read();
    let (_, record) = registry.range(..=address).next_back()?;
    (address < record.end()).then(|| Arc::clone(record))
}

/// Frees `record` now. `operation` names the call for the fault report, `context` the context
/// the call was made in (where a fault is recorded).
///
/// A free while stream work on the range is still queued is reported as a fault. The driver
/// documents `cuMemFree`, `cuMemFreeHost` and the managed free as synchronizing only "for most use
/// cases", so a correct program must not rely on them to wait for pending work; on a GPU such a
/// free is a use-after-free that corrupts memory only sometimes. Being strict makes it fail always.
pub(crate) fn free_now(record: &Arc<Record>, operation: &str, context: &Context) -> DriverResult {
    if record.free_requested.swap(true, Ordering::AcqRel) {
        return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
    }
    release(record, operation, context)
}

/// Releases `record` (a free reached, synchronous or in stream order, in `context`), reporting a
/// fault there when stream operations on it are still pending.
pub(crate) fn release(record: &Arc<Record>, operation: &str, context: &Context) -> DriverResult {
    let pending = record.pending.load(Ordering::Acquire);
    if pending > 0 {
        context.fault(
            operation,
            &format!(
                "freed {:#x} ({} bytes) while {pending} stream operation(s) on it had not completed",
                record.start, record.size
            ),
        );
    }
    let mut state = record.state.write();
    if *state == State::Freed {
        return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
    }
    *state = State::Freed;
    record.storage.revoke();
    let accounted = record.accounted.swap(0, Ordering::AcqRel);
    device_memory_used()[record.ordinal].fetch_sub(accounted, Ordering::AcqRel);
    // A pool keeps what is freed from it reserved, unless the block already went to another
    // allocation (immediate reuse).
    if let Origin::Pooled(pool) = record.origin
        && !record.handed_on.load(Ordering::Acquire)
    {
        change_pool_bytes_kept(pool, |kept| kept + record.size as u64);
    }
    drop(state);
    let mut registry = REGISTRY.write();
    if registry
        .get(&record.start)
        .is_some_and(|registered| Arc::ptr_eq(registered, record))
    {
        registry.remove(&record.start);
    }
    if pending > 0 {
        return Err(CUresult::CUDA_ERROR_ILLEGAL_ADDRESS);
    }
    Ok(())
}

/// Frees every allocation of a context that is being destroyed. Stream-ordered allocations stay:
/// cuCtxDestroy "will not destroy memory allocations by cuMemCreate(), cuMemAllocAsync() and
/// cuMemAllocFromPoolAsync(). These memory allocations are not associated with any CUDA context
/// and need to be destroyed explicitly." (driver API reference, cuCtxDestroy).
pub(crate) fn release_context_memory(context: &Context) {
    let owned: Vec<Arc<Record>> = REGISTRY
        .read()
        .values()
        .filter(|record| record.context.is_some_and(|own| std::ptr::eq(own, context)))
        .cloned()
        .collect();
    for record in owned {
        // The context's streams are drained by now; a fault here is the program's.
        record.free_requested.store(true, Ordering::Release);
        let _ = release(&record, "context destruction", context);
    }
}

/// Bytes of allocations of pool `pool` (its handle) whose free has not been reached.
pub(crate) fn pool_bytes_in_use(pool: usize) -> u64 {
    REGISTRY
        .read()
        .values()
        .filter(|record| record.origin == Origin::Pooled(pool))
        .map(|record| record.size as u64)
        .sum()
}
