"""Memory resources, with RMM's names: a pool shared by every library in the process, bins of
fixed-size blocks, a limit, statistics, a leak report, a log (and its replay) and a callback on
out-of-memory, on every backend, and resources written in Python.

.. example: needs sycl

One pool for every allocation on a device, RMM's way::

    import devbuf, devbuf.mr

    pool = devbuf.mr.PoolMemoryResource(devbuf.mr.QueueMemoryResource("sycl"), maximum_pool_size=1 << 30)
    devbuf.mr.set_current_device_resource(pool)    # devbuf.alloc on that device now uses it
    buf = devbuf.alloc(1024, "shared", mr=pool)   # or name a resource per call
    ptr = pool.allocate(1024, "shared")           # or take memory by address, RMM's way...
    pool.deallocate(ptr, 1024, "shared")          # ...and give it back the same way

`devbuf.mr.statistics` is RMM's `rmm.statistics`: `with devbuf.mr.statistics():` counts a block's
allocations, and `devbuf.mr.statistics.profiler` which Python function or line allocated what.
"""

from .._devbuf import (
    BinningMemoryResource,
    FailureCallbackResourceAdaptor,
    FixedSizeMemoryResource,
    LimitingResourceAdaptor,
    LoggingResourceAdaptor,
    MemoryResource,
    PoolMemoryResource,
    PrefetchResourceAdaptor,
    QueueMemoryResource,
    StatisticsResourceAdaptor,
    TrackingResourceAdaptor,
    get_current_device_resource,
    replay,
    reset_current_device_resource,
    set_current_device_resource,
)
from . import statistics

__all__ = [
    "BinningMemoryResource",
    "FailureCallbackResourceAdaptor",
    "FixedSizeMemoryResource",
    "LimitingResourceAdaptor",
    "LoggingResourceAdaptor",
    "MemoryResource",
    "PoolMemoryResource",
    "PrefetchResourceAdaptor",
    "QueueMemoryResource",
    "StatisticsResourceAdaptor",
    "TrackingResourceAdaptor",
    "get_current_device_resource",
    "replay",
    "reset_current_device_resource",
    "set_current_device_resource",
    "statistics",
]
