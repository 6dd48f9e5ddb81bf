"""`StreamPool`: a fixed set of streams on one device, handed out in turn (RMM's
`CudaStreamPool`), for spreading independent work over streams without making one per task."""

import itertools
from typing import Any

from ._devbuf import Stream


class StreamPool:
    """`pool_size` new streams on `device` (None: the default device), each made as
    ``Stream(device, non_blocking=..., priority=...)`` makes one. ``get_stream()`` hands them out
    in turn, ``get_stream(i)`` gives stream ``i % pool_size``, as RMM's pool does."""

    def __init__(self, device: Any = None, pool_size: int = 16, *, non_blocking: bool | None = None,
                 priority: int | None = None) -> None:
        if isinstance(pool_size, bool) or not isinstance(pool_size, int) or pool_size < 1:
            raise ValueError(f"pool_size: expected a positive int, got {pool_size!r}")
        self._streams = tuple(Stream(device, non_blocking=non_blocking, priority=priority) for _ in range(pool_size))
        # next() of an itertools.count is one C call: atomic under the GIL, as the pool's counter.
        self._next = itertools.count()

    def get_stream(self, stream_id: int | None = None) -> Stream:
        """The next stream in turn, or, given `stream_id`, stream ``stream_id % pool_size``."""
        index = next(self._next) if stream_id is None else stream_id
        return self._streams[index % len(self._streams)]

    def get_pool_size(self) -> int:
        return len(self._streams)

    def __len__(self) -> int:
        return len(self._streams)

    def __repr__(self) -> str:
        return f"<devbuf.StreamPool of {len(self._streams)} streams on {self._streams[0].device.selector!r}>"
