"""Memory resources, with RMM's names: a pool shared by every library in the process, bins of
fixed-size blocks, a limit, statistics, a leak report, a log (and its replay) and a callback on
out-of-memory, on every backend, and resources written in Python.

    import devbuf, devbuf.mr
    pool = devbuf.mr.PoolMemoryResource(devbuf.mr.QueueMemoryResource("sycl"), maximum_pool_size=1 << 30)
    devbuf.mr.set_current_device_resource(pool)    # devbuf.alloc on that device now uses it
    buf = devbuf.alloc(1024, "shared", mr=pool)   # or name a resource per call
    ptr = pool.allocate(1024, "shared")           # or take memory by address, RMM's way...
    pool.deallocate(ptr, 1024, "shared")          # ...and give it back the same way
"""

from contextlib import contextmanager
from typing import Iterator, Optional

from ._devbuf import (
    BinningMemoryResource,
    FailureCallbackResourceAdaptor,
    FixedSizeMemoryResource,
    LimitingResourceAdaptor,
    LoggingResourceAdaptor,
    MemoryResource,
    PoolMemoryResource,
    QueueMemoryResource,
    StatisticsResourceAdaptor,
    TrackingResourceAdaptor,
    get_current_device_resource,
    replay,
    set_current_device_resource,
)

__all__ = [
    "BinningMemoryResource",
    "FailureCallbackResourceAdaptor",
    "FixedSizeMemoryResource",
    "LimitingResourceAdaptor",
    "LoggingResourceAdaptor",
    "MemoryResource",
    "PoolMemoryResource",
    "QueueMemoryResource",
    "StatisticsResourceAdaptor",
    "TrackingResourceAdaptor",
    "get_current_device_resource",
    "replay",
    "set_current_device_resource",
    "statistics",
]


@contextmanager
def statistics(mr: Optional[StatisticsResourceAdaptor] = None) -> Iterator[dict]:
    """Counts the allocations made through `mr` (default: the current resource, which must be a
    StatisticsResourceAdaptor) inside the `with` block, between `mr.push_counters()` and
    `mr.pop_counters()`. Yields a dict that holds the region's counters (`allocation_counts`'
    keys) once the block ends."""
    if mr is None:
        mr = get_current_device_resource()
    if not isinstance(mr, StatisticsResourceAdaptor):
        raise TypeError(f"statistics() needs a StatisticsResourceAdaptor, got {type(mr).__name__}")
    region: dict = {}
    mr.push_counters()
    try:
        yield region
    finally:
        region.update(mr.pop_counters())
