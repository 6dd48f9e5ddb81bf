"""`Buffer.from_handle(ptr, nbytes, device, owner=/deleter=)`, cuda.core's way to wrap a raw
pointer, checked as imports are: the device's runtime classifies the pointer, bytes past the
allocation are refused naming `nbytes`, a pointer the runtime does not know naming `ptr`; the
owner lives as long as the memory is used, a deleter runs once. test_cuda_from_handle.py runs the
device tests on CUDA."""

import gc

import numpy as np
import pytest

import devbuf
from conftest import require_backend


@pytest.fixture(params=["sycl"])
def device(request):
    require_backend(request.param)
    return devbuf.Device(request.param)


def test_host_pointers_are_taken_as_unknown_memory_with_their_owner():
    theirs = np.arange(16, dtype=np.uint8)
    ours = devbuf.Buffer.from_handle(theirs.ctypes.data, theirs.nbytes, "host", owner=theirs)
    assert (ours.ptr, ours.nbytes, ours.kind, ours.owned) == (theirs.ctypes.data, 16, "unknown", False)
    assert ours.to_bytes() == bytes(range(16))
    del theirs
    gc.collect()
    assert ours.to_bytes() == bytes(range(16)), "the owner is kept alive"


def test_a_deleter_runs_once_when_nothing_uses_the_memory():
    theirs = np.arange(8, dtype=np.uint8)
    calls = []
    ours = devbuf.Buffer.from_handle(theirs.ctypes.data, 8, "host", deleter=lambda: calls.append(1))
    view = ours[2:4]
    del ours
    gc.collect()
    assert calls == []
    del view
    gc.collect()
    assert calls == [1]


def test_mistakes_name_the_argument():
    theirs = np.zeros(8, np.uint8)
    with pytest.raises(ValueError, match=r"^ptr: a null pointer holds no bytes$"):
        devbuf.Buffer.from_handle(0, 8, "host")
    with pytest.raises(ValueError, match=r"^owner, deleter: pass one"):
        devbuf.Buffer.from_handle(theirs.ctypes.data, 8, "host", owner=theirs, deleter=print)
    with pytest.raises(TypeError, match=r"^deleter: expected a callable"):
        devbuf.Buffer.from_handle(theirs.ctypes.data, 8, "host", deleter=3)


def test_device_pointers_are_classified_and_their_extent_checked(device):
    memory = devbuf.alloc(4096, "device", device=device)
    ours = devbuf.Buffer.from_handle(memory.ptr + 64, 1024, device, owner=memory)
    assert (ours.kind, ours.device) == ("device", device)
    memory.fill(7)
    assert ours.to_bytes() == b"\x07" * 1024
    with pytest.raises(ValueError, match=r"^nbytes: .*(reaches past the end of the 4096-byte allocation|is not device memory of the device)"):
        devbuf.Buffer.from_handle(memory.ptr, 8192, device, owner=memory)
    host = np.zeros(64, np.uint8)
    with pytest.raises(ValueError, match=r"^ptr: 0x[0-9a-f]+ is not memory of"):
        devbuf.Buffer.from_handle(host.ctypes.data, 64, device)
