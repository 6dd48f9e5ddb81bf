"""Buffer.prefetch and Buffer.advise on shared memory, and PrefetchResourceAdaptor: on the host
backend (where every kind is host memory), on SYCL for real (dpctl's prefetch and mem_advise),
and on CUDA (the CUDA test driver in ci/test, which checks each call against NVIDIA's rules; a GPU
in ci/gpu)."""

import numpy as np
import pytest

import devbuf
import devbuf.mr as mr
from conftest import backend_names, require_backend

PATTERN = np.arange(4096, dtype=np.uint8)


def shared_with_pattern(device):
    buffer = devbuf.alloc(PATTERN.nbytes, "shared", device=device)
    buffer.copy_from(PATTERN)
    return buffer


def assert_pattern(buffer):
    assert np.array_equal(np.frombuffer(buffer.to_bytes(), np.uint8), PATTERN)


def test_hints_take_shared_memory_only():
    device = devbuf.alloc(64, "device", device="host")
    with pytest.raises(ValueError, match="prefetch takes shared \\(managed\\) memory, not device"):
        device.prefetch()
    with pytest.raises(ValueError, match="advise takes shared"):
        device.advise("set_read_mostly")


def test_on_the_host_backend_every_hint_is_taken_and_changes_nothing():
    buffer = shared_with_pattern("host")
    buffer.prefetch()
    buffer.prefetch("host", stream=devbuf.Stream("host"))
    buffer.advise("set_preferred_location", "device")
    buffer.advise(0)
    assert_pattern(buffer)


def test_bad_hints_are_named():
    buffer = shared_with_pattern("host")
    with pytest.raises(ValueError, match='location: "gpu" is not "device" or "host"'):
        buffer.prefetch("gpu")
    with pytest.raises(ValueError, match='advice: "fast" is not set_read_mostly'):
        buffer.advise("fast")
    with pytest.raises(ValueError, match="set_accessed_by names a location"):
        buffer.advise("set_accessed_by")
    with pytest.raises(TypeError, match="advice: expected a name"):
        buffer.advise(1.5)


def test_sycl_prefetches_to_the_device_and_takes_its_own_advice_numbers():
    require_backend("sycl")
    buffer = shared_with_pattern("sycl")
    buffer.prefetch()
    buffer.prefetch(stream=devbuf.Stream("sycl"))
    buffer.advise(0)
    assert_pattern(buffer)
    with pytest.raises(ValueError, match="prefetching to the host is not supported"):
        buffer.prefetch("host")
    with pytest.raises(ValueError, match="takes the backend's own advice number"):
        buffer.advise("set_read_mostly")


def test_cuda_prefetches_and_advises_managed_memory():
    require_backend("cuda")
    buffer = shared_with_pattern("cuda")
    buffer.prefetch()
    buffer.prefetch("host")
    buffer.advise("set_read_mostly")
    buffer.advise("set_preferred_location", "device")
    buffer.advise("set_accessed_by", "host")
    buffer.advise("unset_accessed_by", "host")
    assert_pattern(buffer)
    with pytest.raises(ValueError, match="CUDA's cuMemAdvise takes its named advice"):
        buffer.advise(1)


@pytest.mark.parametrize("backend", backend_names())
def test_a_prefetch_adaptor_serves_every_kind(backend):
    require_backend(backend)
    prefetching = mr.PrefetchResourceAdaptor(mr.PoolMemoryResource(mr.QueueMemoryResource(backend)))
    device = devbuf.Device(backend)
    for kind in [k for k in ("host", "device", "shared") if k in device.kinds]:
        buffer = devbuf.alloc(PATTERN.nbytes, kind, mr=prefetching)
        buffer.copy_from(PATTERN)
        assert_pattern(buffer)
