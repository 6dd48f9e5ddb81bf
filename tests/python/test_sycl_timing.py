"""Timing on SYCL as cuda.core and CuPy users time on CUDA: a stream made with ``timing=True`` (a
SYCL profiling queue) records timed events, and ``end - start`` (or ``get_elapsed_time``) is the
device's time between them. Runs on the real SYCL runtime (the CPU device ci/setup installs)."""

import time

import pytest

import devbuf
from conftest import require_backend


@pytest.fixture
def device():
    require_backend("sycl")
    return devbuf.Device("sycl")


def test_a_timing_stream_times_its_work(device):
    stream = devbuf.Stream(device, timing=True)
    source = devbuf.alloc(32 << 20, "device", device=device)
    target = devbuf.alloc(32 << 20, "device", device=device)
    source.fill(1)
    began = time.perf_counter()
    start = stream.record(timing=True)
    target.copy_from(source, stream=stream)
    end = stream.record(timing=True)
    end.synchronize()
    wall_ms = (time.perf_counter() - began) * 1000
    elapsed = end - start
    assert elapsed == devbuf.get_elapsed_time(start, end)
    assert 0 < elapsed <= wall_ms * 1.05 + 1, (elapsed, wall_ms)
    assert start - start == 0
    # Device.create_stream takes it too, by cuda.core's name.
    other = device.create_stream(timing=True)
    assert (other.record(timing=True) - other.record(timing=True)) <= 0


def test_a_plain_stream_says_how_to_get_timing(device):
    with pytest.raises(ValueError, match=r"a SYCL queue keeps timestamps only when made with profiling: .*timing=True"):
        devbuf.Stream(device).record(timing=True)
    # Events without timing still order and complete.
    assert devbuf.Stream(device).record().query() in (True, False)
