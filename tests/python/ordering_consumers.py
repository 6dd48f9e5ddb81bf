"""The other libraries and the raw access that the ordering machine (ordering_machine.py) drives,
one class per backend. Every write a consumer makes lands late (queued behind other work), so a
read devbuf does not order after it sees the old bytes.

- SYCL, on the real runtime: dpnp and dpnp.tensor operations on the queue the export names (they
  follow dpctl's record of that queue's events, as dpnp users' code does), and raw dpctl copies
  only on in-order queues, where queue order is the ordering (a raw copy on an out-of-order queue
  is ordered with nothing, devbuf's work or the user's own).
- CUDA, on the test driver: copies and memsets on the stream the protocol names (CAI `stream`,
  DLPack's `stream` argument, the exchange table's work stream; the legacy default stream where it
  names none), and Numba as the library users have."""

import ctypes
import os
import subprocess
import sys
import zlib

import numpy as np

import devbuf
from dlpack_craft import KDL_CUDA, KDL_CUDA_MANAGED, CraftedTensor

HERE = os.path.dirname(os.path.abspath(__file__))
LATE_BYTES = 64 << 20  # a SYCL consumer's write waits behind a copy this long (tens of ms on the CPU device)


def attribute(stream, name):
    """A stream's handle or queue; None once the stream was closed."""
    try:
        return getattr(stream, name)
    except ValueError:
        return None


class Raw:
    """A bare pointer as SUAI names it (a consumer's view of memory it was handed by address)."""

    def __init__(self, ptr, nbytes, queue):
        self.__sycl_usm_array_interface__ = {
            "data": (ptr, False), "shape": (nbytes,), "typestr": "|u1", "version": 1, "syclobj": queue,
        }


class Sycl:
    name = "sycl"
    nbytes = 1 << 22
    kinds = ["shared", "host", "device"]
    protocols = ["dpnp", "dpnp.tensor", "dpnp-dlpack", "suai-memcpy", "dlpack-stream"]
    # The protocols whose consumers read through the object (SUAI, the dpctl attributes: dpnp's
    # import and dpnp-dlpack's look at `sycl_queue`): the object keeps its size from then on.
    anchoring = {"dpnp", "dpnp.tensor", "dpnp-dlpack", "suai-memcpy"}

    def __init__(self):
        import dpctl
        import dpctl.memory as dm
        import dpnp
        import dpnp.tensor as dpt
        from dpctl.utils import SequentialOrderManager

        self.dpctl, self.dm, self.dpnp, self.dpt, self.manager = dpctl, dm, dpnp, dpt, SequentialOrderManager
        self.device = devbuf.Device("sycl")
        self.devices = [self.device]
        selector = self.device.selector.removeprefix("sycl:")
        # devbuf's own streams (in order), a user's in-order dpctl queue and a user's out-of-order
        # one (`dpctl.SyclQueue()`'s default), adopted as devbuf Streams.
        self.user_queues = [dpctl.SyclQueue(selector, property="in_order"), dpctl.SyclQueue(selector)]
        self.streams = {self.device: [devbuf.Stream(self.device), devbuf.Stream(self.device),
                                      *(devbuf.Stream(q) for q in self.user_queues)]}
        self.private = dpctl.SyclQueue(selector, property="in_order")  # the test's own reads/writes
        self.scratch = {}
        self.late_queues = set()
        self.staging = []

    # -- consumers of exported memory ------------------------------------------------------------

    def late(self, queue):
        """Queues a long copy on `queue` in dpctl's record of its events, so that the next dpnp
        operation there (or the next command of an in-order queue) runs well after it."""
        # One pair per context, not per queue: each sequence's streams are new queues, and 128 MiB
        # kept for each of them grew a long run past the machine's memory (OOM-killed at 13 GB).
        context = queue.sycl_context
        if context not in self.scratch:
            self.scratch[context] = [self.dm.MemoryUSMDevice(LATE_BYTES, queue=queue) for _ in range(2)]
        big = self.scratch[context]
        self.late_queues.add(queue)
        event = queue.memcpy_async(big[1], big[0], LATE_BYTES)
        self.manager[queue].add_event_pair(event, event)

    def staged(self, value, nbytes, queue):
        """Shared memory holding `value`, kept until every queue's work is done (finish_all)."""
        if len(self.staging) > 32:
            self.finish_all()
        memory = self.dm.MemoryUSMShared(nbytes, queue=queue)
        np.frombuffer(memory, np.uint8)[:] = value
        self.staging.append((memory, queue))
        return memory

    def dpnp_writes(self, array, value, library):
        """`library`'s copy of `value` into `array` (a dpnp or dpnp.tensor array), late."""
        queue = array.sycl_queue
        fill = np.frombuffer(bytes([value]) * array.itemsize, array.dtype)[0]
        source = library.full(array.shape, fill, dtype=array.dtype, sycl_queue=queue)
        self.late(queue)
        if library is self.dpnp:
            self.dpnp.copyto(array, source)
        else:
            array[...] = source
        return queue

    def memcpy_writes(self, ptr, nbytes, value, queue):
        """A raw dpctl copy on an in-order queue, late."""
        assert queue.is_in_order, "a raw copy on an out-of-order queue is ordered with nothing"
        source = self.staged(value, nbytes, queue)
        self.late(queue)
        queue.memcpy_async(self.dm.as_usm_memory(Raw(ptr, nbytes, queue)), source, nbytes)
        return queue

    def queue_writes(self, ptr, nbytes, value, queue):
        """A consumer handed `ptr` on `queue` writes there: a raw copy where the queue is in
        order, dpnp where it is not."""
        if queue.is_in_order:
            return self.memcpy_writes(ptr, nbytes, value, queue)
        return self.dpnp_writes(self.dpt.asarray(Raw(ptr, nbytes, queue)), value, self.dpt)

    def consumer_writes(self, memory, value, protocol, stream):
        """Writes `value` over `memory` as `protocol`'s consumer; returns the devbuf stream it
        wrote on (None where it is none of devbuf's)."""
        if protocol == "dpnp":
            # dpnp imports devbuf memory zero-copy (its `__usm_ndarray__`) on the queue its
            # `sycl_queue` names, of the kind its `usm_type` says.
            array = self.dpnp.asarray(memory)
            theirs = array.get_array()
            assert theirs._pointer == memory.ptr and theirs.usm_type == memory.usm_type == memory.kind
            assert type(memory.__usm_ndarray__) is type(theirs) and array.sycl_queue == memory.sycl_queue
            queue = self.dpnp_writes(array, value, self.dpnp)
        elif protocol == "dpnp.tensor":
            queue = self.dpnp_writes(self.dpt.asarray(memory), value, self.dpt)
        elif protocol == "dpnp-dlpack":
            # dpnp.from_dlpack lands on dpnp's default queue; the array moves (no copy) to the
            # queue the export names, where this consumer's work belongs.
            array = self.dpnp.from_dlpack(memory)
            if array.sycl_queue != memory.sycl_queue:
                array = array.to_device(memory.sycl_queue)
            queue = self.dpnp_writes(array, value, self.dpnp)
        elif protocol == "suai-memcpy":
            theirs = self.dm.as_usm_memory(memory)
            queue = theirs.sycl_queue
            if queue.is_in_order:
                self.memcpy_writes(memory.ptr, memory.nbytes, value, queue)
            else:
                self.dpnp_writes(self.dpnp.asarray(memory), value, self.dpnp)
        else:
            # DLPack's stream argument: a devbuf stream's queue; the consumer writes back there.
            queue = stream.sycl_queue
            memory.__dlpack__(stream=queue, max_version=(1, 0))
            self.queue_writes(memory.ptr, memory.nbytes, value, queue)
        return self.devbuf_stream(queue, memory)

    def devbuf_stream(self, queue, memory):
        known = [*self.streams[self.device], memory.queue]
        return next((s for s in known if attribute(s, "sycl_queue") == queue), None)

    def second_consumer_reads(self, memory):
        theirs = self.dm.as_usm_memory(memory)
        queue = theirs.sycl_queue
        if not queue.is_in_order:
            return self.dpnp.asnumpy(self.dpnp.asarray(memory)).tobytes()
        host = self.dm.MemoryUSMHost(memory.nbytes, queue=queue)
        queue.memcpy(host, theirs, memory.nbytes)
        return bytes(host)

    # -- the test's own access to memory, outside devbuf ------------------------------------------

    def raw_writes(self, ptr, nbytes, kind, value, device):
        if kind == "device":
            self.private.memcpy(self.dm.as_usm_memory(Raw(ptr, nbytes, self.private)),
                                self.staged(value, nbytes, self.private), nbytes)
        else:
            ctypes.memset(ptr, value, nbytes)

    def raw_reads(self, ptr, nbytes, kind, device):
        if kind != "device":
            return ctypes.string_at(ptr, nbytes)
        host = self.dm.MemoryUSMHost(nbytes, queue=self.private)
        self.private.memcpy(host, self.dm.as_usm_memory(Raw(ptr, nbytes, self.private)), nbytes)
        return bytes(host)

    def stream_writes(self, ptr, nbytes, kind, value, stream):
        """A consumer's late write on `stream` (a devbuf Stream) of memory it holds by address."""
        self.queue_writes(ptr, nbytes, value, stream.sycl_queue)

    def context_lost(self, _err):
        return False

    def finish_all(self):
        """Waits for every queue's work (the test's knowledge, not a consumer's)."""
        for queue in [*self.late_queues, *(s.sycl_queue for s in self.streams[self.device]),
                      *(queue for _, queue in self.staging)]:
            queue.wait()
        self.late_queues.clear()
        self.staging.clear()

    def raw_stream(self, device):
        """A stream another library owns and then destroys: a user's dpctl queue, adopted."""
        queue = self.dpctl.SyclQueue(self.device.selector.removeprefix("sycl:"), property="in_order")
        return devbuf.Stream(queue), lambda: None  # dpctl's queue lives while devbuf holds it

    def producer(self, kind, value, device):
        """Memory another library made and is still writing (late): a dpnp array on dpnp's default
        queue, for devbuf to import."""
        array = self.dpnp.empty(self.nbytes, dtype="uint8", usm_type=kind)
        self.dpnp_writes(array, value, self.dpnp)
        return array

    def foreign_dlpack(self, array):
        return array


class TheirStream:
    """Another library's stream object, as the CUDA stream protocol hands it over; once closed it
    no longer names its stream, as cuda.core's `Stream.close()` leaves it."""

    def __init__(self, handle):
        self.handle = handle

    def __cuda_stream__(self):
        if self.handle is None:
            raise RuntimeError("Stream has been closed")
        return (0, self.handle)


class Cuda:
    name = "cuda"
    nbytes = 1 << 20
    kinds = ["device", "host", "shared"]
    protocols = ["cai", "cai-no-stream", "dlpack-stream", "dlpack-none", "exchange"]
    # The protocols whose consumers read through the object (CAI; the exchange API's bare
    # DLTensor, which owns nothing): the object keeps its size from then on.
    anchoring = {"cai", "cai-no-stream", "exchange"}

    def __init__(self):
        sys.path.insert(0, HERE)
        from consumer import load

        # Numba's memory manager is chosen before Numba makes its context.
        from numba import cuda as numba_cuda

        from devbuf.allocators.numba import DevbufNumbaManager

        numba_cuda.set_memory_manager(DevbufNumbaManager)
        self.numba = numba_cuda
        self.consumer = load()
        cu = self.cu = ctypes.CDLL("libcuda.so.1")
        self.ok(cu.cuInit(0))
        self.devices = [devbuf.Device("cuda:0"), devbuf.Device("cuda:1")]
        self.device = self.devices[0]
        self.contexts, self.scratch, self.private = {}, {}, {}
        for index, device in enumerate(self.devices):
            handle, context = ctypes.c_int(), ctypes.c_void_p()
            self.ok(cu.cuDeviceGet(ctypes.byref(handle), index))
            self.ok(cu.cuDevicePrimaryCtxRetain(ctypes.byref(context), handle))
            self.contexts[device] = context
            with self.on(device):
                scratch = ctypes.c_uint64()
                self.ok(cu.cuMemAlloc_v2(ctypes.byref(scratch), 64))
                self.scratch[device] = scratch.value
                self.private[device] = self.new_stream()
        self.ok(cu.cuCtxPushCurrent_v2(self.contexts[self.device]))
        # devbuf's own streams, a stream adopted by handle (the CuPy plugin's way), and one adopted
        # through the CUDA stream protocol, on each device.
        self.streams = {}
        for device in self.devices:
            with self.on(device):
                theirs = [self.new_stream(), self.new_stream()]
            self.streams[device] = [
                devbuf.Stream(device), devbuf.Stream(device),
                devbuf.Stream.from_handle(theirs[0], device, owner=self),
                devbuf.Stream(TheirStream(theirs[1])),
            ]
        get = ctypes.pythonapi.PyCapsule_GetPointer
        get.restype, get.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
        self.capsule_pointer = get
        self.ipc_reader = None

    @staticmethod
    def ok(result):
        assert result == 0, f"CUresult {result}"

    def on(self, device):
        backend = self

        class Current:
            def __enter__(self):
                backend.ok(backend.cu.cuCtxPushCurrent_v2(backend.contexts[device]))

            def __exit__(self, *exc):
                backend.ok(backend.cu.cuCtxPopCurrent_v2(ctypes.byref(ctypes.c_void_p())))

        return Current()

    def new_stream(self):
        stream = ctypes.c_void_p()
        self.ok(self.cu.cuStreamCreate(ctypes.byref(stream), 1))  # CU_STREAM_NON_BLOCKING
        return stream.value

    def memset(self, ptr, nbytes, value, stream, device):
        with self.on(device):
            for _ in range(3):  # queued first, so that the write lands late
                self.ok(self.cu.cuMemsetD8Async(ctypes.c_uint64(self.scratch[device]), 0, 64, ctypes.c_void_p(stream)))
            self.ok(self.cu.cuMemsetD8Async(ctypes.c_uint64(ptr), ctypes.c_ubyte(value),
                                            ctypes.c_size_t(nbytes), ctypes.c_void_p(stream)))

    # -- consumers of exported memory ------------------------------------------------------------

    def consumer_writes(self, memory, value, protocol, stream):
        """Writes `value` over `memory` as `protocol`'s consumer; returns the devbuf stream it
        wrote on (None for the legacy default stream)."""
        if protocol in ("cai", "cai-no-stream"):
            devbuf.set_cai_export_stream(protocol == "cai")
            try:
                interface = memory.__cuda_array_interface__
            finally:
                devbuf.set_cai_export_stream(True)
            handle = interface["stream"] or 1
            data = interface["data"][0]
            if protocol == "cai-no-stream":
                # The option hands synchronization to the user (CAI v3's producer option, as
                # devbuf documents it): the user waits for the work pending on the memory, other
                # consumers' on the streams devbuf handed out included, before this consumer writes.
                memory.buffer.synchronize()
        elif protocol in ("dlpack-stream", "dlpack-none"):
            handle = stream.stream if protocol == "dlpack-stream" else None
            capsule = memory.__dlpack__(stream=handle, max_version=(1, 0))
            tensor = self.capsule_pointer(capsule, b"dltensor_versioned") + 32  # its DLTensor
            data = ctypes.c_uint64.from_address(tensor).value + ctypes.c_uint64.from_address(tensor + 40).value
            handle = handle or 1
        else:
            # The C consumer reads the table under DLPack's name; the older spelling is the same table.
            tables = (type(memory).__c_dlpack_exchange_api__, type(memory).__dlpack_c_exchange_api__)
            assert len({self.capsule_pointer(table, b"dlpack_exchange_api") for table in tables}) == 1
            data = self.consumer.describe(memory)["data"]
            handle = self.consumer.current_stream(memory, *memory.__dlpack_device__())
        self.memset(data, memory.nbytes, value, handle, memory.device)
        known = [*self.streams[memory.device], memory.queue, memory.device.default_stream]
        return next((s for s in known if attribute(s, "stream") == handle), None)

    def second_consumer_reads(self, memory):
        # CAI v3: a consumer on its own stream waits for the stream the export names.
        interface = memory.__cuda_array_interface__
        private = self.private[memory.device]
        with self.on(memory.device):
            if interface["stream"] is not None:
                event = ctypes.c_void_p()
                self.ok(self.cu.cuEventCreate(ctypes.byref(event), 2))
                self.ok(self.cu.cuEventRecord(event, ctypes.c_void_p(interface["stream"])))
                self.ok(self.cu.cuStreamWaitEvent(ctypes.c_void_p(private), event, 0))
                self.ok(self.cu.cuEventDestroy_v2(event))
            return self.device_to_host(interface["data"][0], memory.nbytes, private)

    def device_to_host(self, ptr, nbytes, stream):
        host = ctypes.create_string_buffer(nbytes)
        self.ok(self.cu.cuMemcpyDtoHAsync_v2(host, ctypes.c_uint64(ptr), ctypes.c_size_t(nbytes), ctypes.c_void_p(stream)))
        self.ok(self.cu.cuStreamSynchronize(ctypes.c_void_p(stream)))
        return host.raw

    # -- the test's own access to memory, outside devbuf ------------------------------------------

    def raw_writes(self, ptr, nbytes, kind, value, device):
        if kind != "device":
            ctypes.memset(ptr, value, nbytes)
            return
        with self.on(device):
            private = ctypes.c_void_p(self.private[device])
            self.ok(self.cu.cuMemsetD8Async(ctypes.c_uint64(ptr), ctypes.c_ubyte(value), ctypes.c_size_t(nbytes), private))
            self.ok(self.cu.cuStreamSynchronize(private))

    def raw_reads(self, ptr, nbytes, kind, device):
        if kind != "device":
            return ctypes.string_at(ptr, nbytes)
        with self.on(device):
            return self.device_to_host(ptr, nbytes, self.private[device])

    def stream_writes(self, ptr, nbytes, kind, value, stream):
        self.memset(ptr, nbytes, value, stream.stream or 1, stream.device)

    def context_lost(self, err):
        """Whether the test driver's context is gone (a sticky error: every call fails after it)."""
        return "ILLEGAL_ADDRESS" in str(err) or self.cu.cuCtxSynchronize() == 700

    def finish_all(self):
        for device in self.devices:
            with self.on(device):
                self.ok(self.cu.cuCtxSynchronize())

    def raw_stream(self, device):
        """A stream another library owns and then destroys while devbuf still holds its object
        (cuda.core's `Stream.close()`), adopted through the stream protocol; returns it and what
        destroys it."""
        with self.on(device):
            handle = self.new_stream()
        theirs = TheirStream(handle)

        def destroy():
            theirs.handle = None
            with self.on(device):
                self.ok(self.cu.cuStreamDestroy_v2(ctypes.c_void_p(handle)))

        return devbuf.Stream(theirs), destroy

    def producer(self, kind, value, device):
        """Memory another library made and is still writing (late) on its own stream: CAI with
        that stream, as CAI v3 tells its consumer to wait for."""
        return Produced(self, kind, value, device)

    def foreign_dlpack(self, produced):
        return produced

    # -- IPC: a second process opens what devbuf shares -------------------------------------------

    def ipc_reads(self, handle):
        if self.ipc_reader is None:
            self.ipc_reader = subprocess.Popen(
                [sys.executable, os.path.join(HERE, "ordering_ipc_reader.py")],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
            )
        self.ipc_reader.stdin.write(bytes(handle).hex() + "\n")
        self.ipc_reader.stdin.flush()
        answer = self.ipc_reader.stdout.readline()
        assert answer, "the IPC reader process died"
        return zlib.decompress(bytes.fromhex(answer.strip()))


class Produced:
    """CUDA memory another library allocated (the driver's own call) and is writing late on a
    stream of its own: CAI v3 with that `stream`, and DLPack that makes the consumer's stream wait
    for it, as the protocols tell a producer to."""

    def __init__(self, backend, kind, value, device):
        self.backend, self.device, self.kind, self.nbytes = backend, device, kind, backend.nbytes
        self.tensors = []  # the DLPack tensors handed out, alive as long as this owner
        cu = backend.cu
        with backend.on(device):
            self.stream = backend.new_stream()
            ptr = ctypes.c_uint64()
            if kind == "device":
                backend.ok(cu.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(self.nbytes)))
            else:
                backend.ok(cu.cuMemAllocManaged(ctypes.byref(ptr), ctypes.c_size_t(self.nbytes), 1))
        self.ptr = ptr.value
        backend.memset(self.ptr, self.nbytes, value, self.stream, device)
        self.__cuda_array_interface__ = {
            "data": (self.ptr, False), "shape": (self.nbytes,), "typestr": "|u1", "version": 3, "stream": self.stream,
        }

    def __dlpack_device__(self):
        return (KDL_CUDA if self.kind == "device" else KDL_CUDA_MANAGED, self.device.index)

    def __dlpack__(self, stream=None, max_version=None, **_):
        backend = self.backend
        if stream != -1:  # None: the legacy default stream (DLPack's rule for CUDA)
            with backend.on(self.device):
                event = ctypes.c_void_p()
                backend.ok(backend.cu.cuEventCreate(ctypes.byref(event), 2))
                backend.ok(backend.cu.cuEventRecord(event, ctypes.c_void_p(self.stream)))
                backend.ok(backend.cu.cuStreamWaitEvent(ctypes.c_void_p(stream or 1), event, 0))
                backend.ok(backend.cu.cuEventDestroy_v2(event))
        tensor = CraftedTensor(data=self.ptr, device=self.__dlpack_device__(), shape=(self.nbytes,), dtype=(1, 8, 1))
        self.tensors.append(tensor)
        return tensor.capsule()

    def __del__(self):
        backend = self.backend
        with backend.on(self.device):
            backend.ok(backend.cu.cuCtxSynchronize())  # a careful owner: its work done first
            backend.ok(backend.cu.cuMemFree_v2(ctypes.c_uint64(self.ptr)))
            backend.ok(backend.cu.cuStreamDestroy_v2(ctypes.c_void_p(self.stream)))
