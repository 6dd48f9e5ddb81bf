"""A stateful property test of the ordering invariant (issues 33 and 44): hypothesis draws sequences
over devbuf's whole memory API -- allocations (alloc, streams, every memory resource and adaptor,
the creation functions, `with stream:`, `Buffer.from_handle` with deleters and owners, imports of
other libraries' memory), views of memory and the memory they view, exports (every protocol, every
stream argument) followed by a consumer's write where that protocol tells it to write, devbuf's own
writes and copies (peer copies between the CUDA test driver's two devices included), devbuf's reads,
prefetches, streams that die, frees (`close`, `deallocate(stream=)` on every resource, the CuPy,
PyTorch and Numba allocator entry points) and reuse by a later owner -- and checks every byte read
against a model of what the last writer wrote.

Consumers write asynchronously and late (ordering_consumers.py): on the SYCL CPU runtime dpnp and
dpnp.tensor behind long copies on the queue the export names; on the CUDA test driver behind
queued operations, with its per-operation delay on. A read that is not ordered after a consumer's
write sees the old bytes.

    python ordering_machine.py sycl|cuda EXAMPLES STEPS [random]

(`random`: a different draw each run, as ci/soak does; else the same sequences every run.)
test_ordering_machine.py runs the short profile (ci/test), ci/soak the long one, and
test_ordering_coverage.py checks that RULE_CALLS names every public call that touches memory."""

import collections
import ctypes
import functools
import io
import os
import pickle
import sys
import tempfile

import numpy as np
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, consumes, initialize, precondition, rule

import devbuf
import devbuf.mr as mr
from ordering_consumers import Cuda, Sycl

VALUES = st.integers(1, 250)
STREAMS = st.integers(0, 3)  # an index into the backend's streams of a device, modulo their number
SOME_STREAM = st.one_of(st.none(), STREAMS)
PROTOCOLS = [*Cuda.protocols, *Sycl.protocols]

# The public calls (as the stubs and devbuf.mr / devbuf.allocators name them) each rule makes;
# test_ordering_coverage.py fails when a call that reads, writes, frees or exports memory is in no
# rule's row.
RULE_CALLS = {
    "allocate": {
        "alloc", "Stream.alloc", "empty", "zeros", "full", "Stream.__enter__", "Stream.__exit__",
        "Device.__enter__", "Device.__exit__", "Buffer.fill", "Array.copy_from",
        "set_current_device_resource", "get_current_device_resource", "reset_current_device_resource",
        "QueueMemoryResource.__new__", "PoolMemoryResource.__new__", "BinningMemoryResource.__new__",
        "BinningMemoryResource.add_bin", "FixedSizeMemoryResource.__new__", "LimitingResourceAdaptor.__new__",
        "StatisticsResourceAdaptor.__new__", "TrackingResourceAdaptor.__new__", "LoggingResourceAdaptor.__new__",
        "FailureCallbackResourceAdaptor.__new__", "PrefetchResourceAdaptor.__new__", "MemoryResource.__init__",
        "MemoryResource.allocate", "MemoryResource.deallocate",
    },
    "allocate_like": {"empty_like", "zeros_like", "Array.copy_from"},
    "take_view": {
        "Buffer.__getitem__", "Array.__getitem__", "Buffer.view", "Array.reshape", "Array.buffer",
        "asarray", "from_dlpack",
    },
    "consumer_writes": {
        "Array.__cuda_array_interface__", "set_cai_export_stream", "Array.__dlpack__", "Array.__dlpack_device__",
        "Array.__dlpack_c_exchange_api__", "Array.__c_dlpack_exchange_api__", "Array.__sycl_usm_array_interface__",
        "Array.__usm_ndarray__", "Array.sycl_queue", "Array.usm_type",
    },
    "devbuf_writes": {"Buffer.fill", "Array.copy_from", "Stream.__enter__", "Stream.__exit__"},
    "devbuf_copies": {"Array.copy_from"},
    "devbuf_reads": {
        "Array.to_bytes", "Array.__array__", "Array.get", "Array.copy_to_host", "Array.copy", "Array.to_device",
        "Array.reshape", "Array.T", "Array.transpose", "Array.__getitem__", "Array.__reduce_ex__", "asarray",
        "from_dlpack", "Array.__cuda_array_interface__", "Array.__sycl_usm_array_interface__", "empty_like",
        "Array.copy_from", "Stream.__enter__", "Stream.__exit__", "Buffer.ipc_handle", "IpcHandle.__bytes__",
        "open_ipc",
    },
    "stream_waits": {
        "Stream.synchronize", "Stream.record", "Stream.wait", "Stream.query", "Event.synchronize", "Event.wait",
        "Event.query", "Event.done", "Buffer.synchronize", "Device.sync", "Device.synchronize",
    },
    "prefetch": {"Buffer.prefetch", "Buffer.advise", "Array.buffer"},
    "free_and_reuse": {"Array.close", "Array.__enter__", "Array.__exit__", "alloc", "Buffer.fill"},
    "deallocate_on_stream": {
        "MemoryResource.allocate", "MemoryResource.deallocate", "PoolMemoryResource.release", "replay",
        "LoggingResourceAdaptor.flush",
    },
    "from_handle": {"Buffer.from_handle", "MemoryResource.allocate", "MemoryResource.deallocate", "Buffer.fill"},
    "import_foreign": {"asarray", "from_dlpack"},
    "stream_dies": {"Stream.from_handle", "Stream.close", "Stream.alloc", "Buffer.fill", "Array.__dlpack__"},
    "torch_entry_points": {"allocators.torch.devbuf_torch_allocator", "set_current_device_resource",
                           "reset_current_device_resource"},
    "cupy_entry_point": {"allocators.cupy.devbuf_cupy_allocator", "set_current_device_resource",
                         "reset_current_device_resource"},
    "numba_entry_point": {"allocators.numba.DevbufNumbaManager.memalloc",
                          "allocators.numba.DevbufNumbaManager.get_ipc_handle", "set_current_device_resource",
                          "reset_current_device_resource"},
}


def open_stream(stream):
    """Whether `stream` may still be used (it may have been closed since it wrote)."""
    try:
        stream.query()
        return True
    except ValueError:
        return False


def uniform(value, nbytes):
    return bytes([value]) * nbytes


def host_pattern(obj, value):
    """`value` in every byte, in `obj`'s dtype and shape (what copy_from takes into it)."""
    return np.frombuffer(uniform(value, obj.nbytes), obj.dtype).reshape(obj.shape)


def flat(obj):
    return obj if obj.ndim == 1 else obj.reshape(-1)


class Block:
    """One allocation's bytes as the model says they are, and how a later owner gets memory from
    where this allocation goes back when it is freed."""

    def __init__(self, obj, again, ipc=False):
        self.base, self.kind, self.device = obj.ptr, obj.kind, obj.device
        self.model = np.zeros(obj.nbytes, np.uint8)
        self.again, self.ipc = again, ipc


class Held:
    """A devbuf object over (part of) a block, and the devbuf stream of its last unfinished write
    (None: none, or a stream devbuf does not own)."""

    def __init__(self, obj, block, keep=None):
        self.obj, self.block, self.keep = obj, block, keep
        self.start, self.nbytes = obj.ptr - block.base, obj.nbytes
        self.writer = None
        self.closed_stream = False  # allocated on a stream since closed

    @property
    def expected(self):
        return self.block.model[self.start:self.start + self.nbytes]

    def wrote(self, value, writer=None):
        self.block.model[self.start:self.start + self.nbytes] = value
        self.writer = writer

    def __repr__(self):
        return (f"<{type(self.obj).__name__} {self.block.kind} {self.nbytes} B at +{self.start} of "
                f"{self.block.device.selector} block {id(self.block) % 10007}>")


class Forwarding(mr.MemoryResource):
    """A resource written in Python over another, as a user writes one."""

    def __init__(self, upstream):
        super().__init__(upstream_mr=upstream)

    def allocate(self, nbytes, kind="shared", *, stream=None):
        return self.upstream_mr.allocate(nbytes, kind, stream=stream)

    def deallocate(self, ptr, nbytes, kind="shared", *, stream=None):
        self.upstream_mr.deallocate(ptr, nbytes, kind, stream=stream)


class Owner:
    """What `Buffer.from_handle(owner=)` keeps alive: gives the memory back when it goes."""

    def __init__(self, resource, ptr, nbytes, kind):
        self.give_back = functools.partial(resource.deallocate, ptr, nbytes, kind)

    def __del__(self):
        self.give_back()


def one_block_pool(queue, kind, nbytes):
    """A pool at its maximum with one block of `nbytes` (the smallest such pool the pool's own
    rounding allows)."""
    for size in (nbytes, nbytes + nbytes // 8, nbytes + nbytes // 4, 2 * nbytes - 1):
        pool = mr.PoolMemoryResource(queue, size, size, kind=kind)
        try:
            pool.deallocate(pool.allocate(nbytes, kind), nbytes, kind)
            return pool
        except MemoryError:
            continue
    raise AssertionError(f"no one-block pool of {kind} memory holds {nbytes} bytes")


def make_resources(device, nbytes, kinds, directory):
    """Every resource and adaptor of devbuf.mr over `device`'s queue, by name; a one-block pool
    per kind under "one-block pool <kind>"."""
    queue = mr.QueueMemoryResource(device)
    binning = mr.BinningMemoryResource(queue)
    binning.add_bin(nbytes)  # a FixedSizeMemoryResource bin made by the binning resource
    explicit = mr.BinningMemoryResource(queue)
    explicit.add_bin(nbytes, mr.FixedSizeMemoryResource(queue, nbytes, 2))
    resources = {
        "QueueMemoryResource": queue,
        "PoolMemoryResource": mr.PoolMemoryResource(queue),
        "BinningMemoryResource": binning,
        "BinningMemoryResource with a FixedSizeMemoryResource bin": explicit,
        "FixedSizeMemoryResource": mr.FixedSizeMemoryResource(queue, nbytes, 2),
        "LimitingResourceAdaptor": mr.LimitingResourceAdaptor(queue, 1 << 36),
        "StatisticsResourceAdaptor": mr.StatisticsResourceAdaptor(queue),
        "TrackingResourceAdaptor": mr.TrackingResourceAdaptor(queue),
        "LoggingResourceAdaptor": mr.LoggingResourceAdaptor(queue, io.StringIO()),
        "FailureCallbackResourceAdaptor": mr.FailureCallbackResourceAdaptor(queue, lambda _nbytes: False),
        "PrefetchResourceAdaptor": mr.PrefetchResourceAdaptor(queue),
        "MemoryResource in Python": Forwarding(queue),
        "StatisticsResourceAdaptor over a PoolMemoryResource": mr.StatisticsResourceAdaptor(mr.PoolMemoryResource(queue)),
    }
    for kind in kinds:
        resources[f"one-block pool {kind}"] = one_block_pool(queue, kind, nbytes)
    # A short allocation log for `replay` (a pool's pending block then meets the replay's requests).
    log = os.path.join(directory, "replay.log")
    logging = mr.LoggingResourceAdaptor(queue, log)
    for _ in range(2):
        logging.deallocate(logging.allocate(nbytes, kinds[0]), nbytes, kinds[0])
    logging.flush()
    return resources, log


RESOURCES = st.sampled_from([
    "QueueMemoryResource", "PoolMemoryResource", "BinningMemoryResource",
    "BinningMemoryResource with a FixedSizeMemoryResource bin", "FixedSizeMemoryResource",
    "LimitingResourceAdaptor", "StatisticsResourceAdaptor", "TrackingResourceAdaptor", "LoggingResourceAdaptor",
    "FailureCallbackResourceAdaptor", "PrefetchResourceAdaptor", "MemoryResource in Python",
    "StatisticsResourceAdaptor over a PoolMemoryResource", "one-block pool",
])


STEPS_RUN = collections.Counter()
FIRST_FAILURE = []
# DEVBUF_ORDERING_TRACE=FILE: every step as it starts (for a sequence that hangs).
TRACE = open(os.environ["DEVBUF_ORDERING_TRACE"], "w") if os.environ.get("DEVBUF_ORDERING_TRACE") else None


def step(function):
    """Logs each step; when the CUDA test driver's context is lost (a sticky error, as on a GPU: no
    later sequence can run in this process, so hypothesis cannot shrink), prints the sequence that
    lost it and ends the process."""

    @functools.wraps(function)
    def logged(self, **arguments):
        STEPS_RUN[function.__name__] += 1
        self.log.append(f"{function.__name__}({', '.join(f'{k}={v!r}' for k, v in arguments.items())})")
        if TRACE:
            print(f"{len(self.log)}:", self.log[-1], file=TRACE, flush=True)
        try:
            return function(self, **arguments)
        except Exception as err:
            if self.backend.context_lost(err):
                print("The CUDA test driver's context is lost (a sticky error, as on a GPU); the sequence that lost it:",
                      *self.log, f"{type(err).__name__}: {err}", sep="\n    ", flush=True)
                os._exit(3)
            if not FIRST_FAILURE:
                # The first failure as drawn: a rerun may not fail the same way, since devbuf's
                # pools and the runtimes keep state between sequences (hypothesis then reports
                # "inconsistent data generation" or a shorter sequence).
                FIRST_FAILURE.append(self.log)
                print("The first failing sequence, as drawn:", *self.log, f"{type(err).__name__}: {err}",
                      sep="\n    ", file=sys.stderr, flush=True)
            raise

    return logged


class Machine(RuleBasedStateMachine):
    backend = None  # set by `run`
    resources = None
    replay_log = None
    memories = Bundle("memories")

    @initialize()
    def start(self):
        self.log = []
        if TRACE:
            print("-- a new sequence", file=TRACE, flush=True)

    # -- helpers ---------------------------------------------------------------------------------

    def device(self, index):
        devices = self.backend.devices
        return devices[index % len(devices)]

    def stream_on(self, device, index):
        if index is None:
            return None
        streams = self.backend.streams[device]
        return streams[index % len(streams)]

    def kind(self, kind):
        return kind if kind in self.backend.kinds else self.backend.kinds[0]

    def resource(self, name, kind, held=True):
        """The resource `name` draws; a one-block pool only where its block is not held beyond the
        step (elsewhere a second holder would exhaust it: a MemoryError the machine does not test)."""
        if name == "one-block pool":
            return self.resources[f"{name} {kind}" if not held else "PoolMemoryResource"]
        return self.resources[name]

    def check(self, held, seen, how, expected=None):
        want = (held.expected if expected is None else expected).tobytes()
        if seen != want:
            wrong = np.flatnonzero(np.frombuffer(seen, np.uint8) != np.frombuffer(want, np.uint8))
            raise AssertionError(
                f"{how} of {held!r} read {sorted(set(seen))[:4]} where the last writers wrote "
                f"{sorted(set(want))[:4]} ({wrong.size} bytes differ, the first at {wrong[0]})"
            )

    def later_owner(self, resource, kind, value, stream=None):
        """A later owner of memory from `resource` (allocated for `stream`) writes `value` once the
        allocation is complete on that stream, then reads it once every queue's work is done (so
        that a write still pending from an earlier owner lands first)."""
        backend, nbytes, device = self.backend, self.backend.nbytes, self.backend.device
        ptr = resource.allocate(nbytes, kind, stream=stream)
        (stream or device.default_stream).synchronize()
        backend.raw_writes(ptr, nbytes, kind, value, device)
        backend.finish_all()
        seen = backend.raw_reads(ptr, nbytes, kind, device)
        resource.deallocate(ptr, nbytes, kind)
        assert seen == uniform(value, nbytes), (
            f"a later owner of {kind} memory from {resource!r} read {sorted(set(seen))[:4]}, not its {value}: "
            "an earlier owner's write landed after the block was handed out again"
        )

    def write_initial(self, held, value, from_host):
        obj = held.obj
        if from_host and obj.kind != "device":
            self.backend.raw_writes(obj.ptr, obj.nbytes, obj.kind, value, obj.device)
        elif isinstance(obj, devbuf.Buffer):
            obj.fill(value)
        else:
            obj.copy_from(host_pattern(obj, value))
        held.wrote(value)
        return held

    # -- allocation --------------------------------------------------------------------------------

    @rule(target=memories, kind=st.sampled_from(["shared", "host", "device"]),
          how=st.sampled_from(["alloc", "alloc(stream=)", "Stream.alloc", "with stream", "mr=", "current resource",
                               "ipc", "empty", "zeros", "full"]),
          stream=STREAMS, value=VALUES, device=st.integers(0, 1), resource=RESOURCES)
    @step
    def allocate(self, kind, how, stream, value, device, resource):
        kind, nbytes = self.kind(kind), self.backend.nbytes
        where = self.device(device)
        on = self.stream_on(where, stream)
        if how in ("mr=", "current resource"):
            where = self.backend.device  # the resources are the first device's
            source = self.resource(resource, kind)
        else:
            source = None
        again = functools.partial(devbuf.alloc, nbytes, kind, device=where, mr=source)
        if how == "alloc":
            obj = devbuf.alloc(nbytes, kind, device=where)
        elif how == "alloc(stream=)":
            obj = devbuf.alloc(nbytes, kind, stream=on)
        elif how == "Stream.alloc":
            obj = on.alloc(nbytes, kind)
        elif how == "with stream":
            with where, on:
                obj = devbuf.alloc(nbytes, kind)
        elif how == "mr=":
            obj = devbuf.alloc(nbytes, kind, device=where, mr=source)
        elif how == "current resource":
            mr.set_current_device_resource(source, kind)
            try:
                assert mr.get_current_device_resource(where, kind) is source
                obj = devbuf.alloc(nbytes, kind, device=where)
            finally:
                mr.reset_current_device_resource(where, kind)
        elif how == "ipc" and self.backend.name == "cuda":  # CUDA IPC shares device memory only
            kind = "device"
            obj = devbuf.alloc(nbytes, kind, device=where, ipc=True)
            again = functools.partial(devbuf.alloc, nbytes, kind, device=where, ipc=True)
        elif how == "zeros":
            obj = devbuf.zeros(nbytes, "uint8", kind=kind, stream=on)
            return Held(obj, Block(obj, again))
        elif how == "full":
            obj = devbuf.full(nbytes, value, "uint8", kind=kind, device=where)
            held = Held(obj, Block(obj, again))
            held.wrote(value)
            return held
        else:
            obj = devbuf.empty(nbytes, "uint8", kind=kind, device=where)
        held = Held(obj, Block(obj, again, ipc=how == "ipc" and self.backend.name == "cuda"))
        # A new owner of a block from a resource writes from the host where it can.
        return self.write_initial(held, value, from_host=source is not None)

    @rule(target=memories, prototype=memories, zeros=st.booleans(), value=VALUES)
    @step
    def allocate_like(self, prototype, zeros, value):
        like = devbuf.zeros_like if zeros else devbuf.empty_like
        # Finding F1 (reported on issue 44): `*_like` of memory whose stream was closed raises
        # "stream ... was closed" though the memory stays usable; name its device until fixed.
        obj = like(prototype.obj, device=prototype.obj.device) if prototype.closed_stream else like(prototype.obj)
        assert (obj.shape, obj.dtype, obj.kind, obj.device) == (
            prototype.obj.shape, prototype.obj.dtype, prototype.obj.kind, prototype.obj.device)
        nbytes, kind, device = obj.nbytes, obj.kind, obj.device
        held = Held(obj, Block(obj, functools.partial(devbuf.alloc, nbytes, kind, device=device)))
        if zeros:
            return held
        return self.write_initial(held, value, from_host=False)

    @rule(target=memories, memory=memories,
          how=st.sampled_from(["slice", "typed", "reshape", "buffer", "asarray", "from_dlpack"]),
          first=st.integers(0, 1 << 20), length=st.integers(1, 1 << 20))
    @step
    def take_view(self, memory, how, first, length):
        """A view of memory, or the memory a view views: both stay in use, and each must see the
        other's writes in order."""
        obj = flat(memory.obj)
        units = obj.nbytes // 4
        first = first % units
        length = 1 + length % (units - first)
        scale = 4 // obj.itemsize  # elements of `obj` per 4 bytes
        part = obj[first * scale:(first + length) * scale]
        if how == "typed" and isinstance(memory.obj, devbuf.Buffer):
            view = memory.obj.view("uint32", length, offset=4 * first)
        elif how == "reshape" and part.size % 2 == 0:
            view = part.reshape(2, -1)
        elif how == "buffer":
            view = memory.obj.buffer
        elif how == "asarray":
            view = devbuf.asarray(memory.obj)
        elif how == "from_dlpack":
            view = devbuf.from_dlpack(memory.obj)
        else:
            view = part
        if view is memory.obj:  # asarray/from_dlpack of devbuf's own array may hand it back itself
            view = part
        assert view.ptr >= memory.block.base
        held = Held(view, memory.block)
        held.closed_stream = memory.closed_stream
        return held

    # -- writes ------------------------------------------------------------------------------------

    @rule(memory=memories, value=VALUES,
          protocol=st.sampled_from(PROTOCOLS), stream=STREAMS)
    @step
    def consumer_writes(self, memory, value, protocol, stream):
        protocols = self.backend.protocols
        if protocol not in protocols:  # another backend's: one of this backend's, the same each time
            protocol = protocols[PROTOCOLS.index(protocol) % len(protocols)]
        on = self.stream_on(memory.obj.device, stream)
        memory.wrote(value, self.backend.consumer_writes(memory.obj, value, protocol, on))

    @rule(memory=memories, value=VALUES, how=st.sampled_from(["fill", "copy_from", "with stream"]),
          stream=SOME_STREAM, blocking=st.booleans())
    @step
    def devbuf_writes(self, memory, value, how, stream, blocking):
        obj = memory.obj
        on = self.stream_on(obj.device, stream)
        if how == "with stream" and on is not None:
            with on:
                if isinstance(obj, devbuf.Buffer):
                    obj.fill(value, blocking=blocking)
                else:
                    obj.copy_from(host_pattern(obj, value), blocking=blocking)
        elif how == "fill" and isinstance(obj, devbuf.Buffer):
            obj.fill(value, stream=on, blocking=blocking)
        else:
            obj.copy_from(host_pattern(obj, value), stream=on, blocking=blocking)
        memory.wrote(value, None if blocking else (on or obj.queue))

    @rule(target_memory=memories, source=memories, stream=SOME_STREAM, blocking=st.booleans())
    @step
    def devbuf_copies(self, target_memory, source, stream, blocking):
        """devbuf copies one memory into another (between the CUDA test driver's devices where
        they differ)."""
        target, origin = target_memory.obj, source.obj
        if target_memory.block is source.block or target.nbytes != origin.nbytes:
            return
        if not isinstance(target, devbuf.Buffer) and (target.shape, target.dtype) != (origin.shape, origin.dtype):
            return
        on = self.stream_on(target.device, stream)
        target.copy_from(origin, stream=on, blocking=blocking)
        target_memory.block.model[target_memory.start:target_memory.start + target.nbytes] = source.expected
        target_memory.writer = None if blocking else (on or target.queue)

    # -- reads -------------------------------------------------------------------------------------

    @rule(memory=memories, stream=STREAMS,
          reader=st.sampled_from(["to_bytes", "to_bytes(stream=)", "host view", "get", "get(out=)", "copy_to_host",
                                  "copy_from", "copy", "to_device", "asarray(copy=True)", "reshape(copy=True)",
                                  "pickle", "re-export", "with stream", "strided", "transposed", "from_dlpack",
                                  "ipc"]))
    @step
    def devbuf_reads(self, memory, reader, stream):
        obj, backend = memory.obj, self.backend
        on = self.stream_on(obj.device, stream)
        other = self.device(obj.device.index + 1) if backend.name == "cuda" else obj.device
        expected = None
        if reader == "to_bytes(stream=)":
            seen = obj.to_bytes(stream=on)
        elif reader == "host view" and obj.kind != "device":
            seen = np.asarray(obj).tobytes()
        elif reader == "get":
            seen = obj.get(stream=on).tobytes()
        elif reader == "get(out=)":
            out = np.empty(obj.shape, obj.dtype)
            obj.get(out=out)
            seen = out.tobytes()
        elif reader == "copy_to_host":
            seen = obj.copy_to_host(stream=on).tobytes()
        elif reader == "copy_from":
            copy = devbuf.empty_like(obj, kind="device", device=other)
            copy.copy_from(obj)
            seen = copy.to_bytes()
        elif reader == "copy":
            seen = obj.copy().to_bytes()
        elif reader == "to_device":
            seen = obj.to_device(other).to_bytes()
        elif reader == "asarray(copy=True)":
            seen = devbuf.asarray(obj, copy=True, device=other).to_bytes()
        elif reader == "reshape(copy=True)":
            seen = obj.reshape(-1, copy=True).to_bytes()
        elif reader == "pickle":
            seen = pickle.loads(pickle.dumps(obj, protocol=5)).to_bytes()
        elif reader == "re-export":
            seen = backend.second_consumer_reads(obj)
        elif reader == "with stream":
            with on:
                seen = obj.get().tobytes()
        elif reader in ("strided", "transposed"):
            # Few runs: devbuf copies a strided view one contiguous run at a time, and the test
            # driver delays each copy.
            elements, model = flat(obj), memory.expected.view(obj.dtype)
            if reader == "strided" and elements.size % 16 == 0:
                seen = elements.reshape(16, -1)[::3].get().tobytes()
                expected = np.ascontiguousarray(model.reshape(16, -1)[::3]).view(np.uint8).reshape(-1)
            else:
                count = min(elements.size, 32) // 2 * 2
                seen = elements[:count].reshape(2, -1).transpose().get().tobytes()
                expected = np.ascontiguousarray(model[:count].reshape(2, -1).T).view(np.uint8).reshape(-1)
        elif reader == "from_dlpack":
            seen = devbuf.from_dlpack(obj).to_bytes()
        elif reader == "ipc" and memory.block.ipc and isinstance(obj, devbuf.Buffer):
            seen = backend.ipc_reads(obj.ipc_handle())
        else:
            seen = obj.to_bytes()
        self.check(memory, seen, reader, expected)
        memory.writer = None

    @rule(memory=memories, how=st.sampled_from(["synchronize", "record", "wait", "query", "Event.wait", "Event.query",
                                                "Buffer.synchronize", "Device.sync", "Device.synchronize"]))
    @step
    def stream_waits(self, memory, how):
        """A devbuf stream's own waits cover all work on it, the consumer's included; so do a
        buffer's and a device's: the host then reads the bytes without asking devbuf."""
        obj, stream = memory.obj, memory.writer
        if obj.kind == "device":
            return
        if how == "Buffer.synchronize":
            obj.buffer.synchronize()
        elif stream is None or not open_stream(stream):
            return
        elif how == "synchronize":
            stream.synchronize()
        elif how == "record":
            stream.record().synchronize()
        elif how == "wait":
            other = devbuf.Stream(obj.device)
            other.wait(stream)
            other.synchronize()
        elif how == "query":
            while not stream.query():
                pass
        elif how == "Event.wait":
            event = stream.record()
            event.wait()
            assert event.done
        elif how == "Event.query":
            event = stream.record()
            while not event.query():
                pass
        elif how == "Device.sync":
            obj.device.sync()
        else:
            obj.device.synchronize()
        self.check(memory, ctypes.string_at(obj.ptr, obj.nbytes), f"the host after {how}()")

    @rule(memory=memories, location=st.sampled_from(["device", "host"]), stream=SOME_STREAM,
          advice=st.sampled_from([None, "set_read_mostly", "set_preferred_location", "set_accessed_by"]))
    @step
    def prefetch(self, memory, location, stream, advice):
        if memory.obj.kind != "shared":
            return
        buffer = memory.obj.buffer
        if self.backend.name == "sycl":
            # SYCL takes its runtime's own advice numbers (0: the default) and prefetches to the
            # device only.
            advice, location = 0 if advice else None, "device"
        if advice is not None:
            buffer.advise(advice, location if advice not in ("set_read_mostly", 0) else None)
        buffer.prefetch(location, stream=self.stream_on(buffer.device, stream))

    # -- frees and later owners ----------------------------------------------------------------------

    @rule(memory=consumes(memories), how=st.sampled_from(["close", "close(stream=)", "with", "del"]),
          stream=STREAMS, value=VALUES)
    @step
    def free_and_reuse(self, memory, how, stream, value):
        """Lets go of memory (a view keeps its allocation alive), and a later owner of memory from
        the same place writes and reads it."""
        obj, block = memory.obj, memory.block
        if how == "close":
            obj.close()
        elif how == "close(stream=)":
            obj.close(stream=self.stream_on(obj.device, stream))
        elif how == "with":
            with obj:
                pass
            assert obj.closed
        memory.obj = obj = None
        again = block.again()
        if again.kind == "device":
            again.fill(value)
        else:
            self.backend.raw_writes(again.ptr, again.nbytes, again.kind, value, again.device)
        seen = again.to_bytes()
        assert seen == uniform(value, len(seen)), "a reused block received an old writer's bytes"
        again.close()

    @rule(kind=st.sampled_from(["shared", "host", "device"]), resource=RESOURCES, stream=STREAMS,
          stream_ordered=st.booleans(), value=VALUES, then=st.sampled_from(["reuse", "release", "replay"]),
          later=SOME_STREAM)
    @step
    def deallocate_on_stream(self, kind, resource, stream, stream_ordered, value, then, later):
        """RMM's contract: `deallocate(ptr, nbytes, kind, stream=S)` frees after the work enqueued on
        S so far; a later owner of memory from the resource writes and reads it."""
        backend, nbytes, kind = self.backend, self.backend.nbytes, self.kind(kind)
        source = self.resource(resource, kind, held=False)
        on = self.stream_on(backend.device, stream)
        ptr = source.allocate(nbytes, kind, stream=on if stream_ordered else None)
        backend.stream_writes(ptr, nbytes, kind, 255 - value, on)
        source.deallocate(ptr, nbytes, kind, stream=on)
        # Finding F4 (reported on issue 44): a pool whose maximum is the one block it served refuses
        # that request after release() (it grows by more than the request); not released here
        # until fixed.
        if then == "release" and isinstance(source, mr.PoolMemoryResource) and resource != "one-block pool":
            source.release()
        elif then == "replay":
            mr.replay(self.replay_log, source, kind)
        self.later_owner(source, kind, value, self.stream_on(backend.device, later))

    @rule(target=memories, kind=st.sampled_from(["shared", "host", "device"]), resource=RESOURCES,
          deleter=st.booleans(), value=VALUES)
    @step
    def from_handle(self, kind, resource, deleter, value):
        """cuda.core's way to wrap memory a resource handed out: the deleter (or the owner's
        release) gives it back once nothing uses it."""
        nbytes, kind, device = self.backend.nbytes, self.kind(kind), self.backend.device
        source = self.resource(resource, kind)

        def wrap():
            ptr = source.allocate(nbytes, kind)
            if deleter:
                return devbuf.Buffer.from_handle(ptr, nbytes, device,
                                                 deleter=functools.partial(source.deallocate, ptr, nbytes, kind))
            return devbuf.Buffer.from_handle(ptr, nbytes, device, owner=Owner(source, ptr, nbytes, kind))

        obj = wrap()
        return self.write_initial(Held(obj, Block(obj, wrap)), value, from_host=False)

    @rule(target=memories, kind=st.sampled_from(["shared", "device"]), value=VALUES, dlpack=st.booleans())
    @step
    def import_foreign(self, kind, value, dlpack):
        """Memory another library made and is still writing: devbuf's reads wait for the producer."""
        backend, kind = self.backend, self.kind(kind)
        theirs = backend.producer(kind, value, backend.device)
        obj = devbuf.from_dlpack(backend.foreign_dlpack(theirs)) if dlpack else devbuf.asarray(theirs)
        held = Held(obj, Block(obj, functools.partial(devbuf.alloc, obj.nbytes, obj.kind, device=obj.device)), theirs)
        held.wrote(value)
        return held

    @rule(target=memories, kind=st.sampled_from(["shared", "host", "device"]), value=VALUES,
          theirs=st.booleans(), on_stream=st.booleans(), export=st.booleans())
    @step
    def stream_dies(self, kind, value, theirs, on_stream, export):
        """Memory written on a stream that then goes: destroyed by the library that owns it, or
        closed; the memory stays usable and its bytes readable."""
        backend, kind, device = self.backend, self.kind(kind), self.backend.device
        if theirs:
            stream, destroy = backend.raw_stream(device)
        else:
            stream = devbuf.Stream(device)
            destroy = stream.close
        obj = stream.alloc(backend.nbytes, kind) if on_stream else devbuf.alloc(backend.nbytes, kind, device=device)
        held = Held(obj, Block(obj, functools.partial(devbuf.alloc, backend.nbytes, kind, device=device)))
        obj.fill(value, stream=stream, blocking=False)
        held.wrote(value)
        if export:
            held.wrote(255 - value, backend.consumer_writes(obj, 255 - value, "dlpack-stream", stream))
        destroy()
        held.writer, held.closed_stream = None, on_stream
        return held

    # -- the allocator entry points other libraries load -----------------------------------------------

    @precondition(lambda self: self.backend.name == "cuda")
    @rule(resource=RESOURCES, stream=SOME_STREAM, later=SOME_STREAM, value=VALUES)
    @step
    def torch_entry_points(self, resource, stream, later, value):
        """PyTorch's pluggable allocator calls devbuf_torch_alloc/free (the functions
        devbuf.allocators.torch.devbuf_torch_allocator loads) with its stream; the free is after the
        work PyTorch enqueued there."""
        backend, nbytes, device = self.backend, self.backend.nbytes, self.backend.device
        library = ctypes.CDLL(devbuf._devbuf.__file__)
        alloc, free = library.devbuf_torch_alloc, library.devbuf_torch_free
        alloc.restype, alloc.argtypes = ctypes.c_void_p, [ctypes.c_ssize_t, ctypes.c_int, ctypes.c_void_p]
        free.restype, free.argtypes = None, [ctypes.c_void_p, ctypes.c_ssize_t, ctypes.c_int, ctypes.c_void_p]
        on, after = self.stream_on(device, stream), self.stream_on(device, later)
        handle = None if on is None else on.stream
        mr.set_current_device_resource(self.resource(resource, "device"), kind="device")
        try:
            ptr = alloc(nbytes, 0, handle)
            assert ptr, "devbuf_torch_alloc returned null"
            backend.memset(ptr, nbytes, 255 - value, handle or 1, device)
            free(ptr, nbytes, 0, handle)
            again = alloc(nbytes, 0, None if after is None else after.stream)
            (after or device.default_stream).synchronize()  # PyTorch's stream had waited for it
            backend.raw_writes(again, nbytes, "device", value, device)
            backend.finish_all()
            seen = backend.raw_reads(again, nbytes, "device", device)
            free(again, nbytes, 0, None)
        finally:
            mr.reset_current_device_resource(device, "device")
        assert seen == uniform(value, nbytes), "PyTorch's next tensor received bytes its last one's stream wrote"

    @precondition(lambda self: self.backend.name == "cuda" and cupy_runs())
    @rule(resource=RESOURCES, value=VALUES)
    @step
    def cupy_entry_point(self, resource, value):
        """CuPy's allocator hook, on a CuPy stream: the free is after the work CuPy enqueued there
        (runs where CuPy runs: it needs a GPU)."""
        import cupy

        from devbuf.allocators.cupy import devbuf_cupy_allocator

        backend, nbytes, device = self.backend, self.backend.nbytes, self.backend.device
        mr.set_current_device_resource(self.resource(resource, "device"), kind="device")
        try:
            with cupy.cuda.Stream(non_blocking=True) as theirs:
                memory = devbuf_cupy_allocator(nbytes)
                backend.memset(memory.ptr, nbytes, 255 - value, theirs.ptr, device)
                del memory
                again = devbuf_cupy_allocator(nbytes)
                theirs.synchronize()  # the allocation is CuPy's stream's work
                backend.raw_writes(again.ptr, nbytes, "device", value, device)
                backend.finish_all()
                seen = backend.raw_reads(again.ptr, nbytes, "device", device)
                del again
        finally:
            mr.reset_current_device_resource(device, "device")
        assert seen == uniform(value, nbytes), "CuPy's next array received bytes its last one's stream wrote"

    @precondition(lambda self: self.backend.name == "cuda")
    @rule(resource=RESOURCES, value=VALUES)
    @step
    def numba_entry_point(self, resource, value):
        """Numba's EMM plugin: memory Numba let go of while its own stream (one devbuf does not
        know) still copies into it is not handed out again before that copy is done."""
        numba_cuda, backend, nbytes, device = self.backend.numba, self.backend, self.backend.nbytes, self.backend.device
        mr.set_current_device_resource(self.resource(resource, "device"), kind="device")
        try:
            # What numba.cuda.device_array does: the context's memory manager (devbuf's) allocates.
            context = numba_cuda.current_context()
            assert type(context.memory_manager).__name__ == "DevbufNumbaManager"
            theirs = numba_cuda.devicearray.DeviceNDArray((nbytes,), (1,), np.uint8, gpu_data=context.memalloc(nbytes))
            try:
                theirs.get_ipc_handle()
            except RuntimeError as refused:
                assert "cannot share this memory through CUDA IPC" in str(refused)
            stream = numba_cuda.stream()
            host = numba_cuda.pinned_array(nbytes, np.uint8)
            host[:] = 255 - value
            backend.memset(theirs.device_ctypes_pointer.value, nbytes, 255 - value, int(stream.handle), device)
            theirs.copy_to_device(host, stream=stream)
            del theirs
            numba_cuda.current_context().deallocations.clear()
            again = devbuf.alloc(nbytes, "device", device=device)
            again.fill(value)
            backend.finish_all()
            seen = again.to_bytes()
        finally:
            mr.reset_current_device_resource(device, "device")
        assert seen == uniform(value, nbytes), "memory Numba let go of was handed out under Numba's pending copy"


def cupy_runs():
    try:
        import cupy

        return cupy.cuda.is_available()
    except ImportError:
        return False


def run(backend_name, examples, steps, derandomize=True):
    backend = {"sycl": Sycl, "cuda": Cuda}[backend_name]()
    Machine.backend = backend
    directory = tempfile.mkdtemp()
    Machine.resources, Machine.replay_log = make_resources(backend.device, backend.nbytes, backend.kinds, directory)
    Machine.TestCase.settings = settings(
        max_examples=examples,
        stateful_step_count=steps,
        deadline=None,
        derandomize=derandomize,
        database=None,
        suppress_health_check=list(HealthCheck),
        # DEVBUF_ORDERING_SHRINK=0: report the first failing sequence as drawn (shrinking a long one
        # on a loaded machine can take many minutes).
        phases=[p for p in Phase if p != Phase.shrink or os.environ.get("DEVBUF_ORDERING_SHRINK") != "0"],
    )
    Machine.TestCase("runTest").runTest()
    print(f"{backend_name}: {examples} sequences of up to {steps} steps, every read as the model says;",
          ", ".join(f"{name} {count}" for name, count in sorted(STEPS_RUN.items())))


if __name__ == "__main__":
    name, examples, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    run(name, examples, steps, derandomize=sys.argv[4:] != ["random"])
