"""devbuf's Numba EMM plugin (`devbuf.allocators.numba`) against Numba's real allocator interface:
Numba's device arrays allocate from devbuf's current resource, free into it, and memory Numba let
go of is not handed out again while Numba's work on it may still run. No kernels, so these run on
a GPU and on the devbuf CUDA test driver alike (ci/test runs them on the driver, also with a delay
on every stream operation).

Numba picks its memory manager when it creates a context, so each case runs in a fresh process."""

import os
import subprocess
import sys
import textwrap

import pytest

import devbuf
from conftest import require_backend

PRELUDE = """
import numpy as np
import devbuf, devbuf.mr
from numba import cuda
from devbuf.allocators.numba import DevbufNumbaManager

def stack(device="cuda:0"):
    pool = devbuf.mr.PoolMemoryResource(devbuf.mr.QueueMemoryResource(device))
    tracking = devbuf.mr.TrackingResourceAdaptor(pool)
    devbuf.mr.set_current_device_resource(tracking, kind="device")
    return pool, tracking
"""


# Opens a CUDA IPC handle sent by a parent (see the IPC test) and sums the 1000 doubles there.
READER = """
import ctypes, pickle, sys
import numpy as np
from cuda.bindings import driver
from numba import cuda
from numba.cuda.cudadrv.driver import IpcHandle
raw, size, source, offset = pickle.loads(sys.stdin.buffer.read())
handle = driver.CUipcMemHandle()
ctypes.memmove(handle.getPtr(), raw, len(raw))
ipc = IpcHandle(None, handle, size, source, offset=offset)
print(ipc.open_array(cuda.current_context(), (1000,), np.dtype(np.float64)).copy_to_host().sum())
ipc.close()
"""
PRELUDE += f"READER = {READER!r}\n"


@pytest.fixture(scope="module", autouse=True)
def numba_cuda():
    require_backend("cuda")
    try:
        import numba.cuda  # noqa: F401
    except ImportError as err:
        pytest.skip(f"numba-cuda is not installed: {err}")


def run(code, **env):
    """Runs `code` after the prelude in a fresh interpreter; returns its stdout."""
    result = subprocess.run(
        [sys.executable, "-c", PRELUDE + textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def test_numba_arrays_come_from_the_current_resource_and_go_back_to_it():
    out = run("""
        pool, tracking = stack()
        cuda.set_memory_manager(DevbufNumbaManager)
        host = np.arange(100_000, dtype=np.float64)
        theirs = cuda.to_device(host)
        ptr = theirs.__cuda_array_interface__["data"][0]
        (only,) = [line for line in tracking.get_outstanding_allocations_str().splitlines() if hex(ptr) in line]
        assert "800000 bytes of device memory" in only, only
        assert np.array_equal(theirs.copy_to_host(), host)
        again = cuda.device_array_like(theirs)
        again.copy_to_device(theirs)
        assert np.array_equal(again.copy_to_host(), host)
        assert tracking.get_allocated_bytes() == 1_600_000
        del theirs, again
        assert tracking.get_allocated_bytes() == 0, tracking.get_outstanding_allocations_str()
        assert pool.pool_size() > 0
        print(type(cuda.current_context().memory_manager).__name__)
    """)
    assert out.split() == ["DevbufNumbaManager"]


def test_the_environment_variable_selects_the_plugin():
    out = run(
        """
        pool, tracking = stack()
        d = cuda.device_array(1000)
        print(type(cuda.current_context().memory_manager).__name__, tracking.get_allocated_bytes())
        """,
        NUMBA_CUDA_MEMORY_MANAGER="devbuf.allocators.numba",
    )
    assert out.split() == ["DevbufNumbaManager", "8000"]


def test_memory_numba_let_go_of_is_not_reused_under_its_pending_work():
    # Numba's copy into `theirs` is still running on its stream when Numba lets go of the array;
    # the pool must not hand the block to the next allocation (filled with zeros by devbuf) until
    # that copy has landed, or the zeros would be overwritten.
    out = run(
        """
        pool, tracking = stack()
        cuda.set_memory_manager(DevbufNumbaManager)
        n = 1 << 20
        stream = cuda.stream()
        pattern = np.full(n, 7, dtype=np.uint8)
        reused = 0
        for _ in range(5):
            theirs = cuda.device_array(n, dtype=np.uint8, stream=stream)
            address = theirs.__cuda_array_interface__["data"][0]
            for _ in range(20):
                theirs.copy_to_device(pattern, stream=stream)
            del theirs
            mine = devbuf.alloc(n, "device", device="cuda:0")
            reused += mine.ptr == address
            mine.fill(0)
            stream.synchronize()
            assert not any(mine.to_bytes()), "Numba's copy landed on reused memory"
        print(reused)
        """,
        DEVBUF_CUDA_TEST_DELAY_US=os.environ.get("DEVBUF_CUDA_TEST_DELAY_US", "200"),
    )
    assert int(out) > 0, "the pool never reused the block: the test proved nothing"


def test_a_limit_refuses_numba_with_a_memory_error_naming_it():
    out = run("""
        limited = devbuf.mr.LimitingResourceAdaptor(devbuf.mr.QueueMemoryResource("cuda:0"), 1 << 20)
        devbuf.mr.set_current_device_resource(limited, kind="device")
        cuda.set_memory_manager(DevbufNumbaManager)
        kept = cuda.device_array(1 << 19, dtype=np.uint8)
        try:
            cuda.device_array(1 << 20, dtype=np.uint8)
        except MemoryError as err:
            print(err)
        print(limited.get_allocated_bytes())
    """)
    refusal, in_use = out.strip().splitlines()
    assert "1048576" in refusal and "limit" in refusal, refusal
    assert int(in_use) == 1 << 19


@pytest.mark.parametrize("driver_pools", ["1", "0"])
def test_memory_info_and_ipc_answer_or_say_why(driver_pools):
    # A pool block from cuMemAllocAsync cannot be shared through cuIpcGetMemHandle: a clear
    # refusal. One from cuMemAlloc (the test driver without pools: DEVBUF_CUDA_TEST_MEMORY_POOLS=0)
    # can: another process opens it, at the array's offset inside the block, and reads it.
    out = run(
        """
        import ctypes, pickle, subprocess, sys
        pool, tracking = stack()
        cuda.set_memory_manager(DevbufNumbaManager)
        free, total = cuda.current_context().get_memory_info()
        assert 0 < free <= total == devbuf.Device("cuda:0").global_mem_size, (free, total)
        first = cuda.device_array(1000)
        d = cuda.to_device(np.arange(1000.0))
        try:
            handle = d.get_ipc_handle()
        except RuntimeError as err:
            print("refused:", err)
        else:
            # Numba's own pickling of the handle fails with cuda-bindings 13 (no `reserved`):
            # the handle's 64 bytes travel by hand.
            ipc = handle._ipc_handle
            sent = (ctypes.string_at(ipc.handle.getPtr(), 64), ipc.size, ipc.source_info, ipc.offset)
            child = subprocess.run([sys.executable, "-c", READER], input=pickle.dumps(sent),
                                   capture_output=True, check=True)
            print("shared:", child.stdout.decode().strip())
        """,
        DEVBUF_CUDA_TEST_MEMORY_POOLS=driver_pools,
    )
    shared = "shared: 499500.0"
    if driver_pools == "0" and devbuf.Device("cuda:0").test_double:
        assert out.strip() == shared, out
    assert out.strip() == shared or ("CUDA IPC" in out and "ipc=True" in out), out
