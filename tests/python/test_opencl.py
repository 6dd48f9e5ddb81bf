"""The OpenCL backend from Python, through the registry alone: every device listed with its kinds,
each kind on each usable device (Intel USM on Intel's CPU runtime, SVM on PoCL) written, read and
exported to NumPy, and DLPack device ids that lead back to the device."""

import numpy as np
import pytest

import devbuf
from conftest import require_backend, usable_kinds


def usable_devices():
    return [d for d in devbuf.devices("opencl") if usable_kinds(d)]


@pytest.fixture(scope="module")
def opencl():
    require_backend("opencl")
    devices = usable_devices()
    assert devices, "opencl is available, so some device is usable"
    return devices


def test_devices_carry_platform_device_selectors_and_kinds(opencl):
    for position, device in enumerate(devbuf.devices("opencl")):
        platform, index = device.selector.removeprefix("opencl:").split(":")
        assert int(platform) >= 0 and int(index) >= 0
        assert device.index == position
        assert devbuf.Device(device.selector).selector == device.selector
    # SVM devices have no host kind: only Intel USM offers all three.
    for device in opencl:
        assert usable_kinds(device) in (["host", "device", "shared"], ["device", "shared"])


def test_each_kind_round_trips_and_host_accessible_memory_reaches_numpy(opencl):
    for device in opencl:
        for kind in usable_kinds(device):
            buffer = devbuf.alloc(256, kind, device=device.selector)
            assert buffer.kind == kind
            assert buffer.__dlpack_device__() == (4, device.index)
            buffer.copy_from(np.arange(256, dtype=np.uint8))
            assert buffer.to_bytes() == bytes(range(256))
            buffer.fill(9)
            copy = np.from_dlpack(buffer, device="cpu")
            assert int(copy.sum()) == 9 * 256
            if kind == "device":
                with pytest.raises(BufferError):
                    memoryview(buffer)
            else:
                assert copy.ctypes.data == buffer.ptr


def test_dlpack_refuses_opencl_pointers_on_every_path(opencl):
    from consumer import load

    # DLPack's kDLOpenCL data is a cl_mem handle: a USM/SVM pointer under that label would be
    # misread, so only the CPU (for host-accessible memory) gets OpenCL memory through DLPack.
    for device in opencl:
        buffer = devbuf.alloc(64, "shared", device=device.selector)
        with pytest.raises(BufferError, match="cl_mem"):
            buffer.__dlpack__(max_version=(1, 3))
        with pytest.raises(BufferError, match="cl_mem"):
            load().describe(buffer)
        assert np.from_dlpack(buffer, device="cpu").ctypes.data == buffer.ptr
