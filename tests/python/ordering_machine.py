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
    python ordering_machine.py sycl|cuda replay FILE

(`random`: a different draw each run, as ci/soak does; else the same sequences every run. A failing
run prints its first failing sequence as Python, one step a line: `replay` runs such a file.)
test_ordering_machine.py runs the short profile (ci/test), ci/soak the long one, and
test_ordering_coverage.py checks that RULE_CALLS names every public call that touches memory."""

import ctypes
import functools
import os
import pickle
import sys
import tempfile

import numpy as np
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import consumes, rule

import devbuf
import devbuf.mr as mr
from ordering_consumers import Cuda, Sycl
from ordering_model import (DTYPES, MEMORIES, SOME_STREAM, STEPS_RUN, STREAMS, VALUES, Block, Held, flat, open_stream, step,
                            uniform)
from ordering_resources import RESOURCES, ResourceRules, make_resources
from ordering_writes import RESIZES, WriteRules

PROTOCOLS = [*Cuda.protocols, *Sycl.protocols]

# The public calls (as the stubs and devbuf.mr / devbuf.allocators name them) each rule makes;
# test_ordering_coverage.py fails when a call that reads, writes, frees or exports memory is in no
# rule's row.
RULE_CALLS = {
    "allocate": {
        "alloc", "Stream.alloc", "empty", "zeros", "ones", "full", "Buffer.from_host", "Stream.__enter__",
        "Stream.__exit__",
        "Device.__enter__", "Device.__exit__", "Buffer.fill", "Array.copy_from",
        "set_current_device_resource", "get_current_device_resource", "reset_current_device_resource",
        "QueueMemoryResource.__new__", "PoolMemoryResource.__new__", "BinningMemoryResource.__new__",
        "BinningMemoryResource.add_bin", "FixedSizeMemoryResource.__new__", "LimitingResourceAdaptor.__new__",
        "StatisticsResourceAdaptor.__new__", "TrackingResourceAdaptor.__new__", "LoggingResourceAdaptor.__new__",
        "FailureCallbackResourceAdaptor.__new__", "PrefetchResourceAdaptor.__new__", "MemoryResource.__init__",
        "MemoryResource.allocate", "MemoryResource.deallocate", "DeviceMemoryResource.__new__",
        "ManagedMemoryResource.__new__", "PinnedHostMemoryResource.__new__", "AsyncMemoryResource.__new__",
        "AsyncMemoryResource.release_threshold",
    },
    "allocate_like": {"empty_like", "zeros_like", "ones_like", "Array.copy_from"},
    "take_view": {
        "Buffer.__getitem__", "Array.__getitem__", "Buffer.view", "Array.view", "Array.reshape", "Array.__iter__",
        "Array.buffer", "asarray", "from_dlpack",
    },
    "consumer_writes": {
        "Array.__cuda_array_interface__", "set_cai_export_stream", "Array.__dlpack__", "Array.__dlpack_device__",
        "Array.__dlpack_c_exchange_api__", "Array.__c_dlpack_exchange_api__", "Array.__sycl_usm_array_interface__",
        "Array.__usm_ndarray__", "Array.sycl_queue", "Array.usm_type",
    },
    "devbuf_writes": {
        "Buffer.fill", "Array.fill", "Array.view", "Array.__setitem__", "Array.copy_from", "Buffer.copy_from_host",
        "Stream.__enter__", "Stream.__exit__",
    },
    "devbuf_copies": {"Array.copy_from", "Array.__setitem__", "Buffer.copy_from_device", "Array.buffer"},
    "resize": {"Buffer.capacity", "Buffer.resize", "Buffer.reserve", "Buffer.fill", "Buffer.tobytes", "alloc"},
    "devbuf_reads": {
        "Array.to_bytes", "Array.__array__", "Array.get", "Array.copy_to_host", "Array.copy", "Array.to_device",
        "Array.reshape", "Array.T", "Array.transpose", "Array.__getitem__", "Array.__reduce_ex__", "asarray",
        "from_dlpack", "Array.__cuda_array_interface__", "Array.__sycl_usm_array_interface__", "empty_like",
        "Array.copy_from", "Stream.__enter__", "Stream.__exit__", "Buffer.ipc_handle", "IpcHandle.__bytes__",
        "open_ipc", "Buffer.tobytes", "Buffer.__bytes__",
    },
    "stream_waits": {
        "Stream.synchronize", "Stream.record", "Stream.wait", "Stream.query", "Event.synchronize", "Event.wait",
        "Event.query", "Event.done", "Buffer.synchronize", "Device.sync", "Device.synchronize",
    },
    "prefetch": {"Buffer.prefetch", "Buffer.advise", "Array.buffer"},
    "free_and_reuse": {"Array.close", "Array.__enter__", "Array.__exit__", "alloc", "Buffer.fill"},
    "deallocate_on_stream": {
        "MemoryResource.allocate", "MemoryResource.deallocate", "PoolMemoryResource.release", "replay",
        "LoggingResourceAdaptor.flush", "AsyncMemoryResource.__new__", "AsyncMemoryResource.release",
        "AsyncMemoryResource.pool_size", "AsyncMemoryResource.release_threshold",
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


class Machine(ResourceRules, WriteRules):
    # -- allocation --------------------------------------------------------------------------------

    @rule(target=MEMORIES, kind=st.sampled_from(["shared", "host", "device"]),
          how=st.sampled_from(["alloc", "alloc(stream=)", "Stream.alloc", "with stream", "mr=", "current resource",
                               "ipc", "empty", "zeros", "ones", "full", "from_host"]),
          stream=STREAMS, value=VALUES, device=st.integers(0, 1), resource=RESOURCES, dtype=DTYPES)
    @step
    def allocate(self, kind, how, stream, value, device, resource, dtype):
        """Memory from every way to make it: alloc (on a device, a stream, `with stream:`, from a
        resource, the current resource, for IPC), the creation functions (in a few dtypes) and a
        buffer made from host bytes (from a resource, its copy on a stream)."""
        kind, nbytes = self.kind(kind), self.backend.nbytes
        where = self.device(device)
        source = None
        if how in ("mr=", "current resource", "from_host"):
            where = self.backend.device  # the resources are the first device's
            source, kind = self.resource(resource, kind)
        on = self.stream_on(where, stream)
        again = functools.partial(devbuf.alloc, nbytes, kind, device=where, mr=source)
        fixed_size = isinstance(source, mr.FixedSizeMemoryResource)
        count = nbytes // np.dtype(dtype).itemsize
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
        elif how in ("zeros", "ones", "full", "from_host"):
            if how == "zeros":
                obj, model = devbuf.zeros(count, dtype, kind=kind, stream=on), np.zeros(count, dtype)
            elif how == "ones":
                obj, model = devbuf.ones(count, dtype, kind=kind, stream=on), np.ones(count, dtype)
            elif how == "full":
                obj, model = devbuf.full(count, value, dtype, kind=kind, device=where), np.full(count, value, dtype)
            else:
                model = uniform(value, nbytes)
                # `mr` allocates (on its own queue), `stream` runs the copy: RMM's to_device.
                obj = devbuf.Buffer.from_host(model, kind, where, mr=source, stream=on)
            assert obj.kind == kind
            held = Held(obj, Block(obj, again, fixed_size=fixed_size))
            held.wrote(np.frombuffer(model, np.uint8))
            return held
        else:
            obj = devbuf.empty(count, dtype, kind=kind, device=where)
        assert obj.kind == kind
        held = Held(obj, Block(obj, again, ipc=how == "ipc" and self.backend.name == "cuda", fixed_size=fixed_size))
        # A new owner of a block from a resource writes from the host where it can.
        return self.write_initial(held, value, from_host=source is not None)

    @rule(target=MEMORIES, prototype=MEMORIES, like=st.sampled_from(["empty_like", "zeros_like", "ones_like"]),
          value=VALUES)
    @step
    def allocate_like(self, prototype, like, value):
        # Of memory whose stream was closed: on its device.
        obj = getattr(devbuf, like)(prototype.obj)
        assert (obj.shape, obj.dtype, obj.kind, obj.device) == (
            prototype.obj.shape, prototype.obj.dtype, prototype.obj.kind, prototype.obj.device)
        nbytes, kind, device = obj.nbytes, obj.kind, obj.device
        held = Held(obj, Block(obj, functools.partial(devbuf.alloc, nbytes, kind, device=device)))
        if like == "zeros_like":
            return held
        if like == "ones_like":
            held.wrote(np.ones(obj.shape, obj.dtype).view(np.uint8).reshape(-1))
            return held
        return self.write_initial(held, value, from_host=False)

    @rule(target=MEMORIES, memory=MEMORIES,
          how=st.sampled_from(["slice", "typed", "view(dtype)", "reshape", "row", "buffer", "asarray", "from_dlpack"]),
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
        elif how == "view(dtype)":
            # NumPy's ndarray.view(dtype) (a Buffer's bytes as an Array first): `part` is whole
            # 4-byte units, so every item size fits.
            view = (part[...] if isinstance(part, devbuf.Buffer) else part).view(("uint8", "uint16", "uint32")[first % 3])
        elif how == "reshape" and part.size % 2 == 0:
            view = part.reshape(2, -1)
        elif how == "row" and part.nbytes % 16 == 0:
            # Iterating an array yields views of its rows (each whole 4-byte units, as every view).
            view = list(part.reshape(4, -1))[length % 4]
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

    # -- other libraries' writes ------------------------------------------------------------------

    @rule(memory=MEMORIES, value=VALUES,
          protocol=st.sampled_from(PROTOCOLS), stream=STREAMS)
    @step
    def consumer_writes(self, memory, value, protocol, stream):
        protocols = self.backend.protocols
        if protocol not in protocols:  # another backend's: one of this backend's, the same each time
            protocol = protocols[PROTOCOLS.index(protocol) % len(protocols)]
        on = self.stream_on(memory.obj.device, stream)
        memory.wrote(value, self.backend.consumer_writes(memory.obj, value, protocol, on))
        memory.anchored |= protocol in self.backend.anchoring

    # -- reads -------------------------------------------------------------------------------------

    @rule(memory=MEMORIES, stream=STREAMS,
          reader=st.sampled_from(["to_bytes", "to_bytes(stream=)", "host view", "get", "get(out=)", "copy_to_host",
                                  "copy_from", "copy", "to_device", "asarray(copy=True)", "reshape(copy=True)",
                                  "pickle", "re-export", "with stream", "strided", "transposed", "from_dlpack",
                                  "ipc", "tobytes", "tobytes(stream=)", "bytes()"]))
    @step
    def devbuf_reads(self, memory, reader, stream):
        obj, backend = memory.obj, self.backend
        on = self.stream_on(obj.device, stream)
        other = self.device(obj.device.index + 1) if backend.name == "cuda" else obj.device
        expected = None
        if reader == "to_bytes(stream=)":
            seen = obj.to_bytes(stream=on)
        elif reader in ("tobytes", "tobytes(stream=)") and isinstance(obj, devbuf.Buffer):
            seen = obj.tobytes(stream=on) if reader == "tobytes(stream=)" else obj.tobytes()
        elif reader == "bytes()" and isinstance(obj, devbuf.Buffer):
            seen = bytes(obj)  # RMM's DeviceBuffer: a copy of any kind of memory
        elif reader == "host view" and obj.kind != "device":
            seen = np.asarray(obj).tobytes()  # the buffer protocol: NumPy reads through the object
            memory.anchored = True
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
            memory.anchored = True
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

    @rule(memory=MEMORIES, how=st.sampled_from(["synchronize", "record", "wait", "query", "Event.wait", "Event.query",
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

    @rule(memory=MEMORIES, location=st.sampled_from(["device", "host"]), stream=SOME_STREAM,
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

    @rule(memory=consumes(MEMORIES), how=st.sampled_from(["close", "close(stream=)", "with", "del"]),
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

    @rule(target=MEMORIES, kind=st.sampled_from(["shared", "device"]), value=VALUES, dlpack=st.booleans())
    @step
    def import_foreign(self, kind, value, dlpack):
        """Memory another library made and is still writing: devbuf's reads wait for the producer."""
        backend, kind = self.backend, self.kind(kind)
        theirs = backend.producer(kind, value, backend.device)
        obj = devbuf.from_dlpack(backend.foreign_dlpack(theirs)) if dlpack else devbuf.asarray(theirs)
        held = Held(obj, Block(obj, functools.partial(devbuf.alloc, obj.nbytes, obj.kind, device=obj.device),
                               foreign=True), theirs)
        held.wrote(value)
        return held

    @rule(target=MEMORIES, kind=st.sampled_from(["shared", "host", "device"]), value=VALUES,
          theirs=st.booleans(), on_stream=st.booleans(), export=st.booleans())
    @step
    def stream_dies(self, kind, value, theirs, on_stream, export):
        """Memory written on a stream that then goes: destroyed by the library that owns it, or
        closed; the memory stays usable and its bytes readable. Memory allocated on another
        library's stream is devbuf's to use only while that stream lives, as cuda.core's own
        buffers are (their close() frees on it): that library destroying it first is left out
        (docs/architecture.md, "The ordering invariant")."""
        on_stream = on_stream and not theirs
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


def prepare(backend_name):
    backend = {"sycl": Sycl, "cuda": Cuda}[backend_name]()
    Machine.backend = backend
    Machine.resources, Machine.replay_log = make_resources(backend.device, backend.nbytes, backend.kinds,
                                                           tempfile.mkdtemp())
    return backend


def run(backend_name, examples, steps, derandomize=True):
    prepare(backend_name)
    Machine.TestCase.settings = settings(
        max_examples=examples,
        stateful_step_count=steps,
        deadline=None,
        derandomize=derandomize,
        database=None,
        suppress_health_check=list(HealthCheck),
        report_multiple_bugs=False,
        # DEVBUF_ORDERING_SHRINK=0: report the first failing sequence as drawn (shrinking a long one
        # on a loaded machine can take many minutes).
        phases=[p for p in Phase if p != Phase.shrink or os.environ.get("DEVBUF_ORDERING_SHRINK") != "0"],
    )
    Machine.TestCase("runTest").runTest()
    print(f"{backend_name}: {examples} sequences of up to {steps} steps, every read as the model says;",
          ", ".join(f"{name} {count}" for name, count in sorted(STEPS_RUN.items())))
    print("resize:", ", ".join(f"{name} {count}" for name, count in sorted(RESIZES.items())))


def replay(backend_name, path):
    """Runs a sequence as the machine prints it (one step a line) in a fresh machine."""
    backend = prepare(backend_name)
    machine = Machine()
    machine.start()
    names = {"state": machine}
    for line in open(path):
        if line.strip():
            print(line.strip(), flush=True)
            exec(line.strip(), names)
    backend.finish_all()
    print(f"{backend_name}: the sequence in {path} read what the model says")


if __name__ == "__main__":
    if sys.argv[2] == "replay":
        replay(sys.argv[1], sys.argv[3])
    else:
        run(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), derandomize=sys.argv[4:] != ["random"])
