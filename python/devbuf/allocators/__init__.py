"""Allocator plugins: other libraries allocate from devbuf's current memory resource (RMM's
``rmm.allocators`` in shape).

- :mod:`devbuf.allocators.numba`: Numba's External Memory Management (EMM) plugin.
"""
