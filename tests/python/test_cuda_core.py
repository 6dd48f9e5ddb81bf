"""cuda.core's own objects with devbuf: a buffer from cuda.core's default memory resource (stream-
ordered memory from the device's pool, which belongs to no CUDA context) and from its managed
memory resource (CUDA 13's managed pools), cuda.core
`StridedMemoryView`s of devbuf arrays, and DLPack exchanges ordered on a cuda.core `Stream`.

ci/test runs these on the devbuf CUDA test driver, which follows NVIDIA's documentation for pool
memory (CU_POINTER_ATTRIBUTE_CONTEXT is NULL); the ordering scenarios run in a fresh process with
the driver's per-operation delay on (DEVBUF_CUDA_TEST_DELAY_US; a real driver ignores it), so that a
missing wait reads the poison the driver fills fresh memory with."""

import ctypes
import importlib
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import devbuf
from conftest import require_backend

N = 1 << 16


@pytest.fixture(scope="module")
def core():
    require_backend("cuda")
    try:
        core = importlib.import_module("cuda.core")
    except ImportError as err:
        pytest.skip(f"cuda.core is not installed: {err}")
    core.Device(0).set_current()
    return core


@pytest.fixture(scope="module")
def strided_view(core):
    return importlib.import_module("cuda.core.utils").StridedMemoryView


def pointer_context(ptr):
    """CU_POINTER_ATTRIBUTE_CONTEXT of `ptr`, through cuda-bindings (cuda.core's own driver layer)."""
    from cuda.bindings import driver

    result, context = driver.cuPointerGetAttribute(
        driver.CUpointer_attribute.CU_POINTER_ATTRIBUTE_CONTEXT, ptr
    )
    assert result == driver.CUresult.CUDA_SUCCESS, result
    return int(context)


class CaiOnly:
    """`n` bytes at `ptr` through the CUDA Array Interface alone, as CuPy, PyTorch and Numba hand
    devbuf their arrays (CuPy's async allocator, PyTorch's cudaMallocAsync backend and RMM's async
    resource give pool memory too)."""

    def __init__(self, ptr, n, stream):
        self.__cuda_array_interface__ = {
            "shape": (n,), "typestr": "|u1", "data": (ptr, False), "version": 3, "stream": stream,
        }


def test_asarray_takes_a_buffer_from_cuda_cores_pool(core):
    device = core.Device(0)
    stream = device.create_stream()
    buffer = device.memory_resource.allocate(N, stream=stream)
    buffer.fill(0x5A, stream=stream)
    # Stream-ordered memory: no context owns it, so devbuf classifies it by its device.
    stream.sync()
    assert pointer_context(int(buffer.handle)) == 0
    for array in (devbuf.asarray(buffer), devbuf.asarray(CaiOnly(int(buffer.handle), N, int(stream.handle)))):
        assert array.ptr == int(buffer.handle) and array.kind == "device"
        assert array.device.selector == "cuda:0" and array.shape == (N,)
        assert array.to_bytes() == bytes([0x5A]) * N
    # devbuf writes it, cuda.core reads it back.
    array.copy_from(bytes(range(256)) * (N // 256))
    host = core.LegacyPinnedMemoryResource().allocate(N)
    buffer.copy_to(host, stream=stream)
    stream.sync()
    assert ctypes.string_at(int(host.handle), 256) == bytes(range(256))


def test_asarray_takes_devbufs_own_pool_memory_through_cai(core):
    own = devbuf.alloc(N, "device", device="cuda")
    own.fill(9)
    assert pointer_context(own.ptr) == 0, "devbuf allocates from the device's pool"
    array = devbuf.asarray(CaiOnly(own.ptr, N, None))
    assert array.ptr == own.ptr and array.to_bytes() == bytes([9]) * N


def test_asarray_takes_a_buffer_from_a_pool_of_cuda_cores_own(core):
    device = core.Device(0)
    stream = device.create_stream()
    resource = core.DeviceMemoryResource(device, core.DeviceMemoryResourceOptions(max_size=N))
    buffer = resource.allocate(4096, stream=stream)
    buffer.fill(3, stream=stream)
    array = devbuf.asarray(CaiOnly(int(buffer.handle), 4096, int(stream.handle)))
    assert array.ptr == int(buffer.handle) and array.to_bytes() == bytes([3]) * 4096


@pytest.mark.parametrize("preferred", [None, 1])
def test_asarray_takes_a_buffer_from_cuda_cores_managed_pool(core, preferred):
    # CUDA 13's managed memory pools: stream-ordered managed memory, which no context owns either.
    # Through DLPack devbuf takes the device cuda.core names; through CAI, the driver's.
    from cuda.bindings import driver

    devices = sum(device.backend == "cuda" for device in devbuf.devices())
    if preferred is not None and preferred >= devices:
        pytest.skip(f"the pool prefers cuda:{preferred}, which needs {preferred + 1} CUDA devices; {devices} here")
    options = core.ManagedMemoryResourceOptions(preferred_location=preferred)
    resource = core.ManagedMemoryResource(options)
    stream = core.Device(0).create_stream()
    buffer = resource.allocate(4096, stream=stream)
    buffer.fill(4, stream=stream)
    stream.sync()
    ptr = int(buffer.handle)
    assert pointer_context(ptr) == 0
    result, ordinal = driver.cuPointerGetAttribute(
        driver.CUpointer_attribute.CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, ptr
    )
    assert result == driver.CUresult.CUDA_SUCCESS, result
    named = buffer.__dlpack_device__()[1]
    cai = CaiOnly(ptr, 4096, int(stream.handle))
    for array, device in ((devbuf.asarray(buffer), named), (devbuf.asarray(cai), ordinal)):
        assert array.ptr == ptr and array.kind == "shared"
        assert array.device.selector == f"cuda:{device}"
        assert array.to_bytes() == bytes([4]) * 4096


@pytest.mark.parametrize("kind,accessible", [("device", False), ("host", True), ("shared", True)])
def test_strided_memory_views_of_devbuf_arrays(core, strided_view, kind, accessible):
    stream = core.Device(0).create_stream()
    buffer = devbuf.alloc(4096, kind, device="cuda")
    array = buffer.view("float32", shape=(32, 32))
    for make in (strided_view.from_dlpack, strided_view.from_cuda_array_interface):
        view = make(array, stream_ptr=int(stream.handle))
        assert view.ptr == buffer.ptr and tuple(view.shape) == (32, 32)
        assert view.dtype == np.float32 and view.device_id == 0
        assert view.is_device_accessible and not view.readonly
        assert view.strides in (None, (32, 1))
    # Negative strides and an offset survive both protocols, counted in elements.
    reversed_view = buffer.view("float32", shape=(16,), strides=(-8,), offset=128)
    for make in (strided_view.from_dlpack, strided_view.from_cuda_array_interface):
        view = make(reversed_view, stream_ptr=int(stream.handle))
        assert view.ptr == buffer.ptr + 128 and tuple(view.strides) == (-2,)
    assert devbuf.asarray(array).ptr == buffer.ptr
    assert (kind == "device") != accessible


PRELUDE = textwrap.dedent(
    """
    import ctypes
    import devbuf
    from cuda.core import Device, Buffer, LegacyPinnedMemoryResource
    from cuda.core.utils import StridedMemoryView

    N = 1 << 20
    device = Device(0)
    device.set_current()
    stream = device.create_stream()  # non-blocking: nothing orders it but events

    def host_bytes(buffer):
        return ctypes.string_at(int(buffer.handle), buffer.size)

    def read_on_stream(view):
        # The N bytes at `view` as cuda.core reads them: copied to pinned memory on `stream`.
        host = LegacyPinnedMemoryResource().allocate(N)
        Buffer.from_handle(view.ptr, N).copy_to(host, stream=stream)
        stream.sync()
        return host_bytes(host)
    """
)


def run(script):
    """Runs `script` after PRELUDE in a fresh process with the driver's delay on."""
    variables = {**os.environ, "DEVBUF_CUDA_TEST_DELAY_US": "20000"}
    result = subprocess.run(
        [sys.executable, "-c", PRELUDE + textwrap.dedent(script)],
        env=variables,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_dlpack_export_to_a_cuda_core_stream_waits_for_devbuf_work(core):
    # devbuf's fill is still pending on its own stream when cuda.core takes the array with its
    # stream: DLPack makes that stream wait, so cuda.core's copy reads the fill, not the poison.
    run(
        """
        array = devbuf.alloc(N, "device", device="cuda")
        array.fill(3, blocking=False)
        view = StridedMemoryView.from_dlpack(array.view("uint8"), stream_ptr=int(stream.handle))
        seen = read_on_stream(view)
        assert seen == bytes([3]) * N, set(seen)
        """
    )


def test_a_cai_export_names_devbufs_stream_for_a_cuda_core_consumer(core):
    # CAI's consumer waits on the stream the producer names: devbuf names its queue's stream,
    # which cuda.core's StridedMemoryView makes its own stream wait for.
    run(
        """
        array = devbuf.alloc(N, "device", device="cuda")
        array.fill(4, blocking=False)
        view = StridedMemoryView.from_cuda_array_interface(
            array.view("uint8"), stream_ptr=int(stream.handle)
        )
        seen = read_on_stream(view)
        assert seen == bytes([4]) * N, set(seen)
        """
    )


@pytest.mark.parametrize("export", ["dlpack", "cai"])
def test_work_pending_on_a_stream_its_owner_closed_is_joined_for_the_next_consumer(core, export):
    # devbuf's fill is still pending on cuda.core's stream when cuda.core destroys it: the next
    # consumer is ordered after the fill through its event, joined on a stream that still exists
    # (never a wait on, or a CAI `stream` naming, the destroyed one), and reads the fill.
    run(
        f"""
        theirs = device.create_stream()
        array = devbuf.alloc(N, "device", device="cuda")
        array.fill(7, stream=devbuf.Stream(theirs), blocking=False)
        dead = int(theirs.handle)
        theirs.close()
        if "{export}" == "dlpack":
            view = StridedMemoryView.from_dlpack(array.view("uint8"), stream_ptr=int(stream.handle))
        else:
            named = array.__cuda_array_interface__["stream"]
            assert named not in (None, dead), named
            view = StridedMemoryView.from_cuda_array_interface(
                array.view("uint8"), stream_ptr=int(stream.handle)
            )
        seen = read_on_stream(view)
        assert seen == bytes([7]) * N, set(seen)
        """
    )


@pytest.mark.parametrize("export", ["dlpack", "cai", "none"])
@pytest.mark.parametrize("blocking", [True, False])
def test_memory_handed_out_on_a_stream_its_owner_closed_still_reads(core, export, blocking):
    # devbuf records the cuda.core stream the memory was handed out on; cuda.core's close()
    # destroys it while devbuf still holds the object. The next read must neither use the dead
    # stream nor miss the work the driver still runs there (a consumer's late write on it).
    run(
        f"""
        from cuda.bindings import driver
        theirs = device.create_stream()
        ours = devbuf.Stream(theirs)
        array = devbuf.alloc(N, "device", device="cuda")
        array.fill(7, stream=ours, blocking={blocking})
        if "{export}" == "dlpack":
            array.__dlpack__(stream=int(theirs.handle))
        elif "{export}" == "cai":
            named = array.__cuda_array_interface__["stream"]
            # CAI names the stream with work pending, and none when nothing is (CAI v3).
            assert (named is None) == {blocking}, named
        handed_out = "{export}" == "dlpack" or ("{export}" == "cai" and not {blocking})
        # The consumer's write, late on its own stream, then the stream is gone.
        (result,) = driver.cuMemsetD8Async(array.ptr, 9, N, theirs.handle)
        assert result == driver.CUresult.CUDA_SUCCESS, result
        theirs.close()
        seen = set(array.to_bytes())
        if handed_out:
            assert seen == {{9}}, seen
        else:
            # Not handed out on that stream (no export, or a CAI export that named no stream,
            # which lets the consumer work on any stream unordered): the write is the user's own,
            # unordered with devbuf's read, which may see it in part (the read must still work,
            # the stream being gone).
            assert seen <= {{7, 9}}, seen
        """
    )
