"""Explicit device-to-host transfers (issue 24): `Array.get()` / `copy_to_host()` return NumPy
arrays on every backend, `np.asarray` of memory the host cannot read raises TypeError naming
them, and `devbuf.asarray(..., device=...)` copies into device memory unless `kind=` says
otherwise."""

import numpy as np
import pytest

import devbuf
from conftest import backend_names, require_backend


@pytest.fixture(params=backend_names())
def device(request):
    require_backend(request.param)
    return devbuf.Device(request.param)


def device_array(device, values):
    array = devbuf.alloc(values.nbytes, "device", device=device).view(values.dtype, values.shape)
    array.copy_from(values)
    return array


def test_get_and_copy_to_host_return_numpy_arrays(device):
    values = np.arange(12, dtype=np.float32).reshape(3, 4)
    array = device_array(device, values)
    for got in (array.get(), array.copy_to_host()):
        assert type(got) is np.ndarray
        assert got.dtype == np.float32 and got.shape == (3, 4)
        np.testing.assert_array_equal(got, values)


def test_get_into_out(device):
    values = np.arange(6, dtype=np.int64)
    array = device_array(device, values)
    out = np.zeros(6, np.int64)
    assert array.get(out=out) is out
    np.testing.assert_array_equal(out, values)
    assert array.copy_to_host(np.zeros(6, np.int64)).sum() == values.sum()
    with pytest.raises(ValueError, match="out"):
        array.get(out=np.zeros(5, np.int64))
    with pytest.raises(ValueError, match="out"):
        array.get(out=np.zeros(6, np.int32))
    # Any writable bytes-like object of the array's size in bytes, as RMM's copy_to_host takes.
    raw = array.get(out=bytearray(48))
    np.testing.assert_array_equal(np.frombuffer(raw, np.int64), values)
    with pytest.raises(ValueError, match="out"):
        array.get(out=bytearray(40))
    with pytest.raises(TypeError, match="out"):
        array.get(out="48 bytes")


def test_get_of_a_strided_view(device):
    values = np.arange(8, dtype=np.float32)
    buffer = device_array(device, values).buffer
    every_other = buffer.view("float32", shape=(4,), strides=(8,))
    np.testing.assert_array_equal(every_other.get(), values[::2])
    reversed_ = buffer.view("float32", shape=(8,), strides=(-4,), offset=28)
    np.testing.assert_array_equal(reversed_.get(), values[::-1])
    out = np.zeros(4, np.float32)
    every_other.get(out=out)
    np.testing.assert_array_equal(out, values[::2])


@pytest.mark.parametrize("kind", ["device", "shared", "host"])
def test_get_of_columns_and_rows_of_every_kind(device, kind):
    """Runs a fixed step apart (a column, every other row) land in NumPy's array as rows: one
    2-D copy on CUDA, a copy per row elsewhere, memcpys on the host for the host's own memory."""
    if kind not in device.kinds:
        pytest.skip(f"{device} has no {kind} memory")
    values = np.arange(35 * 9, dtype=np.float32).reshape(35, 9)
    array = devbuf.alloc(values.nbytes, kind, device=device).view("float32", values.shape)
    array.copy_from(values)
    np.testing.assert_array_equal(array[:, 2].get(), values[:, 2])
    np.testing.assert_array_equal(array[1::2, 3:7].get(), values[1::2, 3:7])
    out = bytearray(35 * 4)
    array[:, 8].get(out=out)
    np.testing.assert_array_equal(np.frombuffer(out, np.float32), values[:, 8])


@pytest.mark.parametrize("kind", ["device", "shared", "host"])
def test_get_of_a_strided_view_comes_after_the_work_on_it(device, kind):
    """The ordering invariant on the way out: a strided get() of memory that a fill is still
    writing sees the fill, whether the runs are copied by the runtime or, for the host's own
    memory, read on the host (which waits first)."""
    if kind not in device.kinds:
        pytest.skip(f"{device} has no {kind} memory")
    size = 8 << 20
    buffer = devbuf.alloc(size, kind, device=device)
    buffer.fill(0)
    for value in (1, 2, 3):
        buffer.fill(value, blocking=False)
        every_4096th = buffer.view("uint8", shape=(size // 4096,), strides=(4096,))
        assert set(every_4096th.get().tolist()) == {value}


def test_implicit_conversion_of_device_memory_raises(device):
    array = device_array(device, np.arange(4, dtype=np.float32))
    if array.buffer.kind == "device" and device.backend == "host":
        # The host backend's "device" memory is host memory: NumPy may view it.
        np.testing.assert_array_equal(np.asarray(array), np.arange(4))
        return
    with pytest.raises(TypeError, match=r"get\(\)"):
        np.asarray(array)
    with pytest.raises(TypeError, match=r"get\(\)"):
        np.array(array)


@pytest.mark.parametrize("kind", ["device", "shared", "host"])
def test_bytes_of_a_buffer_copies_every_kind_to_the_host(device, kind):
    # RMM's DeviceBuffer: bytes(buffer) is its bytes, device memory included; the buffer protocol
    # itself stays for memory the host can read.
    if kind not in device.kinds:
        pytest.skip(f"{device} has no {kind} memory")
    buffer = devbuf.Buffer.from_host(bytes(range(200)), kind, device)
    assert bytes(buffer) == bytes(range(200)) == buffer.to_bytes()
    assert bytes(devbuf.alloc(0, kind, device=device)) == b""
    if kind == "device" and device.backend != "host":
        with pytest.raises(BufferError, match="not host-accessible"):
            memoryview(buffer)


def test_implicit_conversion_of_host_readable_memory_views_it(device):
    if "shared" not in device.kinds:
        pytest.skip(f"{device} has no shared memory")
    array = devbuf.alloc(16, "shared", device=device).view("int32")
    array.copy_from(np.arange(4, dtype=np.int32))
    if not array.buffer.kind == "shared":
        pytest.skip("not shared memory")
    try:
        viewed = np.asarray(array)
    except TypeError:
        pytest.skip("this device's shared memory is not host-readable while the device works")
    np.testing.assert_array_equal(viewed, np.arange(4))
    np.testing.assert_array_equal(array.__array__(dtype="float64"), np.arange(4.0))


def test_asarray_onto_a_device_gives_device_memory(device):
    if device.backend == "host":
        pytest.skip("the host is not a device")
    values = np.arange(5.0)
    for copied in (
        devbuf.asarray(values, device=device),
        devbuf.asarray(values, device=device, copy=True),
    ):
        assert copied.kind == "device"
        np.testing.assert_array_equal(copied.get(), values)
    pinned = devbuf.asarray(values, device=device, kind="host")
    assert pinned.kind == "host"
    np.testing.assert_array_equal(np.asarray(pinned), values)
    with pytest.raises(ValueError, match="copy"):
        devbuf.asarray(values, device=device, copy=False)
