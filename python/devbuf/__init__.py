"""devbuf: device memory that crosses library boundaries.

Allocate host, SYCL USM or CUDA memory and hand it zero-copy to dpctl, NumPy, Numba, CuPy and
PyTorch (``__sycl_usm_array_interface__``, ``__cuda_array_interface__`` v3, DLPack 1.3 with its C
exchange API, the buffer protocol), or take theirs in with :func:`asarray` / :func:`from_dlpack`.

The default device (``device=None`` everywhere) is, in this order: the device of the innermost
``with devbuf.Device(...):`` block on the current thread; the one :func:`set_default_device` set;
the device the ``DEVBUF_DEVICE`` environment variable names; else the first backend, in the order
:func:`backends` lists them, whose default device allocates host, device and shared memory (a device lacking a
kind, such as an OpenCL device with SVM only, is skipped, and so is a test double's device), so the
default never fails a basic allocation. :func:`default_device` returns it; ``python -m devbuf info`` says why.
"""

from . import _runtime

# Before the extension loads any runtime: dpctl's SYCL C API library, and the Intel CPU OpenCL
# runtime that `pip install devbuf[sycl]` brings (see _runtime).
_runtime.locate_sycl_library()
_runtime.register_intel_cpu_runtime()

from ._devbuf import (  # noqa: E402
    Array,
    BackendInfo,
    Buffer,
    Device,
    DeviceFallbackWarning,
    Event,
    IpcHandle,
    Queue,
    Stream,
    __git_commit__,
    __version__,
    alloc,
    asarray,
    backends,
    default_device,
    devices,
    empty,
    empty_like,
    from_dlpack,
    full,
    get_elapsed_time,
    ones,
    ones_like,
    open_ipc,
    set_cai_export_stream,
    set_default_device,
    zeros,
    zeros_like,
)
from ._pointer_copies import copy_device_to_ptr, copy_host_to_ptr, copy_ptr_to_host  # noqa: E402
from ._stream_pool import StreamPool  # noqa: E402

__all__ = [
    "Array",
    "BackendInfo",
    "Buffer",
    "Device",
    "DeviceFallbackWarning",
    "Event",
    "IpcHandle",
    "Queue",
    "Stream",
    "StreamPool",
    "__git_commit__",
    "__version__",
    "alloc",
    "asarray",
    "backends",
    "copy_device_to_ptr",
    "copy_host_to_ptr",
    "copy_ptr_to_host",
    "default_device",
    "devices",
    "empty",
    "empty_like",
    "from_dlpack",
    "full",
    "get_elapsed_time",
    "ones",
    "ones_like",
    "open_ipc",
    "set_cai_export_stream",
    "set_default_device",
    "zeros",
    "zeros_like",
]

if _runtime.IMPORT_ORDER_PROBLEM is not None:
    import warnings

    from ._devbuf import _note_default_device_reason

    warnings.warn(_runtime.IMPORT_ORDER_PROBLEM, RuntimeWarning, stacklevel=2)
    _note_default_device_reason(_runtime.IMPORT_ORDER_PROBLEM)

from . import _integrations  # noqa: E402

# Dask and Ray serializers, registered when (and only when) the program imports them.
_integrations.install()
