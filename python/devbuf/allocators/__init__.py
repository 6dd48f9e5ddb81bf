"""Allocator plugins: other libraries allocate from devbuf's current memory resource (RMM's
``rmm.allocators`` in shape).

- :mod:`devbuf.allocators.numba`: Numba's External Memory Management (EMM) plugin.
- :mod:`devbuf.allocators.cupy`: ``devbuf_cupy_allocator``, for ``cupy.cuda.set_allocator``.
- :mod:`devbuf.allocators.torch`: ``devbuf_torch_allocator``, a PyTorch pluggable allocator, for
  ``torch.cuda.memory.change_current_allocator``.
"""
