"""CuPy's allocator hook: CuPy's arrays allocate from devbuf's current memory resource for device
memory of their device (a pool, a limit, statistics, a leak report), on CuPy's current stream, as
RMM's ``rmm.allocators.cupy.rmm_cupy_allocator`` does for RMM.

.. example: needs gpu cupy

CuPy's arrays from a pool of devbuf's::

    import cupy, devbuf.mr
    from devbuf.allocators.cupy import devbuf_cupy_allocator

    pool = devbuf.mr.PoolMemoryResource(devbuf.mr.QueueMemoryResource("cuda:0"))
    devbuf.mr.set_current_device_resource(pool, kind="device")
    cupy.cuda.set_allocator(devbuf_cupy_allocator)
    a = cupy.zeros(1 << 20)                         # sub-allocated from the pool

Ordering: CuPy's current stream waits for the allocation on the resource's queue (a
stream-ordered allocation), and the memory goes back only after the work CuPy's stream had
enqueued when CuPy let go of it (``deallocate(..., stream=)``), as RMM's allocator frees on the
stream it allocated on. Work on other streams is the user's part, as with RMM.
"""

from typing import Any

import cupy

import devbuf
import devbuf.mr

__all__ = ["devbuf_cupy_allocator"]

# CUDA's legacy default stream: what CuPy's null stream (handle 0) is.
_CU_STREAM_LEGACY = 1


class _Allocation:
    """Owns memory handed to CuPy: CuPy keeps it as its pointer's owner, and its deletion gives
    the memory back on the stream it was allocated on."""

    __slots__ = ("mr", "ptr", "nbytes", "stream")

    def __init__(self, mr: devbuf.mr.MemoryResource, nbytes: int, stream: devbuf.Stream):
        self.mr, self.nbytes, self.stream = mr, nbytes, stream
        self.ptr = mr.allocate(nbytes, "device", stream=stream)

    def __del__(self) -> None:
        self.mr.deallocate(self.ptr, self.nbytes, "device", stream=self.stream)


def _current_stream(device: str) -> devbuf.Stream:
    stream = cupy.cuda.get_current_stream()
    handle = stream.ptr or _CU_STREAM_LEGACY
    return devbuf.Stream.from_handle(handle, device, owner=stream)


def devbuf_cupy_allocator(nbytes: int) -> Any:
    """What ``cupy.cuda.set_allocator`` takes: `nbytes` of device memory on CuPy's current device
    from devbuf's current resource, as a ``cupy.cuda.MemoryPointer``."""
    device_id = cupy.cuda.runtime.getDevice()
    device = f"cuda:{device_id}"
    mr = devbuf.mr.get_current_device_resource(device, "device")
    allocation = _Allocation(mr, max(nbytes, 1), _current_stream(device))
    memory = cupy.cuda.UnownedMemory(allocation.ptr, nbytes, allocation, device_id)
    return cupy.cuda.MemoryPointer(memory, 0)
