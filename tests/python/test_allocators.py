"""The allocator plugins for CuPy and PyTorch: memory from devbuf's current resource for device
memory, on the caller's stream. The C entry points PyTorch loads run here on the CUDA test driver
(through ctypes, as PyTorch calls them); CuPy and PyTorch themselves need a GPU and are skipped,
with the reason, where they cannot run (ci/gpu runs them)."""

import ctypes
import os
import subprocess
import sys
import textwrap

import pytest

import devbuf
import devbuf.mr as mr
from conftest import require_backend


@pytest.fixture
def cuda_stats():
    """A statistics adaptor over a pool, current for cuda:0's device memory during the test."""
    require_backend("cuda")
    stats = mr.StatisticsResourceAdaptor(mr.PoolMemoryResource(mr.QueueMemoryResource("cuda:0")))
    mr.set_current_device_resource(stats, kind="device")
    yield stats
    mr.set_current_device_resource(mr.QueueMemoryResource("cuda:0"), kind="device")


def torch_entry_points():
    library = ctypes.CDLL(devbuf._devbuf.__file__)
    alloc, free = library.devbuf_torch_alloc, library.devbuf_torch_free
    alloc.restype, alloc.argtypes = ctypes.c_void_p, [ctypes.c_ssize_t, ctypes.c_int, ctypes.c_void_p]
    free.restype, free.argtypes = None, [ctypes.c_void_p, ctypes.c_ssize_t, ctypes.c_int, ctypes.c_void_p]
    return alloc, free


def test_the_torch_entry_points_allocate_from_the_current_resource(cuda_stats):
    alloc, free = torch_entry_points()
    stream = devbuf.Stream("cuda:0")
    # The legacy default stream, a stream of the user's, and the per-thread default stream (which
    # devbuf does not adopt: the allocation is complete before it is returned, the free waits for
    # the device).
    for handle in (None, stream.stream, 2):
        ptr = alloc(1000, 0, handle)
        assert ptr, "devbuf_torch_alloc returned null"
        assert cuda_stats.allocation_counts["current_bytes"] == 1000
        free(ptr, 1000, 0, handle)
        assert cuda_stats.allocation_counts["current_bytes"] == 0
    assert cuda_stats.allocation_counts["total_count"] == 3


def test_the_torch_entry_points_refuse_without_crashing(cuda_stats, capfd):
    alloc, free = torch_entry_points()
    assert not alloc(-1, 0, None)
    assert not alloc(64, 99, None)
    free(12345, 64, 0, None)
    err = capfd.readouterr().err
    assert "devbuf_torch_alloc: size -1 is negative" in err
    assert "devbuf_torch_alloc: " in err and "cuda:99" in err
    assert "devbuf_torch_free: ptr: 0x3039 is not memory devbuf's stream allocator handed out" in err


def test_cupy_allocates_from_the_current_resource(cuda_stats):
    cupy = pytest.importorskip("cupy", reason="CuPy is not installed here (ci/gpu runs this test on a machine that has it)")
    try:
        cupy.cuda.runtime.getDeviceCount()
    except cupy.cuda.runtime.CUDARuntimeError as err:
        pytest.skip(f"CuPy cannot run here: {err}")
    from devbuf.allocators.cupy import devbuf_cupy_allocator

    previous = cupy.cuda.get_allocator()
    cupy.cuda.set_allocator(devbuf_cupy_allocator)
    try:
        with cupy.cuda.Stream(non_blocking=True):
            a = cupy.arange(1000, dtype=cupy.float64)
            assert cuda_stats.allocation_counts["current_bytes"] >= 8000
            assert int((a * 2).sum()) == 999 * 1000
            del a
    finally:
        cupy.cuda.set_allocator(previous)


def test_torch_allocates_from_the_current_resource():
    require_backend("cuda")
    torch = pytest.importorskip("torch", reason="PyTorch is not installed here (ci/gpu runs this test on a machine that has it)")
    if not torch.cuda.is_available():
        pytest.skip("PyTorch sees no CUDA device (its CUDA runtime needs a GPU)")
    # The allocator is chosen before PyTorch's first CUDA allocation: in a fresh interpreter.
    script = textwrap.dedent(
        """
        import torch, devbuf.mr as mr
        from devbuf.allocators.torch import devbuf_torch_allocator
        stats = mr.StatisticsResourceAdaptor(mr.QueueMemoryResource("cuda:0"))
        mr.set_current_device_resource(stats, kind="device")
        torch.cuda.memory.change_current_allocator(devbuf_torch_allocator)
        t = torch.arange(1000, device="cuda", dtype=torch.float64)
        assert stats.allocation_counts["current_bytes"] >= 8000, stats.allocation_counts
        assert int((t * 2).sum()) == 999 * 1000
        del t
        torch.cuda.synchronize()
        print("ok")
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=dict(os.environ))
    assert done.returncode == 0 and "ok" in done.stdout, done.stderr
