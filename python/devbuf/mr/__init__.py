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
`set_logging_level(level_enum.trace)` and kin are RMM's switches of devbuf's debug log.
"""

from .._devbuf import (
    AsyncMemoryResource,
    BinningMemoryResource,
    DeviceMemoryResource,
    FailureCallbackResourceAdaptor,
    FixedSizeMemoryResource,
    LimitingResourceAdaptor,
    LoggingResourceAdaptor,
    ManagedMemoryResource,
    MemoryResource,
    PinnedHostMemoryResource,
    PoolMemoryResource,
    PrefetchResourceAdaptor,
    QueueMemoryResource,
    StatisticsResourceAdaptor,
    TrackingResourceAdaptor,
    get_current_device_resource,
    parse_bytes,
    replay,
    reset_current_device_resource,
    set_current_device_resource,
)
from . import statistics
from ._debug_log import (
    flush_logger,
    get_flush_level,
    get_logging_level,
    level_enum,
    set_flush_level,
    set_logging_level,
    should_log,
)
from ._resources import ArenaMemoryResource, CallbackMemoryResource, ResourceAdaptor
from ._setup import (
    available_device_memory,
    disable_logging,
    enable_logging,
    flush_logs,
    get_log_filenames,
    is_initialized,
    register_reinitialize_hook,
    reinitialize,
    unregister_reinitialize_hook,
)

__all__ = [
    "ArenaMemoryResource",
    "AsyncMemoryResource",
    "BinningMemoryResource",
    "CallbackMemoryResource",
    "DeviceMemoryResource",
    "FailureCallbackResourceAdaptor",
    "FixedSizeMemoryResource",
    "LimitingResourceAdaptor",
    "LoggingResourceAdaptor",
    "ManagedMemoryResource",
    "MemoryResource",
    "PinnedHostMemoryResource",
    "PoolMemoryResource",
    "PrefetchResourceAdaptor",
    "QueueMemoryResource",
    "ResourceAdaptor",
    "StatisticsResourceAdaptor",
    "TrackingResourceAdaptor",
    "available_device_memory",
    "disable_logging",
    "enable_logging",
    "flush_logger",
    "flush_logs",
    "get_current_device_resource",
    "get_flush_level",
    "get_log_filenames",
    "get_logging_level",
    "is_initialized",
    "level_enum",
    "parse_bytes",
    "register_reinitialize_hook",
    "reinitialize",
    "replay",
    "reset_current_device_resource",
    "set_current_device_resource",
    "set_flush_level",
    "set_logging_level",
    "should_log",
    "statistics",
    "unregister_reinitialize_hook",
]
