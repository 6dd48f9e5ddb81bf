"""A stateful property test of the ordering invariant (issue 33): hypothesis draws sequences of
allocations (on the default queue, on a user stream, from a pool), exports (each protocol, each
stream argument) followed by a consumer's write where that protocol tells it to write, devbuf's
own commands, devbuf's reads (host view, `to_bytes`, `get` on another stream, `copy_from`,
pickle, a re-export to a second consumer), frees (`close`, with and without a stream) and pool
reuse, and checks every byte devbuf reads against a model of what the last writer wrote.

Consumers write asynchronously and late: on the SYCL CPU runtime behind large copies on the same
queue; on the CUDA test driver behind queued operations, with its per-operation delay on. A read
that is not ordered after a consumer's write sees the old bytes.

    python ordering_machine.py sycl|cuda EXAMPLES STEPS [random]

(`random`: a different draw each run, as ci/soak does; else the same sequences every run.)

tests/python/test_ordering_machine.py runs the short profile (ci/test), ci/soak the long one."""

import ctypes
import os
import pickle
import sys

import numpy as np
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, consumes, initialize, rule

import devbuf
import devbuf.mr

VALUES = st.integers(1, 250)


class Sycl:
    """Consumers on the real SYCL runtime: dpctl copies on the queue the export names."""

    name = "sycl"
    nbytes = 1 << 24
    kinds = ["shared", "host", "device"]
    protocols = ["suai", "dlpack-stream"]

    def __init__(self):
        import dpctl.memory as dm

        self.dm = dm
        self.device = devbuf.Device("sycl")
        self.streams = [devbuf.Stream(self.device) for _ in range(2)]
        self.sources = {}
        # Copies the consumer queues first, so that its write lands well after any read of ours.
        self.scratch = [dm.MemoryUSMDevice(4 * self.nbytes) for _ in range(2)]

    def source(self, value, queue):
        if value not in self.sources:
            memory = self.dm.MemoryUSMShared(self.nbytes, queue=queue)
            np.frombuffer(memory, np.uint8)[:] = value
            self.sources[value] = memory
        return self.sources[value]

    def raw(self, ptr, queue):
        dm = self.dm
        suai = {"data": (ptr, False), "shape": (self.nbytes,), "typestr": "|u1", "version": 1, "syclobj": queue}
        return dm.as_usm_memory(type("Raw", (), {"__sycl_usm_array_interface__": suai})())

    def consumer_writes(self, memory, value, protocol, stream):
        """Writes `value` over `memory` as `protocol`'s consumer; returns the devbuf stream it
        wrote on."""
        if protocol == "suai":
            theirs = self.dm.as_usm_memory(memory)  # devbuf's SUAI export: its syclobj queue
            queue, on = theirs.sycl_queue, memory.queue
        else:
            # A devbuf stream's queue as DLPack's stream: the consumer writes back there.
            queue, on = stream.sycl_queue, stream
            memory.__dlpack__(stream=queue, max_version=(1, 0))
            theirs = self.raw(memory.ptr, queue)
        queue.memcpy_async(self.scratch[1], self.scratch[0], 4 * self.nbytes)
        queue.memcpy_async(theirs, self.source(value, queue), self.nbytes)
        return on

    def second_consumer_reads(self, memory):
        theirs = self.dm.as_usm_memory(memory)
        host = self.dm.MemoryUSMHost(self.nbytes, queue=theirs.sycl_queue)
        theirs.sycl_queue.memcpy(host, theirs, self.nbytes)
        return bytes(host)

    def host_writes(self, memory, value):
        ctypes.memset(memory.ptr, value, self.nbytes)


class Cuda:
    """Consumers on the CUDA test driver: ctypes on the libcuda.so.1 devbuf loaded, writing on the
    stream the protocol names (CAI `stream`, DLPack's `stream` argument, the exchange table's work
    stream; the legacy default stream where it names none)."""

    name = "cuda"
    nbytes = 1 << 20
    kinds = ["device", "host", "shared"]
    protocols = ["cai", "dlpack-stream", "dlpack-none", "exchange"]

    def __init__(self):
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        from consumer import load

        self.device = devbuf.Device("cuda:0")
        self.streams = [devbuf.Stream(self.device) for _ in range(2)]
        self.consumer = load()
        cu = self.cu = ctypes.CDLL("libcuda.so.1")
        self.ok(cu.cuInit(0))
        device, context = ctypes.c_int(), ctypes.c_void_p()
        self.ok(cu.cuDeviceGet(ctypes.byref(device), 0))
        self.ok(cu.cuDevicePrimaryCtxRetain(ctypes.byref(context), device))
        self.ok(cu.cuCtxPushCurrent_v2(context))
        scratch = ctypes.c_uint64()
        self.ok(cu.cuMemAlloc_v2(ctypes.byref(scratch), 64))
        self.scratch = scratch.value
        self.private = ctypes.c_void_p()
        self.ok(cu.cuStreamCreate(ctypes.byref(self.private), 1))  # CU_STREAM_NON_BLOCKING
        get = ctypes.pythonapi.PyCapsule_GetPointer
        get.restype, get.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
        self.capsule_pointer = get

    @staticmethod
    def ok(result):
        assert result == 0, f"CUresult {result}"

    def memset(self, ptr, value, stream):
        for _ in range(3):  # queued first, so that the write lands late
            self.ok(self.cu.cuMemsetD8Async(ctypes.c_uint64(self.scratch), 0, 64, ctypes.c_void_p(stream)))
        self.ok(self.cu.cuMemsetD8Async(ctypes.c_uint64(ptr), ctypes.c_ubyte(value),
                                        ctypes.c_size_t(self.nbytes), ctypes.c_void_p(stream)))

    def consumer_writes(self, memory, value, protocol, stream):
        """Writes `value` over `memory` as `protocol`'s consumer; returns the devbuf stream it
        wrote on (None for the legacy default stream)."""
        if protocol == "cai":
            interface = memory.__cuda_array_interface__
            handle = interface["stream"] or 1
            data = interface["data"][0]
        elif protocol in ("dlpack-stream", "dlpack-none"):
            handle = stream.stream if protocol == "dlpack-stream" else None
            capsule = memory.__dlpack__(stream=handle, max_version=(1, 0))
            data = ctypes.c_void_p.from_address(self.capsule_pointer(capsule, b"dltensor_versioned") + 32).value
            handle = handle or 1
        else:
            data = self.consumer.describe(memory)["data"]
            handle = self.consumer.current_stream(memory, *memory.__dlpack_device__())
        self.memset(data, value, handle)
        known = [*self.streams, memory.queue, self.device.default_stream]
        return next((s for s in known if s.stream == handle), None)

    def second_consumer_reads(self, memory):
        # CAI v3: a consumer on its own stream waits for the stream the export names.
        interface = memory.__cuda_array_interface__
        if interface["stream"] is not None:
            event = ctypes.c_void_p()
            self.ok(self.cu.cuEventCreate(ctypes.byref(event), 2))
            self.ok(self.cu.cuEventRecord(event, ctypes.c_void_p(interface["stream"])))
            self.ok(self.cu.cuStreamWaitEvent(self.private, event, 0))
            self.ok(self.cu.cuEventDestroy_v2(event))
        host = ctypes.create_string_buffer(self.nbytes)
        self.ok(self.cu.cuMemcpyDtoHAsync_v2(host, ctypes.c_uint64(interface["data"][0]),
                                             ctypes.c_size_t(self.nbytes), self.private))
        self.ok(self.cu.cuStreamSynchronize(self.private))
        return host.raw

    def host_writes(self, memory, value):
        ctypes.memset(memory.ptr, value, self.nbytes)


class Machine(RuleBasedStateMachine):
    backend = None  # set by `run`
    memories = Bundle("memories")

    @initialize()
    def start(self):
        self.pool = devbuf.mr.PoolMemoryResource(devbuf.mr.QueueMemoryResource(self.backend.device))
        self.expected = {}
        # The devbuf stream the last unfinished write of each memory ran on (None: none, or not one
        # of devbuf's streams), for the rule that checks what a stream's own waits cover.
        self.writer = {}

    def stream(self, index):
        return None if index is None else self.backend.streams[index]

    def check(self, memory, seen, how):
        want = self.expected[id(memory)]
        assert seen == bytes([want]) * len(seen), (
            f"{how} read {sorted(set(seen))[:4]}, not the last writer's {want}"
        )

    @rule(target=memories, kind=st.sampled_from(["shared", "host", "device"]),
          where=st.sampled_from(["default", "stream", "pool"]), value=VALUES)
    def allocate(self, kind, where, value):
        backend = self.backend
        if kind not in backend.kinds:
            kind = backend.kinds[0]
        if where == "stream":
            memory = backend.streams[0].alloc(backend.nbytes, kind)
        elif where == "pool":
            memory = devbuf.alloc(backend.nbytes, kind, mr=self.pool)
        else:
            memory = devbuf.alloc(backend.nbytes, kind, device=backend.device)
        if kind != "device" and where == "pool":
            backend.host_writes(memory, value)  # a new owner of a pooled block writes from the host
        else:
            memory.fill(value)
        self.expected[id(memory)] = value
        return memory

    @rule(memory=memories, value=VALUES, stream=st.sampled_from([None, 0, 1]), blocking=st.booleans())
    def devbuf_fills(self, memory, value, stream, blocking):
        memory.fill(value, stream=self.stream(stream), blocking=blocking)
        self.expected[id(memory)] = value
        self.writer[id(memory)] = None if blocking else (self.stream(stream) or memory.queue)

    @rule(memory=memories, value=VALUES, protocol=st.sampled_from(["cai", "suai", "dlpack-stream", "dlpack-none", "exchange"]),
          stream=st.sampled_from([0, 1]))
    def consumer_writes(self, memory, value, protocol, stream):
        if protocol not in self.backend.protocols:
            protocol = self.backend.protocols[0]
        on = self.backend.consumer_writes(memory, value, protocol, self.backend.streams[stream])
        self.expected[id(memory)] = value
        self.writer[id(memory)] = on

    @rule(memory=memories, how=st.sampled_from(["synchronize", "record", "wait"]))
    def a_stream_waits_for_the_last_writer(self, memory, how):
        # A devbuf stream's own waits cover all work on it, the consumer's included: the host
        # then reads the bytes without asking devbuf.
        stream = self.writer.get(id(memory))
        if stream is None or memory.kind == "device":
            return
        if how == "synchronize":
            stream.synchronize()
        elif how == "record":
            stream.record().synchronize()
        else:
            other = devbuf.Stream(self.backend.device)
            other.wait(stream)
            other.synchronize()
        self.check(memory, ctypes.string_at(memory.ptr, memory.nbytes), f"the host after {how}()")

    @rule(memory=memories, reader=st.sampled_from(["to_bytes", "host view", "get", "copy_from", "pickle", "re-export"]))
    def devbuf_reads(self, memory, reader):
        if reader == "to_bytes":
            seen = memory.to_bytes()
        elif reader == "host view" and memory.kind != "device":
            seen = np.asarray(memory).tobytes()
        elif reader == "get":
            seen = memory.view("uint8").get(stream=self.backend.streams[1]).tobytes()
        elif reader == "copy_from":
            copy = devbuf.alloc(memory.nbytes, "device", device=self.backend.device)
            copy.copy_from(memory)
            seen = copy.to_bytes()
        elif reader == "pickle":
            seen = pickle.loads(pickle.dumps(memory, protocol=5)).to_bytes()
        else:
            seen = self.backend.second_consumer_reads(memory)
        self.check(memory, seen, reader)
        self.writer[id(memory)] = None

    @rule(memory=consumes(memories), stream=st.sampled_from([None, 0, 1]), value=VALUES)
    def free_and_reuse(self, memory, stream, value):
        kind = memory.kind
        del self.expected[id(memory)]
        self.writer.pop(id(memory), None)
        memory.close(stream=self.stream(stream))
        del memory
        again = devbuf.alloc(self.backend.nbytes, kind, mr=self.pool)
        if kind == "device":
            again.fill(value)
        else:
            self.backend.host_writes(again, value)
        self.expected[id(again)] = value
        seen = again.to_bytes()
        assert seen == bytes([value]) * len(seen), "a reused block received an old writer's bytes"
        again.close()
        del self.expected[id(again)]


def run(backend_name, examples, steps, derandomize=True):
    Machine.backend = {"sycl": Sycl, "cuda": Cuda}[backend_name]()
    Machine.TestCase.settings = settings(
        max_examples=examples,
        stateful_step_count=steps,
        deadline=None,
        derandomize=derandomize,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    Machine.TestCase("runTest").runTest()
    print(f"{backend_name}: {examples} sequences of up to {steps} steps, every read as the model says")


if __name__ == "__main__":
    name, examples, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    run(name, examples, steps, derandomize=sys.argv[4:] != ["random"])
