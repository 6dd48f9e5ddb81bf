"""Numba's External Memory Management (EMM) plugin: Numba's device arrays allocate from devbuf's
current memory resource of their device (a pool, a limit, statistics, a leak report), as RMM's
``rmm.allocators.numba.RMMNumbaManager`` does for RMM.

.. example: needs cuda numba

Numba's device arrays from a pool of devbuf's::

    import devbuf.mr
    from numba import cuda
    from devbuf.allocators.numba import DevbufNumbaManager

    pool = devbuf.mr.PoolMemoryResource(devbuf.mr.QueueMemoryResource("cuda:0"))
    devbuf.mr.set_current_device_resource(pool, kind="device")
    cuda.set_memory_manager(DevbufNumbaManager)   # before Numba's first CUDA call
    d = cuda.device_array(1 << 20)                # sub-allocated from the pool

or ``NUMBA_CUDA_MEMORY_MANAGER=devbuf.allocators.numba`` in the environment.

Ordering: Numba works on streams devbuf does not know. Each allocation is complete before Numba
sees it (devbuf's pending work on it, a stream-ordered allocation included, is waited for), and
the memory counts as handed to another library: when Numba lets go of it, devbuf waits for the
device before its pool hands it out again, as ``cuMemFree`` does.
"""

import ctypes
import weakref

import devbuf
from numba.cuda import GetIpcHandleMixin, HostOnlyCUDAMemoryManager, MemoryInfo
from numba.cuda.cudadrv.driver import CudaAPIError, MemoryPointer, driver

__all__ = ["DevbufNumbaManager"]


def _release(buffer: devbuf.Buffer):
    """The finalizer of Numba's pointer: holds the buffer until Numba lets go of the memory."""
    held = [buffer]

    def release() -> None:
        held.clear()

    return release


class DevbufNumbaManager(GetIpcHandleMixin, HostOnlyCUDAMemoryManager):
    """Device memory for Numba from devbuf's current resource of the context's device (the
    device's own allocator when none is set); pinned and mapped host memory stay Numba's."""

    def initialize(self) -> None:
        self._queue = devbuf.Device(f"cuda:{self.context.device.id}").default_stream

    def memalloc(self, size: int) -> MemoryPointer:
        buffer = devbuf.alloc(size, "device", device=self._queue)
        # Handing the memory over through CAI marks it exported (devbuf's release then waits for
        # the device); its `stream`, when set, is work Numba must not overtake.
        interface = buffer.__cuda_array_interface__
        if interface["stream"] is not None:
            buffer.synchronize()
        pointer = ctypes.c_void_p(interface["data"][0])
        return MemoryPointer(weakref.proxy(self.context), pointer, size, finalizer=_release(buffer))

    def get_ipc_handle(self, memory):
        try:
            return super().get_ipc_handle(memory)
        except CudaAPIError as err:
            raise RuntimeError(
                f"devbuf's Numba allocator: the driver cannot share this memory through CUDA IPC "
                f"({err}); memory from a stream-ordered pool cannot be, allocate it with "
                f"devbuf.alloc(..., ipc=True) and share devbuf's IpcHandle instead"
            ) from err

    def get_memory_info(self) -> MemoryInfo:
        free, total = driver.cuMemGetInfo()
        return MemoryInfo(free=free, total=total)

    @property
    def interface_version(self) -> int:
        return 1


# What NUMBA_CUDA_MEMORY_MANAGER=devbuf.allocators.numba loads.
_numba_memory_manager = DevbufNumbaManager
