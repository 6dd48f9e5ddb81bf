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


def test_every_stream_devbuf_makes_times_its_work_the_cuda_core_way(device):
    # cuda.core's idiom, on a stream made with no timing asked for and on the device's own.
    for stream in (device.create_stream(), devbuf.Stream(device), device.default_stream):
        assert stream.timing
        buffer = devbuf.alloc(16 << 20, "device", device=device)
        start = stream.record(timing=True)
        buffer.fill(3, stream=stream)
        end = stream.record(timing=True)
        end.synchronize()
        assert end - start >= 0
    # Events without timing still order and complete.
    assert devbuf.Stream(device).record().query() in (True, False)


def test_another_librarys_queue_times_as_it_was_made(device):
    dpctl = pytest.importorskip("dpctl")
    sycl_device = dpctl.SyclDevice(device.selector.split(":", 1)[1])
    timed = devbuf.Stream(dpctl.SyclQueue(sycl_device, property=["in_order", "enable_profiling"]))
    assert timed.timing
    assert timed.record(timing=True) - timed.record(timing=True) <= 0
    # Out of order: devbuf's commands run on an in-order queue of its own beside it, which times.
    beside = devbuf.Stream(dpctl.SyclQueue(sycl_device))
    assert beside.timing
    beside.record(timing=True).synchronize()
    untimed = devbuf.Stream(dpctl.SyclQueue(sycl_device, property="in_order"))
    assert not untimed.timing
    with pytest.raises(ValueError, match=r"without property::queue::enable_profiling"):
        untimed.record(timing=True)
