"""devbuf: device memory that crosses library boundaries.

Allocate host, SYCL USM or CUDA memory and hand it zero-copy to dpctl, NumPy, Numba, CuPy and
PyTorch (``__sycl_usm_array_interface__``, ``__cuda_array_interface__`` v3, DLPack 1.3 with its C
exchange API, the buffer protocol), or take theirs in with :func:`asarray` / :func:`from_dlpack`.
"""

import os as _os


def _locate_sycl_library() -> None:
    # The SYCL backend loads dpctl's C API at run time. Point it at the installed dpctl package
    # unless the user already chose a library; finding the package does not import dpctl.
    if _os.environ.get("DEVBUF_SYCL_LIBRARY"):
        return
    import importlib.util

    try:
        spec = importlib.util.find_spec("dpctl")
    except (ImportError, ValueError):
        return
    for location in (spec.submodule_search_locations or []) if spec else []:
        candidate = _os.path.join(location, "libDPCTLSyclInterface.so")
        if _os.path.exists(candidate):
            _os.environ["DEVBUF_SYCL_LIBRARY"] = candidate
            return


_locate_sycl_library()

from ._devbuf import (  # noqa: E402
    Array,
    BackendInfo,
    Buffer,
    Device,
    DeviceFallbackWarning,
    IpcHandle,
    Queue,
    __version__,
    alloc,
    asarray,
    backends,
    default_device,
    devices,
    from_dlpack,
    open_ipc,
    set_cai_export_stream,
)

__all__ = [
    "Array",
    "BackendInfo",
    "Buffer",
    "Device",
    "DeviceFallbackWarning",
    "IpcHandle",
    "Queue",
    "__version__",
    "alloc",
    "asarray",
    "backends",
    "default_device",
    "devices",
    "from_dlpack",
    "open_ipc",
    "set_cai_export_stream",
]

from . import _integrations  # noqa: E402

# Dask and Ray serializers, registered when (and only when) the program imports them.
_integrations.install()
