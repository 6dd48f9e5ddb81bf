"""Finding the SYCL runtime that pip installed, before anything loads it.

``pip install devbuf[sycl]`` brings dpctl (the SYCL C API devbuf loads) and intel-opencl-rt (Intel's
CPU OpenCL runtime, the SYCL CPU device). Two things stop them working as installed:

- intel-opencl-rt's ``.icd`` files name a placeholder path, so the OpenCL ICD loader never finds the
  runtime. devbuf registers it through ``OCL_ICD_FILENAMES``, which the loader reads when it is
  first used, not when the process starts.
- The wheels' OpenCL loader (``libOpenCL.so.1``, which honours ``OCL_ICD_FILENAMES``) is found only
  by libraries whose RUNPATH names the environment's ``lib`` (the SYCL runtime's); devbuf's OpenCL
  backend would get the system's loader instead (Debian's ignores ``OCL_ICD_FILENAMES``), and the
  wheels' loader needs ``libsvml.so`` and its siblings, which are not on its own RUNPATH. devbuf
  loads them all by absolute path first: every later load by name finds the loaded ones.

Both happen at ``import devbuf``, before devbuf, dpctl or dpnp load the SYCL runtime, and only where
the user has not registered an OpenCL runtime themselves (``OCL_ICD_FILENAMES`` or
``OCL_ICD_VENDORS`` set). :data:`REGISTRATION` says what was done, or why not, for
``python -m devbuf info``.
"""

import ctypes
import os
import site
import sys

# What intel-opencl-rt's libOpenCL.so.1 needs from intel-cmplr-lib-rt, in dependency order.
_LOADER_DEPENDENCIES = ("libintlc.so.5", "libimf.so", "libsvml.so", "libirng.so")
_RUNTIME = "libintelocl.so"
_TOO_LATE = "too late: an OpenCL loader was already loaded when devbuf was imported"

#: What devbuf did about the Intel CPU OpenCL runtime at import, in one sentence.
REGISTRATION = "not looked for"

#: Why the runtime pip installed could not be registered because devbuf was imported too late
#: (dpctl or dpnp had already loaded an OpenCL loader, so the SYCL CPU device is missing from
#: this process), with the fix; None when that did not happen.
IMPORT_ORDER_PROBLEM: str | None = None

# Loaded libraries stay loaded; the handles are kept so that nothing looks unused.
_preloaded: list[ctypes.CDLL] = []


def _library_dirs() -> list[str]:
    """Where pip puts a wheel's data files (``<prefix>/lib``): the environment's, then the user's."""
    dirs = [os.path.join(sys.prefix, "lib")]
    user_base = getattr(site, "USER_BASE", None)
    if user_base:
        dirs.append(os.path.join(user_base, "lib"))
    return dirs


def _loaded(name: str) -> bool:
    """Whether a library whose file name starts with ``name`` is mapped into this process."""
    try:
        with open("/proc/self/maps") as maps:
            return any(os.path.basename(line.split()[-1]).startswith(name) for line in maps if "/" in line)
    except OSError:
        return False


def register_intel_cpu_runtime() -> str:
    """Registers pip's Intel CPU OpenCL runtime with the ICD loader, if present and not yet
    configured; returns what it did (also kept in :data:`REGISTRATION`, and in
    :data:`IMPORT_ORDER_PROBLEM` when it came too late)."""
    global REGISTRATION, IMPORT_ORDER_PROBLEM
    REGISTRATION = _register()
    if REGISTRATION.startswith(_TOO_LATE):
        IMPORT_ORDER_PROBLEM = (
            "devbuf was imported after an OpenCL loader was loaded (dpctl or dpnp made a queue "
            "first), too late to register the Intel CPU OpenCL runtime pip installed: its SYCL "
            "CPU device is missing from this process, so the default device is not it. Fix: "
            + REGISTRATION.removeprefix(_TOO_LATE).strip(" ()")
        )
    return REGISTRATION


def _register() -> str:
    for variable in ("OCL_ICD_FILENAMES", "OCL_ICD_VENDORS"):
        if os.environ.get(variable):
            return f"left to the environment: {variable} is set"
    libdir = next((d for d in _library_dirs() if os.path.exists(os.path.join(d, _RUNTIME))), None)
    if libdir is None:
        return f"not installed ({_RUNTIME} is not in {' or '.join(_library_dirs())}; install devbuf with its [sycl] extra)"
    runtime = os.path.join(libdir, _RUNTIME)
    if _loaded("libOpenCL.so"):
        return (
            f"{_TOO_LATE} (import devbuf before dpctl or dpnp, or set OCL_ICD_FILENAMES={runtime} "
            f"and LD_LIBRARY_PATH={libdir} before starting Python)"
        )
    try:
        for name in _LOADER_DEPENDENCIES:
            path = os.path.join(libdir, name)
            if os.path.exists(path):
                _preloaded.append(ctypes.CDLL(path))
        loader = os.path.join(libdir, "libOpenCL.so.1")
        if os.path.exists(loader):
            _preloaded.append(ctypes.CDLL(loader))
    except OSError as err:
        return (
            f"failed to load the runtime's libraries ({err}); set OCL_ICD_FILENAMES={runtime} and "
            f"LD_LIBRARY_PATH={libdir} before starting Python"
        )
    os.environ["OCL_ICD_FILENAMES"] = runtime
    return f"registered {runtime} (OCL_ICD_FILENAMES, its libraries preloaded from {libdir})"


def locate_sycl_library() -> None:
    """Points the SYCL backend at dpctl's C API library unless the user chose one
    (``DEVBUF_SYCL_LIBRARY``); finding the package does not import dpctl."""
    if os.environ.get("DEVBUF_SYCL_LIBRARY"):
        return
    import importlib.util

    try:
        spec = importlib.util.find_spec("dpctl")
    except (ImportError, ValueError):
        return
    for location in (spec.submodule_search_locations or []) if spec else []:
        candidate = os.path.join(location, "libDPCTLSyclInterface.so")
        if os.path.exists(candidate):
            os.environ["DEVBUF_SYCL_LIBRARY"] = candidate
            return
