"""The ordering machine's rules about memory resources and the allocator entry points other
libraries load (ordering_machine.py): `deallocate(stream=)` on every resource and adaptor followed by
a later owner of the block, `Buffer.from_handle` deleters and owners, and the PyTorch, CuPy and
Numba entry points with their streams."""

import ctypes
import functools
import io
import os
import time

import numpy as np
from hypothesis import strategies as st
from hypothesis.stateful import precondition, rule

import devbuf
import devbuf.mr as mr
from ordering_model import MEMORIES, SOME_STREAM, STREAMS, VALUES, Base, Block, Held, step, uniform

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


def one_block_pool(upstream, kind, nbytes):
    """A pool at its maximum with one block of `nbytes`."""
    return mr.PoolMemoryResource(upstream, nbytes, nbytes, kind=kind)


# The resources that serve one kind of memory, whatever kind is asked (RMM's CudaMemoryResource,
# ManagedMemoryResource and PinnedHostMemoryResource).
ONE_KIND = {"DeviceMemoryResource": "device", "ManagedMemoryResource": "shared", "PinnedHostMemoryResource": "host"}
# The resources made per kind ("<name> <kind>"): pools of one kind of memory.
PER_KIND = ("one-block pool", "one-block pool over an AsyncMemoryResource", "AsyncMemoryResource",
            "AsyncMemoryResource with a release threshold")


def make_resources(device, nbytes, kinds, directory):
    """Every resource and adaptor of devbuf.mr over `device`'s queue, by name; those of one kind
    of memory per kind, under "<name> <kind>"."""
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
        "DeviceMemoryResource": mr.DeviceMemoryResource(device),
        "ManagedMemoryResource": mr.ManagedMemoryResource(device),
        "PinnedHostMemoryResource": mr.PinnedHostMemoryResource(device),
    }
    for kind in kinds:
        resources[f"one-block pool {kind}"] = one_block_pool(queue, kind, nbytes)
        # A stream-ordered pool (RMM's CudaAsyncMemoryResource) keeps what is freed until release();
        # with a threshold of 0 it gives its empty blocks back after every free.
        kept = mr.AsyncMemoryResource(device, kind=kind)
        returning = mr.AsyncMemoryResource(device, kind=kind, initial_pool_size=nbytes, release_threshold=0)
        assert (kept.release_threshold, returning.release_threshold) == (None, 0)
        resources[f"AsyncMemoryResource {kind}"] = kept
        resources[f"AsyncMemoryResource with a release threshold {kind}"] = returning
        # A full pool over it waits for a block whose free is pending.
        resources[f"one-block pool over an AsyncMemoryResource {kind}"] = one_block_pool(kept, kind, nbytes)
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
    "StatisticsResourceAdaptor over a PoolMemoryResource", *ONE_KIND, *PER_KIND,
])


class ResourceRules(Base):
    def resource(self, name, kind, held=True):
        """The resource `name` draws for `kind` and the kind of memory it serves (a resource of
        one kind serves its own); a one-block pool only where its block is not held beyond the
        step (elsewhere a second holder would exhaust it: a MemoryError the machine does not
        test), else the pool it is made over."""
        if name in ONE_KIND:
            return self.resources[name], ONE_KIND[name]
        if name.startswith("one-block pool") and held:
            name = "AsyncMemoryResource" if name.endswith("AsyncMemoryResource") else "PoolMemoryResource"
            return self.resource(name, kind)
        if name in PER_KIND:
            return self.resources[f"{name} {kind}"], kind
        return self.resources[name], kind

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

    @rule(kind=st.sampled_from(["shared", "host", "device"]), resource=RESOURCES, stream=STREAMS,
          stream_ordered=st.booleans(), value=VALUES, then=st.sampled_from(["reuse", "release", "replay"]),
          later=SOME_STREAM)
    @step
    def deallocate_on_stream(self, kind, resource, stream, stream_ordered, value, then, later):
        """RMM's contract: `deallocate(ptr, nbytes, kind, stream=S)` frees after the work enqueued on
        S so far; a later owner of memory from the resource writes and reads it. A stream-ordered
        pool (AsyncMemoryResource, made for the step: its size is then the step's alone) gives
        back upstream only blocks whose work is done: on release(), and with a release threshold
        after every free."""
        backend, nbytes, kind = self.backend, self.backend.nbytes, self.kind(kind)
        if resource.startswith("AsyncMemoryResource"):
            threshold = 0 if resource.endswith("threshold") else None
            source = mr.AsyncMemoryResource(backend.device, kind=kind, initial_pool_size=nbytes,
                                            release_threshold=threshold)
            assert source.release_threshold == threshold and source.pool_size() >= nbytes
        else:
            source, kind = self.resource(resource, kind, held=False)
        on = self.stream_on(backend.device, stream)
        ptr = source.allocate(nbytes, kind, stream=on if stream_ordered else None)
        if not stream_ordered and on is not None:
            # RMM's contract: memory allocated without a stream is ready on the resource's own
            # queue; another stream uses it once that queue's work is done.
            source.queue.synchronize()
        backend.stream_writes(ptr, nbytes, kind, 255 - value, on)
        source.deallocate(ptr, nbytes, kind, stream=on)
        if then == "release" and isinstance(source, (mr.PoolMemoryResource, mr.AsyncMemoryResource)):
            source.release()
        elif then == "replay":
            mr.replay(self.replay_log, source, kind)
        self.later_owner(source, kind, value, self.stream_on(backend.device, later))
        if isinstance(source, mr.AsyncMemoryResource):
            # Every block's work is done (later_owner waited for every queue) and none is handed
            # out: release() gives them all back; with a release threshold, the next free does (a
            # block whose work was still running at the last free stayed, as it must). A SYCL
            # runtime reports a finished barrier complete after its bookkeeping, milliseconds
            # later when its threads wait for a core: asked again until it has, for a second.
            deadline = time.monotonic() + 1
            while True:
                if threshold is None:
                    source.release()
                else:
                    source.deallocate(source.allocate(1, kind), 1, kind)
                if source.pool_size() == 0 or time.monotonic() > deadline:
                    break
                time.sleep(0.001)
            assert source.pool_size() == 0, f"{resource} holds {source.pool_size()} bytes with nothing handed out"

    @rule(target=MEMORIES, kind=st.sampled_from(["shared", "host", "device"]), resource=RESOURCES,
          deleter=st.booleans(), value=VALUES)
    @step
    def from_handle(self, kind, resource, deleter, value):
        """cuda.core's way to wrap memory a resource handed out: the deleter (or the owner's
        release) gives it back once nothing uses it."""
        nbytes, device = self.backend.nbytes, self.backend.device
        source, kind = self.resource(resource, self.kind(kind))

        def wrap():
            ptr = source.allocate(nbytes, kind)
            if deleter:
                return devbuf.Buffer.from_handle(ptr, nbytes, device,
                                                 deleter=functools.partial(source.deallocate, ptr, nbytes, kind))
            return devbuf.Buffer.from_handle(ptr, nbytes, device, owner=Owner(source, ptr, nbytes, kind))

        obj = wrap()
        return self.write_initial(Held(obj, Block(obj, wrap, foreign=True)), value, from_host=False)

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
        source, kind = self.resource(resource, "device")  # RMM's users set a managed resource too
        mr.set_current_device_resource(source, kind="device")
        try:
            ptr = alloc(nbytes, 0, handle)
            assert ptr, "devbuf_torch_alloc returned null"
            backend.memset(ptr, nbytes, 255 - value, handle or 1, device)
            free(ptr, nbytes, 0, handle)
            again = alloc(nbytes, 0, None if after is None else after.stream)
            (after or device.default_stream).synchronize()  # PyTorch's stream had waited for it
            backend.raw_writes(again, nbytes, kind, value, device)
            backend.finish_all()
            seen = backend.raw_reads(again, nbytes, kind, device)
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
        source, kind = self.resource(resource, "device")
        mr.set_current_device_resource(source, kind="device")
        try:
            with cupy.cuda.Stream(non_blocking=True) as theirs:
                memory = devbuf_cupy_allocator(nbytes)
                backend.memset(memory.ptr, nbytes, 255 - value, theirs.ptr, device)
                del memory
                again = devbuf_cupy_allocator(nbytes)
                theirs.synchronize()  # the allocation is CuPy's stream's work
                backend.raw_writes(again.ptr, nbytes, kind, value, device)
                backend.finish_all()
                seen = backend.raw_reads(again.ptr, nbytes, kind, device)
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
        mr.set_current_device_resource(self.resource(resource, "device")[0], kind="device")
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


@functools.cache
def cupy_runs():
    """Whether CuPy is installed and sees a GPU (it cannot run on the CUDA test driver)."""
    try:
        import cupy

        return cupy.cuda.is_available()
    except ImportError:
        return False
