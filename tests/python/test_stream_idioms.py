"""Devices and streams as cuda.core, CuPy and dpctl users spell them: `Device.sync()`,
`Device.properties`, dpctl's filter words as selectors; `Stream.priority`, `is_nonblocking`,
`handle`; `with stream:` as the stream of the calls that name none; and protocol attributes that
are absent (so `hasattr` says False) where they cannot be answered; on every backend whose
descriptor says it makes streams. test_cuda_stream_idioms.py runs the same tests on CUDA, for
ci/test's runs on the CUDA test driver."""

import gc

import numpy as np
import pytest

import devbuf
from conftest import backend_names, require_backend


@pytest.fixture(params=backend_names(makes_streams=True))
def device(request):
    require_backend(request.param)
    return devbuf.Device(request.param)


def is_cuda(device):
    return device.backend == "cuda"


def test_device_sync_and_properties(device):
    device.sync()
    device.synchronize()
    properties = device.properties
    assert properties["selector"] == device.selector and properties["name"] == device.name
    assert properties["global_mem_size"] == device.global_mem_size
    assert set(properties["kinds"]) == set(device.kinds)
    # CuPy's Device.mem_info: (free, total) where the runtime reports free memory, else absent.
    if device.backend == "sycl":
        assert not hasattr(device, "mem_info")
        with pytest.raises(AttributeError, match=r"^mem_info: .*does not report free memory"):
            device.mem_info
    else:
        free, total = device.mem_info
        assert 0 < free <= total
        if device.backend == "cuda":
            assert total == device.global_mem_size


def test_dpctl_filter_words_are_sycl_selectors():
    require_backend("sycl")
    cpu = devbuf.Device("sycl").properties
    if "cpu" not in cpu["selector"]:
        pytest.skip("the SYCL device here is not a CPU")
    assert devbuf.Device("cpu") == devbuf.Device("sycl:cpu") == devbuf.Device("sycl")
    with pytest.raises(ValueError, match=r'no device matches "(sycl:)?accelerator:7"'):
        devbuf.Device("accelerator:7")


def test_stream_options_read_back(device):
    made = devbuf.Stream(device, non_blocking=False, priority=-1)
    assert (made.priority, made.is_nonblocking) == (-1, False)
    plain = device.create_stream()
    assert (plain.priority, plain.is_nonblocking) == (None, True)
    assert device.default_stream.is_nonblocking


def test_cuda_stream_protocol_is_absent_where_there_is_no_cuda_stream(device):
    stream = devbuf.Stream(device)
    assert hasattr(stream, "__cuda_stream__") == is_cuda(device)
    assert hasattr(stream, "handle") == is_cuda(device)
    if is_cuda(device):
        assert stream.__cuda_stream__() == (0, stream.handle) and stream.handle == stream.stream
    else:
        with pytest.raises(AttributeError, match=r"streams have no CUDA stream handle"):
            stream.__cuda_stream__


def test_with_stream_is_the_stream_of_calls_that_name_none(device):
    stream = devbuf.Stream(device)
    with stream as entered:
        assert entered is stream
        made = devbuf.alloc(1 << 20, "device")
        made.fill(5, blocking=False)
        values = np.arange(256, dtype=np.uint32)
        array = made[: values.nbytes].view("uint32")
        array.copy_from(values, blocking=False)
        assert (array.get() == values).all()
        assert made[values.nbytes :].to_bytes()[:4] == b"\x05" * 4
    assert made.queue == stream, "allocated on the current stream"
    # Another device's memory, or a device named, is not the current stream's.
    with stream:
        other = devbuf.alloc(64, "device", device="host")
        assert other.queue != stream or device.selector == "host"
    # Nested blocks: the innermost wins, and leaving restores the outer one.
    inner = devbuf.Stream(device)
    with stream:
        with inner:
            assert devbuf.alloc(64, "device").queue == inner
        assert devbuf.alloc(64, "device").queue == stream
    if device.backend != "host":  # the host has one queue: every stream is it
        assert devbuf.alloc(64, "device", device=device).queue != stream


def test_with_stream_enqueues_there(device):
    if device.backend == "host":
        pytest.skip("host work is done before each call returns")
    stream = devbuf.Stream(device)
    big = devbuf.alloc(256 << 20, "device", device=device)
    # The device's queue idle first (the allocation, earlier tests' frees), so that only where
    # the fill ran can keep it busy; no collection meanwhile, whose frees of earlier tests' memory
    # would be queued there (seen once on the test driver with its delay). The allocation is
    # waited for through the memory, so that devbuf forgets it: else ordering the fill after it
    # records an event on the device's queue, which a query right after may still see running
    # (3 of 16 runs on the test driver with its delay).
    gc.collect()
    gc.disable()
    try:
        big.synchronize()
        device.default_stream.synchronize()
        with stream:
            big.fill(1, blocking=False)
        busy = not stream.query()
        idle_elsewhere = device.default_stream.query()
    finally:
        gc.enable()
    stream.synchronize()
    assert busy and idle_elsewhere, "the fill ran on the current stream, not the device's queue"


def test_a_closed_stream_refuses_use_and_its_memory_stays_usable(device):
    stream = devbuf.Stream(device)
    memory = devbuf.alloc(1 << 20, "device", stream=stream)
    memory.fill(7, blocking=False, stream=stream)
    stream.close()
    stream.close()  # as cuda.core's: closing twice is allowed
    closed = r"^stream: <devbuf\.Stream on .*> was closed \(Stream\.close\(\)\)"
    for use in (
        stream.synchronize,
        stream.query,
        stream.record,
        stream.wait,
        lambda: stream.alloc(64),
        lambda: devbuf.alloc(64, stream=stream),
        lambda: memory.fill(1, stream=stream),
        lambda: memory.to_bytes(stream),
        lambda: stream.__enter__(),
    ):
        with pytest.raises(ValueError, match=closed):
            use()
    # Work enqueued before the close ran to its end, and the memory is still devbuf's to use.
    assert memory.to_bytes()[:4] == b"\x07" * 4
    memory.fill(9)
    assert memory.to_bytes()[-4:] == b"\x09" * 4
    assert memory.queue == stream and "devbuf.Stream" in repr(stream)


def test_a_devices_shared_stream_cannot_be_closed(device):
    with pytest.raises(ValueError, match=r"^stream: .* is its device's shared stream"):
        device.default_stream.close()
    devbuf.alloc(64, device=device).fill(0)
