"""RMM's pointer copy helpers (``rmm.pylibrmm.device_buffer.copy_ptr_to_host`` and kin): copies
to and from memory known only by its address, each a ``Buffer.from_handle`` view of the address
(checked as imports are: the device's runtime must know the bytes) and that view's copy. The
address is on ``stream``'s device, or on the default device when ``stream`` is None; each copy runs
on ``stream`` (default: the view's queue) and is done when the call returns."""

from typing import Any

from ._devbuf import Buffer, Stream


def _view(ptr: int, nbytes: int, stream: Stream | None) -> Buffer:
    return Buffer.from_handle(ptr, nbytes, None if stream is None else stream)


def copy_ptr_to_host(ptr: int, out: Any, stream: Stream | None = None) -> Any:
    """Copies the ``len(memoryview(out))`` bytes at ``ptr`` into ``out``, a writable bytes-like
    object, and returns it."""
    nbytes = memoryview(out).nbytes
    if nbytes:
        _view(ptr, nbytes, stream).copy_to_host(out, stream)
    return out


def copy_host_to_ptr(data: Any, ptr: int, stream: Stream | None = None) -> None:
    """Copies the bytes of ``data`` (a bytes-like object) to ``ptr``."""
    view = memoryview(data).cast("B")
    if view.nbytes:
        _view(ptr, view.nbytes, stream).copy_from(view, stream=stream)


def copy_device_to_ptr(src: int, dst: int, nbytes: int, stream: Stream | None = None) -> None:
    """Copies ``nbytes`` bytes from ``src`` to ``dst``, both device addresses."""
    if nbytes:
        _view(dst, nbytes, stream).copy_from(_view(src, nbytes, stream), stream=stream)
