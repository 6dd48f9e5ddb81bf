"""RMM's resources that are devbuf's under another shape: the arena (devbuf's pool, said so), the
resource of two callbacks, and the class of the adaptors."""

import abc
from typing import Any, Callable

from .._devbuf import (
    BinningMemoryResource,
    FailureCallbackResourceAdaptor,
    FixedSizeMemoryResource,
    LimitingResourceAdaptor,
    LoggingResourceAdaptor,
    MemoryResource,
    PoolMemoryResource,
    PrefetchResourceAdaptor,
    StatisticsResourceAdaptor,
    TrackingResourceAdaptor,
)


class ResourceAdaptor(abc.ABC):
    """The resources that wrap another, their ``upstream_mr`` (RMM's ``UpstreamResourceAdaptor``):
    ``isinstance(mr, ResourceAdaptor)`` tells an adaptor from a resource that allocates itself.
    devbuf's adaptor classes are registered here (every class of ``devbuf.mr`` made of an
    ``upstream_mr``); a resource written in Python that wraps another may subclass it."""


for _adaptor in (BinningMemoryResource, FailureCallbackResourceAdaptor, FixedSizeMemoryResource,
                 LimitingResourceAdaptor, LoggingResourceAdaptor, PoolMemoryResource,
                 PrefetchResourceAdaptor, StatisticsResourceAdaptor, TrackingResourceAdaptor):
    ResourceAdaptor.register(_adaptor)


class ArenaMemoryResource(PoolMemoryResource):
    """RMM's `ArenaMemoryResource(upstream_mr, arena_size=None, dump_log_on_failure=False)` under
    its name, served by devbuf's pool: `arena_size` is the pool's `initial_pool_size`. devbuf's
    pool already keeps small blocks per thread (its "recent blocks"), which is what an arena's
    per-thread arenas buy; a separate arena allocator has not been measured to pay for itself
    against it, so there is none. `dump_log_on_failure` is accepted and has nothing to dump:
    a failure's MemoryError names the sizes."""

    def __new__(cls, upstream_mr: MemoryResource, arena_size: int | str | None = None,
                dump_log_on_failure: bool = False, **kwargs: Any) -> "ArenaMemoryResource":
        return super().__new__(cls, upstream_mr, arena_size, **kwargs)


class CallbackMemoryResource(MemoryResource):
    """RMM's `CallbackMemoryResource(allocate_func, deallocate_func)`: a resource of two
    functions, `allocate_func(nbytes, stream)` returning an address and `deallocate_func(ptr,
    nbytes, stream)`. `stream` is the devbuf.Stream of the allocation when the caller named one,
    else None (so that `upstream.allocate(nbytes, stream)` asks for the upstream's own kind).
    The resource is on `device` (default: the default device); what the functions return is
    checked as any Python resource's (see the guide, "Resources written in Python"). As RMM's,
    an exception of `allocate_func` other than MemoryError and RuntimeError reaches the caller
    as a RuntimeError with its message (the exception its cause); the interpreter's own exits
    (KeyboardInterrupt, SystemExit) pass as raised."""

    def __init__(self, allocate_func: Callable[[int, Any], int],
                 deallocate_func: Callable[[int, int, Any], None], device: Any = None) -> None:
        super().__init__(device)
        self.allocate_func = allocate_func
        self.deallocate_func = deallocate_func

    def allocate(self, nbytes: int, kind: str | None = None, *, stream: Any = None) -> int:
        """`allocate_func(nbytes, stream)`."""
        try:
            return self.allocate_func(nbytes, stream)
        except (MemoryError, RuntimeError, KeyboardInterrupt, SystemExit, GeneratorExit):
            raise
        except BaseException as err:  # RMM's contract: any other failure is a RuntimeError
            raise RuntimeError(str(err)) from err

    def deallocate(self, ptr: int, nbytes: int, kind: str | None = None, *, stream: Any = None) -> None:
        """`deallocate_func(ptr, nbytes, stream)`."""
        self.deallocate_func(ptr, nbytes, stream)
