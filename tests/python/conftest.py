"""Shared fixtures: which backends are usable here, and skips that say why (or fail, for the
backends listed in DEVBUF_REQUIRE, so CI never silently skips a runtime it installed)."""

import functools
import gc
import os

import pytest

import devbuf


def backend_info(name):
    return next((b for b in devbuf.backends() if b.name == name), None)


def backend_names(*, protocol=None, makes_streams=None):
    """The backends compiled in, in the default order, whose descriptor (`devbuf.backends()`)
    speaks `protocol` and makes streams as asked: what a test runs on, never a list written by
    hand (a fixture's params; `require_backend` then skips or fails each that is unavailable)."""
    return [
        backend.name
        for backend in devbuf.backends()
        if (protocol is None or protocol in backend.protocols)
        and (makes_streams is None or backend.makes_streams == makes_streams)
    ]


def require_backend(name):
    """Skips the calling test with the backend's own reason when it is unavailable."""
    info = backend_info(name)
    reason = "not compiled in" if info is None else info.reason
    if info is not None and info.available:
        return info
    required = {b.strip() for b in os.environ.get("DEVBUF_REQUIRE", "").split(",")}
    if name in required or "all" in required:
        pytest.fail(f"{name} is required by DEVBUF_REQUIRE but unavailable: {reason}")
    pytest.skip(f"{name} backend unavailable: {reason}")


@functools.cache
def numba_kernel_problem():
    """Why numba-cuda cannot compile a kernel here (an empty one, no devbuf in it), or None."""
    try:
        from numba import cuda

        cuda.jit("void()")(_empty_kernel)
    except Exception as err:  # whatever broke numba-cuda here; the skip says what
        return f"{type(err).__name__}: {err}"
    return None


def _empty_kernel():
    pass


def require_numba_kernels():
    """Skips the calling test where numba-cuda cannot compile an empty kernel: a fault of the
    environment (e.g. numba-cuda 0.30 on NumPy 2.5, which removed np.row_stack), not devbuf's."""
    problem = numba_kernel_problem()
    if problem is not None:
        pytest.skip(f"numba-cuda cannot compile a kernel here, with no devbuf in it: {problem}")


def usable_kinds(device):
    return [k for k in ("host", "device", "shared") if k in device.kinds]


@pytest.fixture
def collect():
    """Runs the garbage collector until nothing is left to collect."""

    def run():
        while gc.collect():
            pass

    return run
