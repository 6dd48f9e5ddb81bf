"""A 0-byte buffer (RMM's `DeviceBuffer(size=0)`): a null pointer and no memory where every
protocol of its backend takes a null pointer for no elements (CAI, DLPack, the buffer protocol),
a 1-byte allocation where one refuses it (dpctl's `__sycl_usm_array_interface__`); every path
takes it either way, on every backend and kind."""

import gc
import pickle

import numpy as np
import pytest

import devbuf
import devbuf.mr as mr
from conftest import backend_info, backend_names, require_backend, usable_kinds


@pytest.fixture(params=backend_names())
def device(request):
    require_backend(request.param)
    usable = [d for d in devbuf.devices(request.param) if d.usable]
    if not usable:
        pytest.skip(f"no usable {request.param} device")
    return usable[0]


def speaks(device, protocol):
    return protocol in backend_info(device.backend).protocols


def refuses_null(device):
    """Whether a protocol the device's memory is described by refuses a null data pointer:
    dpctl's reading of `__sycl_usm_array_interface__` (the test below)."""
    return speaks(device, "__sycl_usm_array_interface__")


def test_an_empty_buffer_is_null_unless_a_protocol_of_its_backend_refuses_null(device):
    for kind in usable_kinds(device):
        empty = devbuf.alloc(0, kind, device=device)
        assert (empty.nbytes, empty.kind, empty.owned) == (0, kind, True)
        if refuses_null(device):
            assert empty.ptr != 0 and empty.capacity() == 1
        else:
            assert empty.ptr == 0 and empty.capacity() == 0


def test_dpctl_refuses_a_null_pointer_and_takes_an_empty_sycl_buffer():
    # Why SYCL's empty buffers own a byte: were dpctl to take null, they could be null too.
    require_backend("sycl")
    dm = pytest.importorskip("dpctl.memory")
    empty = devbuf.alloc(0, "shared", device="sycl")
    null = dict(empty.__sycl_usm_array_interface__, data=(0, False))
    with pytest.raises(ValueError, match="0x0 is not bound"):
        dm.as_usm_memory(type("Null", (), {"__sycl_usm_array_interface__": null})())
    assert dm.as_usm_memory(empty)._pointer == empty.ptr


def test_every_path_takes_an_empty_buffer(device):
    for kind in usable_kinds(device):
        counted = mr.StatisticsResourceAdaptor(mr.QueueMemoryResource(device))
        empty = devbuf.alloc(0, kind, mr=counted)
        other = devbuf.alloc(0, kind, device=device)
        # Copies and fills, both ways, on the buffer's queue and on a stream of its device.
        empty.fill(7)
        empty.copy_from(other)
        other.copy_from(empty)
        empty.copy_from_host(b"")
        assert empty.to_bytes() == bytes(empty) == empty.tobytes() == b""
        assert empty.get().shape == (0,)
        if backend_info(device.backend).makes_streams:
            stream = devbuf.Stream(device)
            empty.fill(1, stream=stream)
            assert empty.to_bytes(stream=stream) == b""
        # Views and imports of it.
        assert empty.view("float64").shape == (0,)
        assert devbuf.asarray(empty).nbytes == 0
        # Exports: each the buffer's device speaks.
        assert np.from_dlpack(empty, device="cpu").shape == (0,)
        assert devbuf.from_dlpack(empty).nbytes == 0
        if speaks(device, "__cuda_array_interface__"):
            assert empty.__cuda_array_interface__["data"] == (empty.ptr, False)
        if speaks(device, "__sycl_usm_array_interface__"):
            assert empty.__sycl_usm_array_interface__["data"] == (empty.ptr, False)
        viewed = None
        if empty.ptr == 0 or kind != "device":
            try:
                viewed = memoryview(empty)
            except BufferError:
                assert kind == "device"
            else:
                assert viewed.nbytes == 0 and np.asarray(empty).shape == (0,)
        # Pickles, in band and out of band.
        for protocol in (4, 5):
            buffers = []
            again = pickle.loads(pickle.dumps(empty, protocol=protocol, buffer_callback=buffers.append
                                              if protocol == 5 else None), buffers=buffers)
            assert (again.nbytes, again.to_bytes()) == (0, b"")
        # A null buffer takes nothing from its resource, and grows from it (RMM's resize).
        held = 1 if empty.ptr else 0
        assert counted.allocation_counts.current_count == held, (device, kind)
        grown = devbuf.alloc(0, kind, mr=counted)
        grown.resize(100)
        grown.fill(3)
        assert grown.to_bytes() == b"\x03" * 100 and grown.kind == kind
        assert counted.allocation_counts.current_count == held + 1
        del empty, other, grown, again, buffers, viewed
        gc.collect()
        assert counted.allocation_counts.current_count == 0, (device, kind)
