"""Type stubs for devbuf's extension module."""

import os
from collections.abc import Callable, Iterator, Sequence
from types import EllipsisType
from typing import Any, Literal, NoReturn, SupportsIndex, final, overload

import numpy as np
from _typeshed import SupportsWrite
from numpy.typing import DTypeLike
from typing_extensions import Self, disjoint_base

from devbuf.mr.statistics import Statistics

_Kind = Literal["host", "device", "shared"]
_Index = SupportsIndex | slice | EllipsisType | None
_Shape = SupportsIndex | Sequence[SupportsIndex]
_Advice = Literal[
    "set_read_mostly",
    "unset_read_mostly",
    "set_preferred_location",
    "unset_preferred_location",
    "set_accessed_by",
    "unset_accessed_by",
]

# The extension module's own __all__ (pyo3 lists every name it adds, private ones included).
__all__ = [
    "__version__",
    "__git_commit__",
    "Array",
    "Buffer",
    "Device",
    "Stream",
    "Event",
    "Queue",
    "BackendInfo",
    "backends",
    "devices",
    "default_device",
    "set_default_device",
    "_default_device_reason",
    "_note_default_device_reason",
    "alloc",
    "empty",
    "zeros",
    "ones",
    "full",
    "empty_like",
    "zeros_like",
    "ones_like",
    "get_elapsed_time",
    "asarray",
    "from_dlpack",
    "set_cai_export_stream",
    "conformance_matrix",
    "conformance_checks",
    "IpcHandle",
    "open_ipc",
    "_ipc_handle_from_bytes",
    "_rebuild",
    "MemoryResource",
    "QueueMemoryResource",
    "DeviceMemoryResource",
    "ManagedMemoryResource",
    "PinnedHostMemoryResource",
    "AsyncMemoryResource",
    "parse_bytes",
    "PoolMemoryResource",
    "LimitingResourceAdaptor",
    "StatisticsResourceAdaptor",
    "TrackingResourceAdaptor",
    "FixedSizeMemoryResource",
    "BinningMemoryResource",
    "LoggingResourceAdaptor",
    "FailureCallbackResourceAdaptor",
    "PrefetchResourceAdaptor",
    "replay",
    "_debug_log_level",
    "_set_debug_log_level",
    "_debug_log_flush_level",
    "_set_debug_log_flush_level",
    "_debug_log_should_log",
    "_flush_debug_log",
    "set_current_device_resource",
    "get_current_device_resource",
    "reset_current_device_resource",
    "DeviceFallbackWarning",
]

__version__: str
# The git commit devbuf was built from; empty when built outside a git checkout (RMM's name).
__git_commit__: str

@final
class Device:
    """A device of one backend, usable or not."""

    def __new__(cls, selector: str | Device | None = None) -> Device:
        """A selector string ("cuda:0", "sycl:gpu", "host") or a Device; an int is a TypeError
        naming the selector it likely means (cuda.core's Device(0) is Device("cuda:0"))."""
    @property
    def backend(self) -> str: ...
    @property
    def index(self) -> int: ...
    @property
    def name(self) -> str: ...
    @property
    def vendor(self) -> str: ...
    @property
    def driver(self) -> str: ...
    @property
    def test_double(self) -> str | None:
        """What stands in for the hardware when a runtime's test double does (e.g. the devbuf CUDA
        test driver): nothing on such a device is a hardware result. None for real hardware."""
    @property
    def selector(self) -> str: ...
    @property
    def global_mem_size(self) -> int: ...
    @property
    def kinds(self) -> list[str]: ...
    @property
    def usable(self) -> bool: ...
    @property
    def reason(self) -> str | None: ...
    @property
    def queue(self) -> Queue: ...
    @property
    def default_stream(self) -> Stream:
        """The device's shared queue, where devbuf's work runs when no ``stream=`` is given."""
    def create_stream(self, *, non_blocking: bool = True, priority: int | None = None, timing: bool = False) -> Stream: ...
    def sync(self) -> None:
        """Blocks until the work devbuf can see on the device is done, on every backend alike: every
        devbuf stream of the device, other libraries' work on the streams and queues devbuf handed
        out, and what else the runtime lets it wait for (cuda.core's name)."""
    def synchronize(self) -> None:
        """``sync()`` under CuPy's name."""
    @property
    def mem_info(self) -> tuple[int, int]:
        """(free, total) bytes, CuPy's ``Device.mem_info``; AttributeError where the runtime does
        not report free memory (SYCL)."""
    @property
    def properties(self) -> dict[str, Any]:
        """name, vendor, driver, backend, index, selector, global_mem_size, kinds, test_double."""
    def __enter__(self) -> Device:
        """`with device:` makes this device the current thread's default until the block ends."""
    def __exit__(self, *exc_info: object) -> bool: ...

@final
class Stream:
    """An ordered stream of work on one device and context: a CUDA stream, a SYCL queue (devbuf's
    commands on it run in order). ``Queue`` is the same class under its earlier name."""

    # `device` may also be another library's stream: anything with __cuda_stream__, or a
    # dpctl.SyclQueue (handed out as it is with the memory); a Stream is returned as is.
    def __new__(
        cls,
        device: str | Device | Any | None = None,
        *,
        non_blocking: bool | None = None,
        priority: int | None = None,
        timing: bool | None = None,
    ) -> Stream:
        """``non_blocking`` (None: True) and ``priority`` as cuda.core's; ``timing`` is taken for
        cuda.core's spelling: every stream devbuf makes keeps time. With an existing stream as
        ``device``, giving any of them is a ValueError."""
    @staticmethod
    def from_handle(handle: int, device: str | Device | Stream | None = None, *, owner: Any = None) -> Stream:
        """Adopts a CUstream handle; ``owner`` (kept alive while devbuf uses it) keeps it alive.
        ``device``, when given, must be a CUDA device ("cuda", "cuda:N"): any other is a
        ValueError naming ``device``."""
    @property
    def device(self) -> Device: ...
    @property
    def backend(self) -> str: ...
    @property
    def stream(self) -> int | None: ...
    @property
    def sycl_queue(self) -> Any:
        """This SYCL queue as a dpctl.SyclQueue; AttributeError off SYCL or without dpctl."""
    def record(self, *, timing: bool = False) -> Event:
        """An Event that completes once the work enqueued on this stream so far has; with
        ``timing=True`` (every stream devbuf makes; another library's as its maker made it) it
        also keeps when, for ``end - start``."""
    def wait(self, event_or_stream: Event | Stream | None = None) -> None:
        """With an Event or a Stream: later work here waits for it on the device. Without: blocks
        the host until this stream's work is done (``synchronize()``)."""
    def synchronize(self) -> None: ...
    def query(self) -> bool:
        """Whether all work enqueued so far has completed, without waiting."""
    def alloc(self, nbytes: int, kind: _Kind = "shared", *, ipc: bool = False) -> Buffer: ...
    def _get_capsule(self) -> Any: ...
    @property
    def __cuda_stream__(self) -> Callable[[], tuple[int, int]]:
        """The CUDA stream protocol, on CUDA streams only: AttributeError elsewhere, so that
        ``hasattr`` answers."""
    @property
    def handle(self) -> int:
        """cuda.core's ``Stream.handle``: the CUstream; AttributeError off CUDA."""
    @property
    def priority(self) -> int | None:
        """The priority asked for (None: the default, or a backend without priorities);
        AttributeError for another library's adopted stream."""
    @property
    def is_nonblocking(self) -> bool: ...
    @property
    def timing(self) -> bool:
        """Whether its events can keep time: every stream devbuf makes; an adopted one as its
        maker made it."""
    def close(self) -> None:
        """cuda.core's ``Stream.close()``: later uses of the stream raise ValueError; enqueued
        work still runs and memory allocated on it stays usable. A device's shared stream
        cannot be closed."""
    def __enter__(self) -> Stream:
        """``with stream:``: the stream of the calls in the block that name none (``alloc``,
        ``copy_from``, ``fill``, ``get``, ``to_bytes``), for memory of its device."""
    def __exit__(self, *exc_info: object) -> bool: ...

Queue = Stream

@final
class Event:
    """A point in a stream's work (``Stream.record()``)."""

    def synchronize(self) -> None: ...
    def wait(self) -> None: ...
    @property
    def done(self) -> bool: ...
    def query(self) -> bool: ...
    def __sub__(self, start: Event, /) -> float:
        """Milliseconds from ``start`` to this event (both recorded with ``timing=True`` on one
        device; CUDA events of two devices are a ValueError)."""
    def __rsub__(self, end: Event, /) -> float: ...
    @property
    def stream(self) -> Stream: ...

@final
class BackendInfo:
    @property
    def name(self) -> str: ...
    @property
    def available(self) -> bool: ...
    @property
    def reason(self) -> str | None: ...
    @property
    def devices(self) -> list[Device]: ...
    @property
    def kinds(self) -> list[str]: ...
    @property
    def dlpack_device_types(self) -> dict[int, str | None]: ...
    @property
    def protocols(self) -> list[str]: ...
    @property
    def makes_streams(self) -> bool: ...
    @property
    def may_be_default(self) -> bool: ...
    @property
    def default_rank(self) -> int: ...

@disjoint_base
class Array:
    """A typed, strided view of device, shared or host memory."""

    __dlpack_c_exchange_api__: Any
    __c_dlpack_exchange_api__: Any
    @property
    def shape(self) -> tuple[int, ...]: ...
    @property
    def dtype(self) -> np.dtype[Any] | str:
        """A numpy.dtype (equal to NumPy's dtypes, scalar types and names); bfloat16 without
        ml_dtypes is its name, "bfloat16"."""
    @property
    def typestr(self) -> str: ...
    @property
    def strides(self) -> tuple[int, ...]: ...
    @property
    def offset(self) -> int: ...
    @property
    def ndim(self) -> int: ...
    @property
    def size(self) -> int: ...
    @property
    def itemsize(self) -> int: ...
    @property
    def nbytes(self) -> int: ...
    @property
    def readonly(self) -> bool: ...
    @property
    def ptr(self) -> int: ...
    @property
    def kind(self) -> str: ...
    @property
    def device(self) -> Device: ...
    @property
    def queue(self) -> Queue: ...
    @property
    def c_contiguous(self) -> bool: ...
    @property
    def f_contiguous(self) -> bool: ...
    @property
    def buffer(self) -> Buffer: ...
    @property
    def __sycl_usm_array_interface__(self) -> dict[str, Any]: ...
    # dpctl's attributes, on SYCL USM where dpctl imports (else AttributeError): dpnp.asarray takes
    # the queue from `sycl_queue` and imports zero-copy through `__usm_ndarray__`.
    @property
    def sycl_queue(self) -> Any: ...
    @property
    def sycl_device(self) -> Any: ...
    @property
    def sycl_context(self) -> Any: ...
    @property
    def usm_type(self) -> _Kind: ...
    @property
    def __usm_ndarray__(self) -> Any: ...
    @property
    def __cuda_array_interface__(self) -> dict[str, Any]: ...
    def __dlpack__(
        self,
        *,
        stream: int | Any | None = None,
        max_version: tuple[int, int] | None = None,
        dl_device: tuple[int, int] | None = None,
        copy: bool | None = None,
    ) -> Any:
        """A DLPack capsule: versioned when max_version >= (1, 0), else legacy (read-only memory is
        refused through the legacy capsule, which cannot flag it, unless copy=True). ``stream``: for
        CUDA memory an int (-1: no ordering; 1, 2 or a stream handle, made to wait for pending
        work); for SYCL memory (kDLOneAPI) a ``dpctl.SyclQueue`` or ``devbuf.Queue``, made to wait
        for pending work without blocking the host, or None (pending work is completed first); any
        other value is a TypeError. Exports to the CPU take None or -1."""
    def __dlpack_device__(self) -> tuple[int, int]: ...
    def copy_from(self, source: Any, *, blocking: bool = True, stream: Stream | None = None) -> None:
        """Copies ``source`` in: of this array's dtype (else TypeError) and shape (else
        ValueError), or, into a Buffer, any source of its size (its elements in C order); either
        side may have any layout, and only the elements' bytes move. With ``blocking=False`` the
        copy is only enqueued, and the pending copy keeps ``source`` alive until it completes."""
    def __getitem__(self, key: _Index | tuple[_Index, ...], /) -> Array:
        """A view: NumPy's basic indexing (ints, slices with any step, ``...``, ``None``); one
        element is a 0-d array, as CuPy's."""
    def __setitem__(self, key: _Index | tuple[_Index, ...], value: Any, /) -> None:
        """``x[key] = value``: the selected elements take ``value`` broadcast by NumPy's rules: a
        scalar or nested list (converted to this dtype as NumPy converts it), or anything
        ``asarray`` takes, of this dtype (else TypeError); a copy or fill, no kernel."""
    def __delitem__(self, key: Any, /) -> None:
        """Always a ValueError, as NumPy's: an array's size is fixed."""
    def fill(self, value: bool | int | float | complex | Any, *, blocking: bool = True, stream: Stream | None = None) -> None:
        """Every element ``value``, converted to this dtype as NumPy converts a Python scalar (one
        that does not fit is a ValueError naming ``value``); any layout."""
    def view(self, dtype: DTypeLike) -> Array:
        """The same bytes as ``dtype`` elements, NumPy's ``ndarray.view(dtype)``: another item
        size rescales the last axis, which must be contiguous."""
    def __iter__(self) -> Iterator[Array]:
        """``x[0]``, ``x[1]``, ... (views); a 0-d array is a TypeError, as NumPy's."""
    def astype(self, *args: Any, **kwargs: Any) -> NoReturn:
        """Always a TypeError naming where to convert: devbuf runs no kernels."""
    # Arithmetic: a TypeError naming the libraries that compute (devbuf runs no kernels); with a
    # foreign operand, NotImplemented, so that its library's reflected operator is tried.
    def __add__(self, other: Any, /) -> Any: ...
    def __radd__(self, other: Any, /) -> Any: ...
    def __sub__(self, other: Any, /) -> Any: ...
    def __rsub__(self, other: Any, /) -> Any: ...
    def __mul__(self, other: Any, /) -> Any: ...
    def __rmul__(self, other: Any, /) -> Any: ...
    def __truediv__(self, other: Any, /) -> Any: ...
    def __rtruediv__(self, other: Any, /) -> Any: ...
    def __floordiv__(self, other: Any, /) -> Any: ...
    def __rfloordiv__(self, other: Any, /) -> Any: ...
    def __mod__(self, other: Any, /) -> Any: ...
    def __rmod__(self, other: Any, /) -> Any: ...
    def __pow__(self, other: Any, modulo: Any = None, /) -> Any: ...
    def __rpow__(self, other: Any, modulo: Any = None, /) -> Any: ...
    def __matmul__(self, other: Any, /) -> Any: ...
    def __rmatmul__(self, other: Any, /) -> Any: ...
    def __neg__(self) -> NoReturn: ...
    def __pos__(self) -> NoReturn: ...
    def __abs__(self) -> NoReturn: ...
    def reshape(self, *shape: SupportsIndex | Sequence[SupportsIndex], copy: bool | None = None) -> Array:
        """A view where the strides allow (NumPy's rule); else a C-contiguous copy
        (``copy=None``) or a ValueError (``copy=False``); ``copy=True`` always copies."""
    @property
    def T(self) -> Array: ...
    def transpose(self, *axes: SupportsIndex | Sequence[SupportsIndex] | None) -> Array: ...
    def copy(self) -> Array:
        """A C-contiguous copy on the same device, of the same kind of memory."""
    def to_device(self, device: str | Device | Queue | Any, /) -> Array:
        """This array when it is on ``device``, else a copy there (device memory)."""
    def to_bytes(self, stream: Stream | None = None) -> bytes: ...
    @overload
    def get(self, stream: Queue | None = None, out: None = None) -> np.ndarray[Any, Any]:
        """The elements copied to the host as a NumPy array (CuPy's name), or into ``out`` (a
        NumPy array of the same shape and dtype, or a writable bytes-like object of the same size
        in bytes, as RMM's ``copy_to_host``); the copy runs on ``stream`` (default: the array's
        queue) and is done when this returns."""
    @overload
    def get(
        self, stream: Queue | None = None, *, out: np.ndarray[Any, Any] | bytearray | memoryview
    ) -> np.ndarray[Any, Any] | bytearray | memoryview: ...
    @overload
    def copy_to_host(self, out: None = None, stream: Queue | None = None) -> np.ndarray[Any, Any]:
        """``get()`` under Numba's name and argument order."""
    @overload
    def copy_to_host(
        self, out: np.ndarray[Any, Any] | bytearray | memoryview, stream: Queue | None = None
    ) -> np.ndarray[Any, Any] | bytearray | memoryview: ...
    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray[Any, Any]:
        """NumPy's view of host-readable memory; TypeError (naming ``get()``) for memory the host
        cannot read."""
    def __reduce_ex__(self, protocol: SupportsIndex, /) -> tuple[Any, ...]: ...
    def __len__(self) -> int: ...
    def close(self, stream: Stream | None = None) -> None:
        """Lets go of the memory this object holds (every later use is a ValueError; a second
        close does nothing). The memory goes when its last user does (views, DLPack capsules,
        pickles in flight; after a buffer-protocol, CAI or SUAI export, this object itself); with
        ``stream``, the free waits for the work enqueued on it so far."""
    @property
    def closed(self) -> bool: ...
    def __enter__(self) -> Self: ...
    def __exit__(self, *exc_info: object) -> bool:
        """Closes the object; exceptions propagate."""

@final
class Buffer(Array):
    """Bytes with an owner; also a one-dimensional uint8 Array."""

    def __new__(cls, *_args: Any, **_kwargs: Any) -> Buffer:
        """Always a TypeError naming devbuf.alloc: Buffers come from alloc and imports."""
    @staticmethod
    def from_handle(
        ptr: int,
        nbytes: int,
        device: str | Device | Queue | Any | None = None,
        *,
        owner: Any = None,
        deleter: Callable[[], object] | None = None,
    ) -> Buffer:
        """cuda.core's Buffer.from_handle, checked as imports are: the device's runtime classifies
        ``ptr`` and the ``nbytes`` must lie in one allocation it knows (ValueError naming ``ptr``
        or ``nbytes``); ``owner`` is kept alive, or ``deleter`` runs once when nothing uses the
        memory."""
    @property
    def nbytes(self) -> int: ...
    @property
    def ptr(self) -> int:
        """The address of the first byte; 0 for a 0-byte buffer, which holds no memory, except on
        SYCL (dpctl refuses a null pointer). Not an export: work other code does through it is
        ordered by that code, not by devbuf."""
    @property
    def owned(self) -> bool: ...
    @staticmethod
    def from_host(
        data: Any,
        kind: _Kind = "shared",
        device: str | Device | Queue | Any | None = None,
        *,
        stream: Stream | None = None,
        mr: MemoryResource | None = None,
    ) -> Buffer:
        """A new buffer holding a copy of one-dimensional contiguous bytes (RMM's DeviceBuffer.to_device)."""
    def copy_from_host(self, data: Any, *, stream: Stream | None = None) -> None: ...
    def copy_from_device(self, source: Any, *, stream: Stream | None = None) -> None: ...
    def tobytes(self, stream: Stream | None = None) -> bytes: ...
    def __bytes__(self) -> bytes:
        """``bytes(buffer)``: a copy on the host, as ``to_bytes()``, of any kind of memory (RMM's
        DeviceBuffer); the buffer protocol (``memoryview``) stays for host-readable memory."""
    def capacity(self) -> int:
        """The bytes the buffer may grow to without new memory (RMM's ``capacity()``)."""
    def resize(self, new_size: int, stream: Stream | None = None) -> None:
        """RMM's ``DeviceBuffer.resize``: in place within ``capacity()``, else in a new allocation
        from the same resource, the bytes copied on ``stream``; a BufferError once the memory was
        handed out through CAI, SUAI or the buffer protocol (its consumers keep the buffer)."""
    def reserve(self, new_capacity: int, stream: Stream | None = None) -> None:
        """RMM's ``DeviceBuffer.reserve``: ``capacity()`` at least ``new_capacity``, as ``resize``
        grows."""
    def view(
        self,
        dtype: DTypeLike,
        shape: int | Sequence[int] | None = None,
        strides: Sequence[int] | None = None,
        offset: int = 0,
    ) -> Array: ...
    def fill(self, value: int, *, blocking: bool = True, stream: Stream | None = None) -> None:  # type: ignore[override]
        """Every byte ``value`` (an int, 0-255)."""
    def prefetch(self, location: Literal["device", "host"] = "device", *, stream: Stream | None = None) -> None: ...
    def advise(self, advice: _Advice | int, location: Literal["device", "host"] | None = None) -> None: ...
    def synchronize(self) -> None:
        """Blocks until the work pending on this memory is done: devbuf's, and once the memory was
        handed out (any export), other libraries' on the queues devbuf knows of (its own queue or
        stream; CUDA's legacy default stream). Host views and devbuf's commands order themselves
        the same way; see the guide's "Ordering, both ways"."""
    def ipc_handle(self, *, readonly: bool = False) -> IpcHandle:
        """Opens this buffer's memory in another process; read-only when asked or when the buffer is."""
    @overload  # type: ignore[override]
    def __getitem__(self, key: slice, /) -> Buffer | Array:
        """A step-1 slice is a Buffer sharing the allocation; any other index an Array's."""
    @overload
    def __getitem__(self, key: _Index | tuple[_Index, ...], /) -> Array: ...

@final
class IpcHandle:
    """Opens a shared buffer's memory in another process on this machine (`open_ipc`)."""

    @staticmethod
    def from_bytes(data: bytes) -> IpcHandle: ...
    def __bytes__(self) -> bytes: ...
    @property
    def device(self) -> str: ...
    @property
    def kind(self) -> str: ...
    @property
    def nbytes(self) -> int: ...
    @property
    def readonly(self) -> bool: ...

class DeviceFallbackWarning(RuntimeWarning):
    """An unpickled buffer was placed on the default device or the host, not its own device."""

def backends() -> list[BackendInfo]: ...
def devices(backend: str | None = None) -> list[Device]: ...
def default_device() -> Device:
    """The device `device=None` means: the innermost `with devbuf.Device(...)` block's on this
    thread, else the one set_default_device() set, else DEVBUF_DEVICE's, else the first backend, in
    the order devbuf.backends() lists them, whose default device allocates host, device and shared
    memory."""
def set_default_device(device: str | Device | Queue | Any | None, /) -> Device | None:
    """Sets the default device of every thread (None: back to devbuf's choice); returns the
    previous setting."""
def _default_device_reason() -> str: ...
def _note_default_device_reason(note: str) -> None: ...
def alloc(
    nbytes: int,
    kind: _Kind = "shared",
    device: str | Device | Queue | Any | None = None,
    *,
    ipc: bool = False,
    mr: MemoryResource | None = None,
    stream: Stream | None = None,
) -> Buffer: ...
def empty(
    shape: _Shape,
    dtype: DTypeLike | None = None,
    *,
    kind: _Kind | None = None,
    device: str | Device | Queue | Any | None = None,
    stream: Stream | None = None,
    mr: MemoryResource | None = None,
) -> Array:
    """An uninitialised C-contiguous array (float64 by default), allocated as alloc() allocates."""
def zeros(
    shape: _Shape,
    dtype: DTypeLike | None = None,
    *,
    kind: _Kind | None = None,
    device: str | Device | Queue | Any | None = None,
    stream: Stream | None = None,
    mr: MemoryResource | None = None,
) -> Array: ...
def ones(
    shape: _Shape,
    dtype: DTypeLike | None = None,
    *,
    kind: _Kind | None = None,
    device: str | Device | Queue | Any | None = None,
    stream: Stream | None = None,
    mr: MemoryResource | None = None,
) -> Array:
    """Every element one, as NumPy's ``ones``."""
def full(
    shape: _Shape,
    fill_value: bool | int | float | complex | Any,
    dtype: DTypeLike | None = None,
    *,
    kind: _Kind | None = None,
    device: str | Device | Queue | Any | None = None,
    stream: Stream | None = None,
    mr: MemoryResource | None = None,
) -> Array:
    """Every element ``fill_value``, converted as NumPy's ``full`` converts it (a value that does
    not fit is a ValueError); without ``dtype``, the value's own."""
def empty_like(
    prototype: Any,
    dtype: DTypeLike | None = None,
    *,
    kind: _Kind | None = None,
    device: str | Device | Queue | Any | None = None,
    stream: Stream | None = None,
    mr: MemoryResource | None = None,
) -> Array:
    """``empty`` of ``prototype``'s shape, and by default its dtype, kind and device."""
def zeros_like(
    prototype: Any,
    dtype: DTypeLike | None = None,
    *,
    kind: _Kind | None = None,
    device: str | Device | Queue | Any | None = None,
    stream: Stream | None = None,
    mr: MemoryResource | None = None,
) -> Array: ...
def ones_like(
    prototype: Any,
    dtype: DTypeLike | None = None,
    *,
    kind: _Kind | None = None,
    device: str | Device | Queue | Any | None = None,
    stream: Stream | None = None,
    mr: MemoryResource | None = None,
) -> Array: ...
def get_elapsed_time(start: Event, end: Event) -> float:
    """Milliseconds from ``start`` to ``end`` (CuPy's form of ``end - start``)."""
def open_ipc(handle: IpcHandle | bytes) -> Buffer: ...
def _ipc_handle_from_bytes(data: bytes) -> IpcHandle: ...
def _rebuild(data: Any, state: Any) -> Any: ...
def asarray(
    obj: Any,
    copy: bool | None = None,
    device: str | Device | Queue | Any | None = None,
    sync: bool = True,
    *,
    kind: _Kind | None = None,
    dtype: DTypeLike | None = None,
) -> Array:
    """Imports obj zero-copy (SUAI, DLPack, CAI or the buffer protocol, tried in that order);
    with `sync` (the default), devbuf's later work on the memory waits for the producer's queue
    or stream, and sync=False leaves that to the caller. Copies when `copy` is
    True, or when it is None and `device` is another device; copy=False where the data would
    have to move is a ValueError. A copy onto a named device is device memory unless `kind` asks
    for another kind. A DLPack tensor is taken where its own device says it is: one
    on another device than __dlpack_device__() said, or on a device devbuf cannot reach, is a
    BufferError; more than 64 dimensions is a ValueError. A Python scalar or nested list or tuple
    of them is a new array, allocated as empty() allocates, of `dtype` or else the array API's
    (bool, int64, float64 or complex128); an array's `dtype` is its own (another is a TypeError:
    devbuf converts no element types)."""
def from_dlpack(x: Any, /, *, device: str | Device | Queue | Any | None = None, copy: bool | None = None) -> Array: ...
def set_cai_export_stream(enabled: bool) -> None: ...
def conformance_matrix(
    device: str | None = None, check: str | None = None
) -> list[tuple[str, list[tuple[str, str, str]]]]: ...
def conformance_checks() -> list[str]: ...

# devbuf.mr (see devbuf/mr.py)
@disjoint_base
class MemoryResource:
    """Allocates and frees memory of one device; subclass it to write a resource in Python.

    The address a subclass's ``allocate`` returns is checked by the device's runtime (kind,
    device, extent, where the runtime can tell): one it does not vouch for is given back through
    ``deallocate`` and raised as a ValueError naming the resource."""

    def __init__(self, device: str | Device | Queue | Any | None = None, upstream_mr: MemoryResource | None = None) -> None: ...
    @property
    def queue(self) -> Queue: ...
    @property
    def device(self) -> Device: ...
    @property
    def upstream_mr(self) -> MemoryResource | None: ...
    def get_upstream(self) -> MemoryResource | None: ...
    def allocate(self, nbytes: int, kind: _Kind | None = None, *, stream: Stream | None = None) -> int:
        """``kind`` None: the one kind the resource serves, else "shared"."""
    def deallocate(self, ptr: int, nbytes: int, kind: _Kind | None = None, *, stream: Stream | None = None) -> None: ...

@final
class QueueMemoryResource(MemoryResource):
    def __new__(cls, device: str | Device | Queue | Any | None = None) -> Self: ...

@final
class DeviceMemoryResource(MemoryResource):
    """The device's device memory, whatever kind is asked (RMM's CudaMemoryResource)."""
    def __new__(cls, device: str | Device | Queue | Any | None = None) -> Self: ...

@final
class ManagedMemoryResource(MemoryResource):
    """The device's shared (managed) memory, whatever kind is asked."""
    def __new__(cls, device: str | Device | Queue | Any | None = None) -> Self: ...

@final
class PinnedHostMemoryResource(MemoryResource):
    """The device's host (pinned) memory, whatever kind is asked."""
    def __new__(cls, device: str | Device | Queue | Any | None = None) -> Self: ...

@final
class AsyncMemoryResource(MemoryResource):
    """A pool of the device's ``kind`` memory with RMM's CudaAsyncMemoryResource settings."""
    def __new__(
        cls,
        device: str | Device | Queue | Any | None = None,
        *,
        kind: _Kind = "device",
        initial_pool_size: int | str | None = None,
        release_threshold: int | str | None = None,
        enable_ipc: bool = False,
    ) -> Self: ...
    def pool_size(self) -> int: ...
    @property
    def release_threshold(self) -> int | None: ...
    def release(self) -> None: ...

def parse_bytes(value: int | str) -> int:
    """RMM's parse_bytes: "4MiB", "2kib", "1.5 GB"; ValueError "Could not parse ..." otherwise."""

class PoolMemoryResource(MemoryResource):
    def __new__(
        cls,
        upstream_mr: MemoryResource,
        initial_pool_size: int | str | None = None,
        maximum_pool_size: int | str | None = None,
        *,
        kind: _Kind | None = None,
    ) -> Self:
        """Takes ``initial_pool_size`` bytes of ``kind`` memory from upstream now (MemoryError when
        it cannot); ``initial_pool_size`` over ``maximum_pool_size`` is a ValueError."""
    def release(self) -> None: ...
    def pool_size(self) -> int: ...
    @property
    def initial_pool_size(self) -> int: ...
    @property
    def maximum_pool_size(self) -> int | None: ...
    @property
    def used_bytes(self) -> int:
        """Bytes handed out now, every kind together."""
    @property
    def free_bytes(self) -> int:
        """Bytes held from upstream and not handed out: ``pool_size() - used_bytes``."""

@final
class LimitingResourceAdaptor(MemoryResource):
    def __new__(cls, upstream_mr: MemoryResource, allocation_limit: int) -> Self: ...
    def get_allocation_limit(self) -> int: ...
    def get_allocated_bytes(self) -> int: ...

@final
class StatisticsResourceAdaptor(MemoryResource):
    def __new__(cls, upstream_mr: MemoryResource) -> Self: ...
    @property
    def allocation_counts(self) -> Statistics: ...
    def push_counters(self) -> Statistics: ...
    def pop_counters(self) -> Statistics: ...

@final
class TrackingResourceAdaptor(MemoryResource):
    def __new__(cls, upstream_mr: MemoryResource, capture_stacks: bool = False) -> Self:
        """With ``capture_stacks``, the leak report shows the Python stack (innermost frames:
        file, line, code) that made each outstanding allocation."""
    def get_allocated_bytes(self) -> int: ...
    def get_outstanding_allocations_str(self) -> str: ...

@final
class FixedSizeMemoryResource(MemoryResource):
    def __new__(
        cls, upstream_mr: MemoryResource, block_size: int = 1048576, blocks_to_preallocate: int = 128
    ) -> Self: ...
    @property
    def block_size(self) -> int: ...
    def get_upstream_bytes(self) -> int: ...

@final
class BinningMemoryResource(MemoryResource):
    def __new__(cls, upstream_mr: MemoryResource, min_size_exponent: int = -1, max_size_exponent: int = -1) -> Self: ...
    def add_bin(self, allocation_size: int, bin_resource: MemoryResource | None = None) -> None: ...
    @property
    def bin_mrs(self) -> list[MemoryResource]: ...

@final
class LoggingResourceAdaptor(MemoryResource):
    def __new__(
        cls,
        upstream_mr: MemoryResource,
        log_file_name: str | bytes | os.PathLike[str] | os.PathLike[bytes] | SupportsWrite[str] | None = None,
        *,
        auto_flush: bool = False,
    ) -> Self: ...
    def flush(self) -> None: ...
    def get_file_name(self) -> str | None: ...

@final
class FailureCallbackResourceAdaptor(MemoryResource):
    def __new__(cls, upstream_mr: MemoryResource, callback: Callable[[int], bool]) -> Self: ...
    @property
    def callback(self) -> Callable[[int], bool] | None: ...

@final
class PrefetchResourceAdaptor(MemoryResource):
    def __new__(cls, upstream_mr: MemoryResource) -> Self: ...

def replay(
    log_file_name: str | bytes | os.PathLike[str] | os.PathLike[bytes],
    mr: MemoryResource,
    kind: _Kind = "device",
) -> dict[str, int | float]: ...
def set_current_device_resource(mr: MemoryResource, kind: _Kind | None = None) -> None: ...
def get_current_device_resource(
    device: str | Device | Queue | Any | None = None, kind: _Kind = "shared"
) -> MemoryResource: ...
def _debug_log_level() -> int: ...
def _set_debug_log_level(index: int) -> None: ...
def _debug_log_flush_level() -> int: ...
def _set_debug_log_flush_level(index: int) -> None: ...
def _debug_log_should_log(index: int) -> bool: ...
def _flush_debug_log() -> None: ...
def reset_current_device_resource(device: str | Device | Queue | Any | None = None, kind: _Kind | None = None) -> None:
    """Back to the device's own allocator for ``kind`` (every kind when None), as before any
    set_current_device_resource (RMM's C++ reset_current_device_resource_ref)."""
