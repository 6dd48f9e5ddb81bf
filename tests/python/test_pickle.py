"""Pickling: protocol 5 out-of-band for host-accessible memory, copies for device memory and
older protocols, typed views kept exactly, the documented device fallback, and bad pickles."""

import copy
import pickle
import warnings

import numpy as np
import pytest

import devbuf
from conftest import backend_info, backend_names, usable_kinds


def devices_and_kinds():
    cases = []
    for backend in backend_names():
        info = backend_info(backend)
        if info is None or not info.available:
            continue
        device = next(d for d in info.devices if d.usable)
        cases += [(device.selector, kind) for kind in usable_kinds(device)]
    return cases


def filled(nbytes, kind, device):
    buffer = devbuf.alloc(nbytes, kind, device=device)
    buffer.copy_from(np.arange(nbytes, dtype=np.uint8))
    return buffer


def host_accessible(x):
    try:
        memoryview(x)
        return True
    except BufferError:
        return False


@pytest.mark.parametrize(("device", "kind"), devices_and_kinds())
@pytest.mark.parametrize("protocol", [2, 4, 5])
def test_buffers_round_trip_on_their_device_and_kind(device, kind, protocol):
    buffer = filled(1000, kind, device)
    back = pickle.loads(pickle.dumps(buffer, protocol=protocol))
    assert isinstance(back, devbuf.Buffer)
    assert (back.device.selector, back.kind, back.nbytes) == (device, kind, 1000)
    assert back.to_bytes() == buffer.to_bytes()
    assert not back.readonly
    back.fill(1)  # a separate, writable copy
    assert buffer.to_bytes() == bytes(range(256)) * 3 + bytes(range(232))


@pytest.mark.parametrize(("device", "kind"), devices_and_kinds())
def test_protocol_5_is_out_of_band_for_host_accessible_memory_only(device, kind):
    buffer = filled(4096, kind, device)
    frames = []
    payload = pickle.dumps(buffer, protocol=5, buffer_callback=frames.append)
    assert len(frames) == 1 and len(payload) < 300
    raw = frames[0].raw()
    if host_accessible(buffer):
        # The frame is the memory itself: no copy on the sending side.
        assert np.frombuffer(raw, np.uint8).ctypes.data == buffer.ptr
    else:
        assert bytes(raw) == buffer.to_bytes()
    back = pickle.loads(payload, buffers=frames)
    assert back.to_bytes() == buffer.to_bytes() and back.kind == kind


def test_out_of_band_host_buffers_are_viewed_on_arrival_like_numpy():
    buffer = filled(64, "host", "host")
    frames = []
    payload = pickle.dumps(buffer, protocol=5, buffer_callback=frames.append)
    back = pickle.loads(payload, buffers=frames)
    assert back.ptr == buffer.ptr  # same process, same memory: as NumPy does
    assert not back.readonly
    stored = [bytes(frame.raw()) for frame in frames]  # a read-only store (Ray's is one)
    frozen = pickle.loads(payload, buffers=stored)
    assert frozen.readonly and frozen.to_bytes() == buffer.to_bytes()


@pytest.mark.parametrize("protocol", [2, 5])
def test_typed_arrays_keep_dtype_shape_strides_offset_and_readonly(protocol):
    buffer = filled(256, "host", "host")
    array = buffer.view("float32", shape=(3, 4), strides=(64, 8), offset=16)
    back = pickle.loads(pickle.dumps(array, protocol=protocol))
    assert type(back) is devbuf.Array
    assert (back.dtype, back.shape, back.strides, back.offset) == ("float32", (3, 4), (64, 8), 16)
    np.testing.assert_array_equal(np.asarray(back), np.asarray(array))
    swapped = buffer.view(">i2", shape=(8,))
    back = pickle.loads(pickle.dumps(swapped, protocol=protocol))
    assert back.typestr == ">i2" and back.to_bytes() == swapped.to_bytes()
    frozen = devbuf.asarray(np.frombuffer(bytes(range(8)), np.uint8))
    assert frozen.readonly and pickle.loads(pickle.dumps(frozen, protocol=protocol)).readonly


def test_copy_and_deepcopy_copy_the_bytes():
    buffer = filled(32, "host", "host")
    for duplicate in (copy.copy(buffer), copy.deepcopy(buffer)):
        assert duplicate.to_bytes() == buffer.to_bytes() and duplicate.ptr != buffer.ptr


def test_a_missing_device_falls_back_to_the_default_then_the_host_with_a_warning():
    state = (1, "cuda:7", "device", False, ("float64", (2,), (8,), 0))
    with pytest.warns(devbuf.DeviceFallbackWarning, match="cuda:7"):
        back = devbuf._devbuf._rebuild(bytearray(16), state)
    assert back.device == devbuf.default_device() and back.shape == (2,)
    with pytest.warns(devbuf.DeviceFallbackWarning, match="nonsense"):
        back = devbuf._devbuf._rebuild(b"xy", (1, "nonsense:3", "shared", False, None))
    assert back.to_bytes() == b"xy"


@pytest.mark.parametrize(
    ("state", "error", "match"),
    [
        ("not a tuple", TypeError, "state"),
        ((2, "host", "host", False, None), ValueError, "format"),
        ((1, "host", "purple", False, None), ValueError, "kind"),
        ((1, "host", "unknown", False, None), ValueError, "kind"),
        ((1, "host", "host", False, ("float32", (100,), (4,), 0)), ValueError, "strides"),
        ((1, "host", "host", False, ("complex1024", (1,), (4,), 0)), ValueError, "dtype"),
        ((1, "host", "host", False, ("float32", (2,), (4, 4), 0)), ValueError, "strides"),
    ],
)
def test_crafted_states_are_clean_errors(state, error, match):
    with pytest.raises(error, match=match):
        devbuf._devbuf._rebuild(bytearray(8), state)


def test_data_without_the_buffer_protocol_is_a_type_error():
    with pytest.raises(TypeError, match="data"):
        devbuf._devbuf._rebuild(42, (1, "host", "host", False, None))


def test_truncated_and_garbled_pickles_raise_and_never_crash():
    array = filled(512, "host", "host").view("int32", shape=(8, 16))
    payload = pickle.dumps(array, protocol=5)
    for cut in range(0, len(payload), 7):
        with pytest.raises(Exception):
            pickle.loads(payload[:cut])
    rng = np.random.default_rng(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", devbuf.DeviceFallbackWarning)
        for _ in range(300):
            garbled = bytearray(payload)
            for index in rng.integers(0, len(garbled), 3):
                garbled[index] = rng.integers(0, 256)
            try:
                pickle.loads(bytes(garbled))
            except Exception:
                pass
