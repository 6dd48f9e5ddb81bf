//! # devbuf CUDA test driver
//!
//! A test double of the NVIDIA CUDA driver library, `libcuda.so.1`, for running devbuf's CUDA
//! backend (and Numba's `__cuda_array_interface__` consumer) in CI on machines without a GPU.
//! `ci/cuda-test-driver` builds it into `target/cuda-test-driver/libcuda.so.1`; a test puts that
//! directory on `LD_LIBRARY_PATH`. Nothing loads it by itself, it is never shipped, and it names
//! itself: every device is called "devbuf CUDA test driver (device N)", and every message it
//! prints starts with "devbuf CUDA test driver" (its error strings are the driver's own words,
//! which NVIDIA's tests compare).
//!
//! It exports the driver's C entry points under their real names and ABIs (the versioned names,
//! e.g. `cuMemAlloc_v2`, and the plain names where the real library exports the same ABI under
//! them) and keeps the driver's documented rules, each broken one answered with the real code:
//!
//! - nothing but `cuInit`, `cuDriverGetVersion`, `cuGetErrorString`/`Name` and
//!   `cuGetProcAddress` works before `cuInit` (CUDA_ERROR_NOT_INITIALIZED), nothing at all from a
//!   host function or stream callback (CUDA_ERROR_NOT_PERMITTED), and host functions and
//!   callbacks run one at a time, whichever streams they are on ("may be serialized"); every
//!   `CUresult` of CUDA 13 has a name and a description;
//! - `cuGetProcAddress` as documented: the versioned variant for the CUDA version asked for, a
//!   NULL function with CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND for names the double does not
//!   implement (kernels, graphs, ...) and with CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT for a
//!   version older than the name, CUDA_ERROR_INVALID_VALUE for a version above the driver's, and
//!   with CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM the `_ptsz`/`_ptds` variants (exported
//!   too), in which stream 0 is the calling thread's per-thread default stream;
//! - devices with names, compute capability 9.0, unified addressing, managed memory, concurrent
//!   managed access, memory pools, stream priorities [-5, 0], total memory
//!   (CUDA_ERROR_INVALID_DEVICE for bad ordinals), narrowed and ordered by `CUDA_VISIBLE_DEVICES`
//!   (indices or UUIDs, whole or abbreviated) when `cuInit` runs; each device's UUID
//!   (`cuDeviceGetUuid`) is the machine's device's, whatever its ordinal in the process;
//! - peer access: every two devices are peers (`cuDeviceCanAccessPeer`) unless
//!   `DEVBUF_CUDA_TEST_NO_PEER_ACCESS` says otherwise; `cuCtxEnablePeerAccess` and
//!   `cuCtxDisablePeerAccess` with their documented codes; a pool's memory reached by another
//!   device's stream through a plain copy only once `cuMemPoolSetAccess` gave that device access
//!   (else CUDA_ERROR_INVALID_VALUE, as NVIDIA's cuda.core `test_peer_access_basic` expects), and
//!   through a peer copy (`cuMemcpyPeer(Async)`) without it, as the Programming Guide's
//!   stream-ordered allocator chapter describes (the driver stages such copies through the host);
//!   `cuMemcpyPeer` serialized with the legacy streams of the contexts involved, as synchronous
//!   copies between devices are, and `cuMemcpyPeerAsync` ordered on its stream alone;
//! - reference-counted primary contexts (retain, release, reset, state, flags), destroyed with all
//!   their streams, events and memory when the last retain goes; contexts of their own
//!   (`cuCtxCreate_v2`/`_v3`/`_v4`, current on creation, and `cuCtxDestroy`) with the documented
//!   flags and one scheduling flag at most, `CU_CTX_SYNC_MEMOPS` honoured; context ids; a
//!   per-thread context stack; calls
//!   that need a context fail with CUDA_ERROR_INVALID_CONTEXT without one (and with
//!   CUDA_ERROR_CONTEXT_IS_DESTROYED in a released one);
//! - device memory the host cannot touch (addresses in a `PROT_NONE` reservation: a host
//!   dereference segfaults), never reused (use-after-free is caught); pinned host and managed
//!   memory that the host can touch, inaccessible after the free; host memory the program
//!   registers (`cuMemHostRegister`) is pinned memory until unregistered; fresh device, pinned
//!   and managed memory holds 0xFF bytes, never zeros; double frees and foreign pointers are
//!   CUDA_ERROR_INVALID_VALUE; pointer attributes as documented, `CU_POINTER_ATTRIBUTE_SYNC_MEMOPS`
//!   settable and honoured; `cuMemPrefetchAsync` and `cuMemAdvise` take managed memory only, and
//!   `cuMemRangeGetAttribute(s)` reads back, page by page, the advice given and the last location
//!   asked for; CUDA 13's batched prefetches and discards (discarded memory reads as poison);
//! - asynchronous streams (one worker thread each), the legacy default stream's synchronization
//!   with blocking streams, the per-thread default stream, non-blocking streams, events and
//!   `cuStreamWaitEvent` across streams and devices (`cuEventElapsedTime` of events of two devices
//!   is CUDA_ERROR_INVALID_HANDLE), a destroyed stream whose queued work still runs and still
//!   counts for `cuCtxSynchronize` and the legacy stream, and the documented host synchronization of
//!   copies and fills with pageable, pinned, managed and device memory ("API synchronization
//!   behavior": a synchronous copy from pageable memory syncs its stream first, copies between
//!   host memory are fully synchronous); stream priorities, ids and devices;
//! - stream-ordered allocation from each device's current pool (its default pool, or one from
//!   `cuMemPoolCreate`), or a pool named (`cuMemAllocFromPoolAsync`): memory usable only by work
//!   ordered after the allocation, freed when the stream reaches `cuMemFreeAsync`; it belongs to
//!   its device, not to a context (CU_POINTER_ATTRIBUTE_CONTEXT is NULL) and outlives
//!   `cuCtxDestroy`; a size of 0 gives NULL; pool statistics (used and reserved memory, their high
//!   watermarks); freed memory the pool keeps reserved, and reuses, until a stream, event or
//!   context synchronization releases what lies above its release threshold (`cuMemPoolTrimTo`
//!   trims it); managed memory pools (CUDA 13: default and created ones, per preferred
//!   location, where every device has concurrent managed access);
//! - CUDA IPC of `cuMemAlloc`'s memory (`cuIpcGetMemHandle`, `cuIpcOpenMemHandle(_v2)`,
//!   `cuIpcCloseMemHandle`): other memory has no handle (CUDA_ERROR_INVALID_VALUE), an interior
//!   pointer gets its allocation's handle, a handle does not open in the exporting process
//!   (CUDA_ERROR_INVALID_CONTEXT), the flags must be `CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS`, opens
//!   in a context are counted (same pointer) and the last close unmaps; the handle names the
//!   machine's device, and opens in a context of another device only where the two are peers
//!   (CUDA_ERROR_MAP_FAILED), and in one context per device of the importer at a time
//!   (CUDA_ERROR_INVALID_CONTEXT); the opened mapping is device
//!   memory of the importer's context over the same bytes (a memfd the importer reaches through
//!   `/proc/<pid>/fd`), so each process sees the other's copies and fills once their streams
//!   ran them; once the exporter freed the memory or exited, the handle is CUDA_ERROR_INVALID_VALUE
//!   (the double's choice among the documented codes: which one the driver gives is not
//!   documented);
//! - faults: a copy or fill that, when it runs, touches memory that is not allocated (freed, or
//!   not yet allocated in stream order), and a free while work on the range is still queued, are an
//!   illegal address: one line on stderr, and CUDA_ERROR_ILLEGAL_ADDRESS from every later call in
//!   that context (a sticky error, as after a GPU fault). `cuMemFree` of memory other than the
//!   stream-ordered allocator's first waits for what synchronous calls left running on it ("may
//!   perform implicit synchronization"; a synchronous copy from pageable memory returns before
//!   the DMA has completed); work enqueued asynchronously is not waited for.
//!
//! ## Environment variables (read once per process)
//!
//! | variable | effect |
//! |---|---|
//! | `DEVBUF_CUDA_TEST_DEVICES=N` | N devices (default 2; 0 makes `cuInit` fail with CUDA_ERROR_NO_DEVICE) |
//! | `DEVBUF_CUDA_TEST_DELAY_US=N` | each copy and fill waits N µs on its stream before it runs |
//! | `DEVBUF_CUDA_TEST_TOTAL_MEMORY_MB=N` | each device's memory (default 16384) |
//! | `DEVBUF_CUDA_TEST_DRIVER_VERSION=N` | what `cuDriverGetVersion` answers (default 13000) |
//! | `DEVBUF_CUDA_TEST_INIT_ERROR=CODE` | `cuInit` fails with CODE (a name such as `NO_DEVICE` or a number) |
//! | `DEVBUF_CUDA_TEST_FAIL_ALLOCATIONS=N,M:CODE` | the Nth and Mth allocation calls of the process (any kind) fail, with CUDA_ERROR_OUT_OF_MEMORY or the CODE named (e.g. `NOT_SUPPORTED`, as some virtualized devices answer `cuMemAllocAsync` although their pool attribute reads 1) |
//! | `DEVBUF_CUDA_TEST_UNAVAILABLE_DEVICES=0,1` | retaining these devices' primary contexts fails with CUDA_ERROR_DEVICE_UNAVAILABLE |
//! | `DEVBUF_CUDA_TEST_CONCURRENT_MANAGED_ACCESS=0` | the device attribute reads 0, and the host faults when it touches managed memory while stream work on it is pending; managed pools and batched prefetches are CUDA_ERROR_NOT_SUPPORTED, and no device takes a prefetch or a device hint (CUDA_ERROR_INVALID_DEVICE) |
//! | `DEVBUF_CUDA_TEST_MEMORY_POOLS=0` | no memory pools: the attribute reads 0, `cuMemAllocAsync` is CUDA_ERROR_NOT_SUPPORTED |
//! | `DEVBUF_CUDA_TEST_POOL_REUSE=immediate` | `cuMemAllocAsync` gets the block freed last by `cuMemFreeAsync` at once, ordered after that free |
//! | `DEVBUF_CUDA_TEST_HIDE=cuA,cuB` | `cuGetProcAddress` says these are missing (a NULL function, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND), as an older driver would; `dlsym` still finds them |
//! | `DEVBUF_CUDA_TEST_COUNT_CALLS=1` | every entry point the process calls is counted by name (the base name; failed calls too; any other value leaves counting off); `devbufTestDriverCallCounts(char *buffer, size_t capacity)`, the double's own export, writes the counts as `name count` lines and returns their length (-1 with the knob off): what `tests/python/test_cuda_driver_calls.py` holds the hot paths' budgets with |
//! | `DEVBUF_CUDA_TEST_TRACE=1` | a stderr line for every name `cuGetProcAddress` does not find |
//! | `DEVBUF_CUDA_TEST_NO_PEER_ACCESS=0-1,2-3` | these pairs of the machine's devices are not peers (`cuDeviceCanAccessPeer` answers 0); all others are |
//! | `CUDA_VISIBLE_DEVICES=2,0` | read by `cuInit`, as the driver does: the devices the indices or UUIDs (`GPU-…`, or a unique prefix) name, in that order, up to the first invalid one |
//!
//! A malformed value makes `cuInit` fail with CUDA_ERROR_INVALID_VALUE and say why on stderr.
//!
//! ## Not modelled
//!
//! Kernels, modules and linking (`cuModule*`, `cuLibrary*`, `cuLaunchKernel`, ...), graphs and
//! stream capture (`cuStreamIsCapturing` always answers "none"), IPC events
//! (`cuIpcGetEventHandle`, `cuIpcOpenEventHandle`), what enabled peer access changes (only kernels
//! would see it: copies between devices work through unified addressing with or without it),
//! `cuDeviceGetP2PAttribute`, read-only pool access, MIG identifiers in `CUDA_VISIBLE_DEVICES`,
//! execution affinity and CIG contexts (CUDA_ERROR_NOT_SUPPORTED), green
//! contexts, CUDA arrays, textures and surfaces, checkpointing, coredump attributes, 3-D and
//! batch copies, the synchronous 2-D copies (`cuMemcpy2D`, `cuMemcpy2DUnaligned`; `cuMemcpy2DAsync`
//! is modelled, with the worst case its documentation allows, in `transfer_2d`), virtual memory management (`cuMemCreate`, `cuMemMap`, ...), exportable and host
//! memory pools (CUDA_ERROR_NOT_SUPPORTED), which addresses a pool's kept memory is reused at (a
//! new allocation gets fresh addresses; only the figures show the reuse), the implicit
//! synchronization `cuMemFree` and `cuMemFreeHost` "may perform" (a GPU's driver waits there for
//! the device's work, other streams' included, and other threads' calls may wait meanwhile; the
//! double waits for nothing but earlier synchronous calls on the memory), stream priorities'
//! effect (kept, not acted on, which the documentation allows), reuse of freed pinned host and
//! managed memory's addresses (each stays reserved, one mapping of the process's; after some
//! 65,000 such allocations a process reaches the kernel's `vm.max_map_count` and every allocation
//! is CUDA_ERROR_OUT_OF_MEMORY: long runs use fresh processes), and the pre-3.2 32-bit ABIs of the plain names `cuMemAlloc`,
//! `cuMemcpyHtoD`, ... (not exported, so a program built against them fails to load instead of
//! corrupting memory). `cuGetProcAddress` does not find any of these. With `DEVBUF_CUDA_TEST_CONCURRENT_MANAGED_ACCESS=0`, a managed
//! allocation is host-inaccessible while stream work on *it* is pending; a real device without
//! concurrent access forbids host access to all managed memory while any work runs. Of IPC: the
//! peer access a handle opened on another device enables lazily is not recorded (only kernels
//! would see it); an exporter's free while another process has the
//! memory open is not detected (the importer keeps the pages, where a GPU would give undefined
//! results); `cuIpcOpenMemHandle` behaves as `_v2`; exporting copies the allocation's bytes into
//! the shared file once, which takes a while for a large allocation; the importer must be allowed
//! to open the exporter's `/proc/<pid>/fd/<fd>` (the same user, a dumpable process).

// The driver's own names and argument conventions.
#![allow(non_snake_case)]

mod alloc;
mod calls;
mod config;
mod context;
mod context_api;
mod context_teardown;
mod device;
mod errors;
mod event;
mod ipc;
mod location;
mod managed;
mod managed_batch;
mod managed_hints;
mod memory;
mod ops;
mod peer;
mod pointer;
mod pool;
mod pool_attributes;
mod proc_address;
mod storage;
mod stream;
mod stream_api;
mod stream_ordered;
mod transfer;
mod transfer_2d;
