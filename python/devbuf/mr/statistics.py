"""RMM's ``rmm.statistics`` on devbuf's current resources: counts of what a block of code
allocated, and a profiler that says which Python function or line allocated what::

    import devbuf, devbuf.mr as mr
    with mr.statistics() as region:       # the current resources counted for the block
        devbuf.alloc(1024)
    print(region["peak_bytes"])

    mr.statistics.enable_statistics()     # from now on (a StatisticsResourceAdaptor current)
    @mr.statistics.profiler()
    def step(): ...
    print(mr.statistics.default_profiler_records.report())

Each function acts on the current resources of one device (``device=None``: the default
device), one per kind it has: where the kinds' current resources are several statistics adaptors,
their counters are added up (peaks then add up too: an upper bound). This module is callable:
``devbuf.mr.statistics(mr)`` is :func:`statistics`.
"""

import functools
import inspect
import sys
import threading
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, fields
from typing import Any, Literal, TypeVar

from .._devbuf import (
    Device,
    MemoryResource,
    QueueMemoryResource,
    StatisticsResourceAdaptor,
    get_current_device_resource,
    set_current_device_resource,
)

__all__ = [
    "MemoryRecord",
    "ProfilerRecords",
    "Statistics",
    "default_profiler_records",
    "descriptive_name",
    "enable_statistics",
    "get_statistics",
    "pop_statistics",
    "profiler",
    "push_statistics",
    "statistics",
]

Kind = Literal["host", "device", "shared"]
KINDS: tuple[Kind, ...] = ("host", "device", "shared")


@dataclass
class Statistics:
    """Counters of a statistics region (RMM's ``rmm.statistics.Statistics``)."""

    current_bytes: int = 0
    current_count: int = 0
    peak_bytes: int = 0
    peak_count: int = 0
    total_bytes: int = 0
    total_count: int = 0

    @classmethod
    def of(cls, counts: "dict[str, int] | Statistics") -> "Statistics":
        return cls(**{field.name: counts[field.name] for field in fields(cls)})

    def __getitem__(self, name: str) -> int:
        """``stats["peak_bytes"]``: the counters by name too, as devbuf returned them before."""
        if name not in {field.name for field in fields(self)}:
            raise KeyError(name)
        return getattr(self, name)

    def __add__(self, other: "Statistics") -> "Statistics":
        return Statistics(*(getattr(self, f.name) + getattr(other, f.name) for f in fields(self)))


def _device(device: Any) -> Device:
    return QueueMemoryResource(device).device


def _kinds(device: Device) -> list[Kind]:
    return [kind for kind in KINDS if kind in device.kinds]


def _adaptors(device: Device) -> list[StatisticsResourceAdaptor]:
    """The distinct statistics adaptors current for the device's kinds."""
    found: dict[int, StatisticsResourceAdaptor] = {}
    for kind in _kinds(device):
        current = get_current_device_resource(device, kind)
        if isinstance(current, StatisticsResourceAdaptor):
            found.setdefault(id(current), current)
    return list(found.values())


def _sum(counts: list[dict[str, int]]) -> Statistics | None:
    if not counts:
        return None
    return sum((Statistics.of(c) for c in counts[1:]), Statistics.of(counts[0]))


def enable_statistics(device: Any = None) -> None:
    """Makes each current resource of `device` that is not a StatisticsResourceAdaptor one,
    wrapping it (kinds sharing a resource share its adaptor)."""
    device = _device(device)
    wrapped: dict[Any, StatisticsResourceAdaptor] = {}
    for kind in _kinds(device):
        current = get_current_device_resource(device, kind)
        if isinstance(current, StatisticsResourceAdaptor):
            continue
        # With none set, each kind answers with a new QueueMemoryResource: one adaptor serves them.
        key = "queue" if type(current) is QueueMemoryResource else id(current)
        if key not in wrapped:
            wrapped[key] = StatisticsResourceAdaptor(current)
        set_current_device_resource(wrapped[key], kind=kind)


def get_statistics(device: Any = None) -> Statistics | None:
    """The counters of the innermost open region (of everything, when none is open) of `device`'s
    current statistics adaptors; None when statistics are not enabled."""
    counts = []
    for adaptor in _adaptors(_device(device)):
        # push_counters returns the innermost region's counters; the region it opens goes again.
        counts.append(adaptor.push_counters())
        adaptor.pop_counters()
    return _sum(counts)


def push_statistics(device: Any = None) -> Statistics | None:
    """Opens a region on `device`'s current statistics adaptors; returns the counters of the
    region it nests in, as they were, or None when statistics are not enabled."""
    return _sum([adaptor.push_counters() for adaptor in _adaptors(_device(device))])


def pop_statistics(device: Any = None) -> Statistics | None:
    """Closes the innermost region and returns its counters; None when statistics are not
    enabled. IndexError when no region is open."""
    return _sum([adaptor.pop_counters() for adaptor in _adaptors(_device(device))])


@contextmanager
def statistics(mr: MemoryResource | None = None, *, device: Any = None) -> Iterator[dict[str, int]]:
    """Counts the allocations made inside the `with` block through `mr` (a
    StatisticsResourceAdaptor), or through `device`'s current resources: those not counted yet
    are counted for the block only (RMM's ``rmm.statistics.statistics()``). Yields a dict that
    holds the region's counters (``allocation_counts``' keys) once the block ends."""
    # Adaptors that counted before the block get a region; those made for it count the block
    # from their start, with no region of their own (so that the block's code sees RMM's stack).
    restore: dict[Kind, MemoryResource] = {}
    made: list[StatisticsResourceAdaptor] = []
    if mr is not None:
        if not isinstance(mr, StatisticsResourceAdaptor):
            raise TypeError(f"statistics() needs a StatisticsResourceAdaptor, got {type(mr).__name__}")
        counting = [mr]
    else:
        resolved = _device(device)
        counting = _adaptors(resolved)
        for kind in _kinds(resolved):
            current = get_current_device_resource(resolved, kind)
            if not isinstance(current, StatisticsResourceAdaptor):
                restore[kind] = current
        enable_statistics(resolved)
        made = [adaptor for adaptor in _adaptors(resolved) if all(adaptor is not c for c in counting)]
    region: dict[str, int] = {}
    for adaptor in counting:
        adaptor.push_counters()
    try:
        yield region
    finally:
        counts = _sum([adaptor.pop_counters() for adaptor in counting] + [a.allocation_counts for a in made])
        region.update(vars(counts or Statistics()))
        for kind, resource in restore.items():
            set_current_device_resource(resource, kind=kind)


@dataclass
class MemoryRecord:
    """What one profiled function or block allocated, over all its calls."""

    num_calls: int = 0
    memory_total: int = 0
    memory_peak: int = 0

    def add(self, data: Statistics) -> None:
        self.num_calls += 1
        self.memory_total += data.total_bytes
        self.memory_peak = max(self.memory_peak, data.peak_bytes)


class ProfilerRecords:
    """The profiler's records, by the name of the function or line profiled (RMM's shape):
    ``records[descriptive_name(func)]`` is a profiled function's."""

    MemoryRecord = MemoryRecord

    def __init__(self) -> None:
        self._records: dict[str, MemoryRecord] = {}
        self._lock = threading.Lock()

    def add(self, name: str, data: Statistics) -> None:
        with self._lock:
            self._records.setdefault(name, MemoryRecord()).add(data)

    @property
    def records(self) -> dict[str, MemoryRecord]:
        with self._lock:
            return {name: MemoryRecord(**vars(record)) for name, record in self._records.items()}

    def report(self, ordered_by: str = "memory_peak") -> str:
        """A table, one line per function or line profiled, largest `ordered_by` (num_calls,
        memory_peak or memory_total) first."""
        if ordered_by not in {f.name for f in fields(MemoryRecord)}:
            raise ValueError(f"ordered_by: {ordered_by!r} is not num_calls, memory_peak or memory_total")
        rows = sorted(self.records.items(), key=lambda item: getattr(item[1], ordered_by), reverse=True)
        lines = [
            "devbuf memory profile (bytes allocated through the current statistics resources)",
            f"ordered by {ordered_by}",
            "",
            f"{'ncalls':>8}  {'memory_peak':>14}  {'memory_total':>14}  file:line(function)",
        ]
        lines += [f"{r.num_calls:>8}  {r.memory_peak:>14,}  {r.memory_total:>14,}  {name}" for name, r in rows]
        if not rows:
            lines.append("No data: nothing was profiled (is statistics enabled?)")
        return "\n".join(lines) + "\n"

    def __repr__(self) -> str:
        return self.report()


#: The records :func:`profiler` adds to when given none (RMM's
#: ``rmm.statistics.default_profiler_records``).
default_profiler_records = ProfilerRecords()


def descriptive_name(obj: Any) -> str:
    """The name the profiler records a function under, ``file:line(qualified name)`` (its first
    line); another object's is its class's qualified name (RMM's
    ``_get_descriptive_name_of_object``)."""
    func = inspect.unwrap(obj)  # a profiled function: the one it wraps
    code = getattr(func, "__code__", None)
    if code is not None:
        return f"{code.co_filename}:{code.co_firstlineno}({func.__qualname__})"
    return type(obj).__qualname__

F = TypeVar("F", bound=Callable[..., Any])


class profiler:
    """Records what a function (as a decorator) or a ``with`` block allocates through `device`'s
    current statistics resources into `records`, named ``file:line(function)``: the function's
    first line, or the line of the ``with``. Records nothing while statistics are not enabled
    (:func:`enable_statistics`, or inside ``with statistics():``)."""

    def __init__(self, *, records: ProfilerRecords = default_profiler_records, name: str = "", device: Any = None):
        self.records = records
        self.name = name
        self.device = device
        self._open = threading.local()

    def __call__(self, func: F) -> F:
        name = self.name or descriptive_name(func)
        inner = profiler(records=self.records, name=name, device=self.device)

        @functools.wraps(func)
        def profiled(*args: Any, **kwargs: Any) -> Any:
            with inner:
                return func(*args, **kwargs)

        return profiled  # type: ignore[return-value]

    def __enter__(self) -> "profiler":
        name = self.name
        if not name:
            frame = sys._getframe(1)
            name = f"{frame.f_code.co_filename}:{frame.f_lineno}({frame.f_code.co_qualname})"
        opened = push_statistics(self.device) is not None
        self._stack().append((name, opened))
        return self

    def __exit__(self, *exc: object) -> None:
        name, opened = self._stack().pop()
        if opened:
            data = pop_statistics(self.device)
            if data is not None:
                self.records.add(name, data)

    def _stack(self) -> list[tuple[str, bool]]:
        stack: list[tuple[str, bool]] | None = getattr(self._open, "stack", None)
        if stack is None:
            stack = self._open.stack = []
        return stack


class _CallableModule(types.ModuleType):
    """``devbuf.mr.statistics(...)`` is :func:`statistics`, as before it became a module."""

    def __call__(self, mr: MemoryResource | None = None, *, device: Any = None) -> Any:
        return statistics(mr, device=device)


sys.modules[__name__].__class__ = _CallableModule
