"""Buffer.capacity/reserve/resize (RMM's DeviceBuffer's), and copy_to_host into any writable
bytes-like object, on the host backend (every kind exists there)."""

import gc

import numpy as np
import pytest

import devbuf
import devbuf.mr as mr
from conftest import backend_names, require_backend

DEVICE = "host"


@pytest.fixture(params=backend_names(makes_streams=True))
def device(request):
    require_backend(request.param)
    return devbuf.Device(request.param)


def test_a_buffer_shrinks_in_place_and_grows_back_within_its_capacity():
    buffer = devbuf.Buffer.from_host(b"abcdef", "device", DEVICE)
    ptr = buffer.ptr
    assert buffer.capacity() == 6
    buffer.resize(2)
    assert (buffer.nbytes, len(buffer), buffer.shape, buffer.ptr, buffer.capacity()) == (2, 2, (2,), ptr, 6)
    assert buffer.tobytes() == b"ab"
    buffer.resize(6)
    assert buffer.tobytes() == b"abcdef" and buffer.ptr == ptr, "the allocation's bytes, in place"


def test_a_buffer_grows_from_its_own_resource_with_its_bytes_first():
    stats = mr.StatisticsResourceAdaptor(mr.DeviceMemoryResource(DEVICE))
    buffer = devbuf.alloc(3, "device", DEVICE, mr=stats)
    buffer.copy_from_host(b"xyz")
    assert buffer.shape == (3,)  # a cached export of the old size goes with it
    buffer.resize(1000)
    assert buffer.nbytes == 1000 and buffer.shape == (1000,) and buffer.kind == "device"
    assert buffer.tobytes()[:3] == b"xyz"
    counts = stats.allocation_counts
    assert (counts.total_count, counts.total_bytes) == (2, 1003)
    gc.collect()
    assert stats.allocation_counts.current_bytes == 1000, "the old memory went back"


def test_reserve_keeps_the_size_and_the_bytes():
    buffer = devbuf.Buffer.from_host(b"abc", "device", DEVICE)
    buffer.reserve(100)
    assert (buffer.nbytes, buffer.capacity(), buffer.tobytes()) == (3, 100, b"abc")
    ptr = buffer.ptr
    buffer.reserve(10)  # already has room
    buffer.resize(100)
    assert buffer.ptr == ptr and buffer.tobytes()[:3] == b"abc"


def test_growing_is_stream_ordered(device):
    # The copy into the new memory runs on `copier`, after the fill still pending on `filler`
    # (the CUDA test driver's delay, DEVBUF_CUDA_TEST_DELAY_US, makes a missing wait read zeros).
    filler, copier = device.create_stream(), device.create_stream()
    buffer = devbuf.alloc(1 << 20, "device", device)
    buffer.fill(7, stream=filler, blocking=False)
    buffer.resize(2 << 20, stream=copier)
    assert buffer.nbytes == 2 << 20
    got = buffer.get(stream=device.create_stream())[: 1 << 20]
    assert (got == 7).all()


def test_memory_handed_to_a_consumer_that_keeps_the_buffer_keeps_its_size():
    buffer = devbuf.alloc(8, "host", DEVICE)
    view = memoryview(buffer)  # the buffer protocol: the consumer reads through the buffer
    for method, size in [("resize", 4), ("resize", 64), ("reserve", 64)]:
        with pytest.raises(BufferError, match=f"^{method}: the buffer's memory was handed out"):
            getattr(buffer, method)(size)
    assert buffer.nbytes == 8 and view.nbytes == 8
    readonly = devbuf.asarray(np.frombuffer(b"12345678", "u1")).buffer
    with pytest.raises((BufferError, ValueError)):
        readonly.resize(2)


@pytest.mark.parametrize("device", backend_names())
def test_an_ipc_shareable_buffer_grows_into_shareable_memory(device):
    # devbuf allocated it (alloc(ipc=True)), so it grows as any buffer devbuf allocated; the new
    # memory is shareable too, as the old was (found by the ordering machine: it was refused as
    # memory devbuf did not allocate).
    require_backend(device)
    kind = "device" if "device" in devbuf.Device(device).kinds else "host"
    try:
        buffer = devbuf.alloc(4, kind, device, ipc=True)
    except ValueError as refused:
        if "(IPC) is not supported" not in str(refused):
            raise
        pytest.skip(str(refused))
    buffer.copy_from_host(b"abcd")
    buffer.resize(64)
    assert (buffer.nbytes, buffer.kind, buffer.tobytes()[:4]) == (64, kind, b"abcd")
    assert buffer.ipc_handle().nbytes == 64
    buffer.reserve(256)
    assert (buffer.nbytes, buffer.capacity(), buffer.tobytes()[:4]) == (64, 256, b"abcd"), "reserved room is kept"


def test_foreign_memory_cannot_grow():
    host = np.zeros(16, "u1")
    imported = devbuf.Buffer.from_handle(host.ctypes.data, 16, DEVICE, owner=host)
    assert imported.capacity() == 16
    imported.resize(4)
    assert imported.nbytes == 4
    with pytest.raises(ValueError, match="did not allocate"):
        imported.resize(32)


@pytest.mark.parametrize("out", [bytearray(3), memoryview(bytearray(3)), np.zeros(3, "u1")])
def test_copy_to_host_takes_any_writable_object_of_the_size(out):
    buffer = devbuf.Buffer.from_host(b"abc", "device", DEVICE)
    assert buffer.copy_to_host(out) is out
    assert bytes(out) == b"abc"


def test_copy_to_host_refuses_what_does_not_fit():
    buffer = devbuf.Buffer.from_host(b"abc", "device", DEVICE)
    with pytest.raises(ValueError, match="out: expected a writable, contiguous object of 3 bytes"):
        buffer.copy_to_host(bytearray(4))
    with pytest.raises(ValueError, match="read-only"):
        buffer.copy_to_host(b"xyz")
    with pytest.raises(TypeError, match="out: expected a numpy.ndarray or a writable bytes-like"):
        buffer.copy_to_host("abc")
    floats = devbuf.asarray(np.arange(3, dtype="f4"))
    out = bytearray(12)
    floats.copy_to_host(out)
    assert np.frombuffer(out, "f4").tolist() == [0.0, 1.0, 2.0]


def test_the_pointer_copy_helpers_copy_by_address():
    source = devbuf.Buffer.from_host(b"abcdef", "device", DEVICE)
    target = devbuf.Buffer.from_host(bytes(6), "device", DEVICE)
    stream = devbuf.Stream(DEVICE)
    out = bytearray(3)
    assert devbuf.copy_ptr_to_host(source.ptr + 1, out, stream) is out and out == b"bcd"
    with devbuf.Device(DEVICE):  # without a stream, the address is on the default device
        devbuf.copy_host_to_ptr(np.frombuffer(b"XY", "u1"), target.ptr + 4)
        with pytest.raises(ValueError, match="nbytes"):
            devbuf.copy_ptr_to_host(source.ptr, bytearray(7))  # past the allocation
    devbuf.copy_device_to_ptr(source.ptr, target.ptr, 2, stream)
    assert target.tobytes() == b"ab\0\0XY"
