"""PyTorch's pluggable allocator: PyTorch's CUDA tensors allocate from devbuf's current memory
resource for device memory of their device, on PyTorch's stream, as RMM's
``rmm.allocators.torch.rmm_torch_allocator`` does for RMM.

.. example: needs gpu torch

PyTorch's CUDA tensors from a pool of devbuf's::

    import torch, devbuf.mr
    from devbuf.allocators.torch import devbuf_torch_allocator

    pool = devbuf.mr.PoolMemoryResource(devbuf.mr.QueueMemoryResource("cuda:0"))
    devbuf.mr.set_current_device_resource(pool, kind="device")
    torch.cuda.memory.change_current_allocator(devbuf_torch_allocator)  # before any CUDA tensor
    t = torch.zeros(1 << 20, device="cuda")                              # sub-allocated from the pool

``torch.cuda.memory.CUDAPluggableAllocator`` loads C functions from a shared library: they are
devbuf's extension module's own (``devbuf_torch_alloc``, ``devbuf_torch_free``), so they share its
current resources. PyTorch's stream waits for each allocation, and the memory goes back after the
work PyTorch's stream had enqueued when PyTorch freed it; an allocation devbuf cannot make is a
null pointer, which PyTorch raises as out of memory (devbuf's reason goes to stderr).
"""

from torch.cuda.memory import CUDAPluggableAllocator

from .. import _devbuf

__all__ = ["LIBRARY", "devbuf_torch_allocator"]

#: The shared library that holds the allocator's C functions: devbuf's extension module.
LIBRARY = _devbuf.__file__
#: The allocator, for ``torch.cuda.memory.change_current_allocator(devbuf_torch_allocator)``: a
#: ``torch.cuda.memory.CUDAPluggableAllocator`` of ``devbuf_torch_alloc`` and
#: ``devbuf_torch_free`` in :data:`LIBRARY`.
devbuf_torch_allocator = CUDAPluggableAllocator(LIBRARY, "devbuf_torch_alloc", "devbuf_torch_free")
