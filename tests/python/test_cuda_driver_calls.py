"""The driver-call budgets of devbuf's CUDA hot paths, held on the CUDA test driver's call counts
(`DEVBUF_CUDA_TEST_COUNT_CALLS=1`; the paths are measured by `driver_calls.py` in a process of its
own). A 2-core VM cannot time a GPU, but it can count what a path asks of the driver: on the one
GPU run, each driver call cost hundreds of nanoseconds (the bare `cuMemAllocAsync` +
`cuMemFreeAsync` pair 834 ns), and devbuf's device alloc+free made 20 calls where 2 do.

Each budget is the calls one call of the path makes, exactly: a path that makes more is slower on
a GPU, and one that makes fewer has dropped ordering it owes. The figures are in BENCHMARKS.md."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import devbuf
from conftest import require_backend

# path: (the entry points one call makes, why each is needed)
BUDGETS = {
    "pooled alloc+free 1 KiB device, a pool hit": (
        {}, "a hit is served by devbuf's pool on the host; the block's stream-ordered allocation "
        "is recorded only if something other than its stream ever orders after it"),
    "pooled alloc+fill+free 1 KiB device, the fill enqueued and waited for": (
        {"cuMemsetD8Async": 1, "cuEventRecord": 1, "cuEventSynchronize": 1},
        "the fill, the event that records it as pending work, and the host's wait for that event; "
        "the hit and the free make no call (the block's work is known done)"),
    "device alloc+free 1 KiB, no context current": (
        {"cuMemAllocAsync": 1, "cuMemFreeAsync": 1},
        "the stream-ordered pair alone: a call on a stream takes the stream's context"),
    "device alloc+free 1 KiB, the primary context current": (
        {"cuMemAllocAsync": 1, "cuMemFreeAsync": 1}, "as with no context current"),
    "device alloc+free 1 KiB, another context current": (
        {"cuMemAllocAsync": 1, "cuMemFreeAsync": 1}, "as with no context current"),
    "CAI export, nothing pending": ({}, "nothing to order: the dict is built on the host"),
    "DLPack export (stream=-1), nothing pending": ({}, "nothing to order: the capsule is built on the host"),
    "CAI export again, once handed out (the primary context current)": (
        {"cuCtxGetCurrent": 1, "cuEventRecord": 1, "cuStreamWaitEvent": 1},
        "a consumer may have written the memory on the legacy default stream since: an event there "
        "(its handle 1 names the current context's, so the context is checked) that devbuf's "
        "non-blocking stream waits for"),
    "DLPack import": (
        {"cuPointerGetAttributes": 1},
        "the pointer query: the allocation holding the tensor (the capsule names the device)"),
    "CAI import, sync=False": (
        {"cuPointerGetAttributes": 2},
        "two pointer queries: which backend and device the bare pointer belongs to (the registry "
        "asks each backend that speaks CAI), then the allocation that must hold the whole span"),
    "CAI import naming the producer's stream": (
        {"cuPointerGetAttributes": 2, "cuStreamGetCtx": 1, "cuEventRecord": 2, "cuStreamWaitEvent": 1},
        "the pointer queries; the producer stream's context (an event must be of its stream's "
        "context), an event there that devbuf's stream waits for, and devbuf's event after it, "
        "which host views and other queues wait for"),
    "CAI import naming no stream (the primary context current)": (
        {"cuPointerGetAttributes": 2, "cuCtxGetCurrent": 1, "cuEventRecord": 2, "cuStreamWaitEvent": 1},
        "as for a named stream, the producer's stream being the legacy default stream "
        "(protocol.implied_cai_stream), whose handle names the current context's"),
    "copy 1 KiB device to device, enqueued": (
        {"cuMemcpyAsync": 1, "cuEventRecord": 1},
        "the copy, and the event that records it as pending work on both buffers"),
    "x[:, 0] = 5 of a 100x100 float32 device array, waited for": (
        {"cuMemcpy2DAsync_v2": 1, "cuStreamSynchronize": 1},
        "the column's 100 elements, 400 bytes apart, as one 2-D copy from a host pattern of 100 "
        "elements (a copy per element made 100 cuMemcpyAsync), and the host's wait for it"),
    "x[:, 0].fill(5, blocking=False) of a 100x100 float32 device array": (
        {"cuMemcpy2DAsync_v2": 1, "cuEventRecord": 1},
        "the one 2-D copy, and the event that records it as pending work on the array"),
    "x[:, 0].get() of a 100x100 float32 device array": (
        {"cuMemcpy2DAsync_v2": 1, "cuStreamSynchronize": 1},
        "the column as one 2-D copy straight into NumPy's array, and the wait for it (gathered "
        "into pinned staging first, a copy per element, it made 111 calls)"),
    "an empty device buffer: alloc, fill, copy, to_bytes, CAI and DLPack exports, free": (
        {}, "no memory (a null pointer, as RMM's): nothing to allocate, touch, order or free"),
}


@pytest.fixture(scope="module")
def made():
    """What each path made, measured in a child process with the counts on; the test driver's
    delay and immediate pool reuse are left out there: they change what is pending, not what a
    path asks of the driver."""
    cuda = require_backend("cuda")
    if not cuda.devices[0].test_double:
        pytest.skip("needs the CUDA test driver's call counts (DEVBUF_CUDA_TEST_COUNT_CALLS), which a GPU lacks")
    env = {key: value for key, value in os.environ.items()
           if key not in ("DEVBUF_CUDA_TEST_DELAY_US", "DEVBUF_CUDA_TEST_POOL_REUSE")}
    env["DEVBUF_CUDA_TEST_COUNT_CALLS"] = "1"
    script = Path(__file__).with_name("driver_calls.py")
    done = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_every_measured_path_has_a_budget(made):
    assert sorted(made) == sorted(BUDGETS)


@pytest.mark.parametrize("path", sorted(BUDGETS))
def test_hot_path_keeps_its_driver_call_budget(made, path):
    budget, reason = BUDGETS[path]
    assert made[path] == budget, f"{path}: made {made[path]}, its budget is {budget}: {reason}"


def test_the_counts_are_off_unless_asked_for():
    """The knob is the test driver's: without it the double counts nothing (and a GPU has no
    such entry point)."""
    cuda = require_backend("cuda")
    if not cuda.devices[0].test_double:
        pytest.skip("needs the CUDA test driver")
    env = dict(os.environ)
    env.pop("DEVBUF_CUDA_TEST_COUNT_CALLS", None)
    code = ("import ctypes, devbuf; devbuf.alloc(8, 'device', device='cuda:0'); "
            "lib = ctypes.CDLL('libcuda.so.1'); lib.devbufTestDriverCallCounts.restype = ctypes.c_int64; "
            "print(lib.devbufTestDriverCallCounts(None, 0))")
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "-1"
    assert devbuf.devices("cuda")
