"""The SYCL backend from Python, against the real SYCL CPU runtime and real dpctl: zero-copy both
ways for each USM kind, every syclobj form, non-contiguous views, lifetimes, and the device without
USM (PoCL) that must never abort the process."""

import gc
import sys

import numpy as np
import pytest

import devbuf
from conftest import require_backend

dpctl = pytest.importorskip("dpctl")
dm = pytest.importorskip("dpctl.memory")

KINDS = ["host", "device", "shared"]
DPCTL_MEMORY = {"host": "MemoryUSMHost", "device": "MemoryUSMDevice", "shared": "MemoryUSMShared"}


@pytest.fixture(scope="module")
def sycl():
    require_backend("sycl")
    return devbuf.Device("sycl")


def test_default_device_is_the_usm_capable_one_and_pocl_is_listed_unusable(sycl):
    assert sycl.usable and sycl.kinds == KINDS
    assert devbuf.default_device() == sycl
    assert sycl.index == dpctl.get_devices().index(dpctl.SyclDevice(sycl.selector.removeprefix("sycl:")))
    unusable = [d for d in devbuf.devices("sycl") if not d.usable]
    for device in unusable:
        assert "no USM support" in device.reason
        for kind in KINDS:
            with pytest.raises(ValueError, match="not supported"):
                devbuf.alloc(64, kind, device=device.selector)


@pytest.mark.parametrize("kind", KINDS)
def test_dpctl_sees_our_memory_with_its_kind_and_bytes(sycl, kind):
    buffer = devbuf.alloc(256, kind)
    buffer.copy_from(bytes(range(256)))
    suai = buffer.__sycl_usm_array_interface__
    assert suai["version"] == 1 and suai["data"] == (buffer.ptr, False) and suai["typestr"] == "|u1"
    assert isinstance(suai["syclobj"], devbuf.Queue)
    theirs = dm.as_usm_memory(buffer)
    assert theirs.get_usm_type() == kind and theirs._pointer == buffer.ptr and theirs.nbytes == 256
    assert bytes(theirs.copy_to_host()) == bytes(range(256))
    theirs.copy_from_host(bytes(256))
    assert buffer.to_bytes() == bytes(256)
    constructed = getattr(dm, DPCTL_MEMORY[kind])(buffer)
    assert constructed._pointer == buffer.ptr and constructed.get_usm_type() == kind


@pytest.mark.parametrize("kind", KINDS)
def test_we_import_dpctl_memory_zero_copy(sycl, kind):
    theirs = getattr(dm, DPCTL_MEMORY[kind])(128)
    theirs.copy_from_host(b"x" * 128)
    ours = devbuf.asarray(theirs)
    assert (ours.ptr, ours.kind, ours.shape, ours.device) == (theirs._pointer, kind, (128,), sycl)
    assert ours.to_bytes() == b"x" * 128
    # dpctl's memory objects declare themselves read-only in data[1]; devbuf honours it.
    assert ours.readonly == theirs.__sycl_usm_array_interface__["data"][1]


@pytest.mark.parametrize(
    "syclobj",
    [
        lambda q: q,
        lambda q: q.sycl_context,
        lambda q: q._get_capsule(),
        lambda q: q.sycl_context._get_capsule(),
        lambda q: q.sycl_device.filter_string,
    ],
    ids=["SyclQueue", "SyclContext", "SyclQueueRef", "SyclContextRef", "filter-string"],
)
def test_every_syclobj_form_dpctl_accepts(sycl, syclobj):
    queue = dpctl.SyclQueue(sycl.selector.removeprefix("sycl:"))
    theirs = dm.MemoryUSMDevice(64, queue=queue)
    theirs.copy_from_host(bytes(range(64)))

    class Producer:
        __sycl_usm_array_interface__ = {
            "version": 1,
            "data": (theirs._pointer, False),
            "shape": (16,),
            "typestr": "<i4",
            "strides": None,
            "offset": 0,
            "syclobj": syclobj(queue),
        }

    ours = devbuf.asarray(Producer())
    assert ours.kind == "device" and ours.ptr == theirs._pointer
    assert ours.to_bytes() == bytes(range(64))


@pytest.mark.parametrize(
    "flag, readonly",
    [(False, False), (True, True), (np.bool_(False), False), (np.bool_(True), True)],
    ids=["False", "True", "np.False_", "np.True_"],
)
def test_the_read_only_flag_in_data_is_honoured_whatever_bool_carries_it(sycl, flag, readonly):
    # Python's own bools are read by identity, any other bool (NumPy's) by pyo3's extraction.
    theirs = dm.MemoryUSMShared(64)

    class Producer:
        __sycl_usm_array_interface__ = {
            "version": 1,
            "data": (theirs._pointer, flag),
            "shape": (64,),
            "typestr": "|u1",
            "syclobj": theirs.sycl_queue,
        }

    ours = devbuf.asarray(Producer())
    assert ours.readonly is readonly


@pytest.mark.parametrize("kind", KINDS)
def test_a_claim_past_the_end_of_dpctl_memory_is_refused(sycl, kind):
    """dpctl's C API bounds no allocation: devbuf checks that a span's first and last byte are the
    same USM on the same device. A terabyte claimed at the start of 4 KiB reaches memory that is
    not (a claim ending in another USM allocation of the device would pass: docs/guide/protocols.md)."""
    memory = getattr(dm, DPCTL_MEMORY[kind])(4096)

    class Claim:
        def __init__(self, shape, strides=None, offset=0):
            suai = dict(memory.__sycl_usm_array_interface__)
            self.__sycl_usm_array_interface__ = suai | {"shape": shape, "strides": strides, "offset": offset}

    assert devbuf.asarray(Claim((4096,))).buffer.nbytes == 4096
    with pytest.raises(ValueError, match=r"^shape: .* is not .* memory of the device"):
        devbuf.asarray(Claim((1 << 40,)))
    with pytest.raises(ValueError, match=r"^strides: "):
        devbuf.asarray(Claim((2,), strides=(1 << 40,)))
    with pytest.raises(ValueError, match=r"^strides: "):
        devbuf.asarray(Claim((2,), strides=(-(1 << 40),)))


def test_memory_of_another_context_is_refused(sycl):
    theirs = dm.MemoryUSMShared(64)

    class Foreign:
        __sycl_usm_array_interface__ = {
            "version": 1,
            "data": (np.zeros(16).ctypes.data, False),
            "shape": (64,),
            "typestr": "|u1",
            "syclobj": theirs.sycl_queue,
        }

    with pytest.raises(ValueError, match="^data: "):
        devbuf.asarray(Foreign())


def test_strided_views_export_elements_and_offsets(sycl):
    buffer = devbuf.alloc(64 * 8, "shared")
    np.asarray(buffer)[:] = np.arange(512) % 256
    view = buffer.view("float64", shape=(4, 4), strides=(-64, 16), offset=8 * 50)
    suai = view.__sycl_usm_array_interface__
    assert suai["strides"] == (-8, 2) and suai["offset"] == 50 and suai["data"][0] == buffer.ptr
    theirs = dm.as_usm_memory(view)
    host = np.frombuffer(bytes(theirs.copy_to_host()), dtype=np.uint8)
    expected = np.ndarray((4, 4), np.float64, buffer=np.asarray(buffer), offset=400, strides=(-64, 16))
    span_start = 400 - 3 * 64
    assert theirs._pointer == buffer.ptr + span_start
    np.testing.assert_array_equal(
        np.ndarray((4, 4), np.float64, buffer=host, offset=400 - span_start, strides=(-64, 16)), expected
    )
    back = devbuf.asarray(view)  # our own SUAI consumed by ourselves keeps the layout
    assert back.strides == (-64, 16) and back.ptr == view.ptr


@pytest.mark.parametrize("kind", ["host", "shared"])
def test_host_accessible_usm_reaches_numpy_zero_copy(sycl, kind):
    buffer = devbuf.alloc(64, kind)
    assert buffer.__dlpack_device__() == (14, sycl.index)
    np.asarray(buffer)[:] = 7
    via_dlpack = np.from_dlpack(buffer, device="cpu")
    assert via_dlpack.ctypes.data == buffer.ptr and int(via_dlpack.sum()) == 7 * 64


def test_device_usm_reaches_the_host_through_copies_only(sycl):
    buffer = devbuf.alloc(64, "device")
    buffer.fill(3)
    with pytest.raises(BufferError, match="not host-accessible"):
        memoryview(buffer)
    with pytest.raises(BufferError, match="copy=False"):
        buffer.__dlpack__(max_version=(1, 0), dl_device=(1, 0), copy=False)
    copy = np.from_dlpack(buffer, device="cpu")
    assert copy.ctypes.data != buffer.ptr and int(copy.sum()) == 3 * 64
    assert buffer.to_bytes() == b"\x03" * 64


def test_imports_keep_dpctl_memory_alive_exactly_as_long_as_a_view(sycl):
    theirs = dm.MemoryUSMShared(64)
    theirs.copy_from_host(b"k" * 64)
    references = sys.getrefcount(theirs)
    ours = devbuf.asarray(theirs)
    part = ours.buffer[8:16]
    assert sys.getrefcount(theirs) == references + 1  # one owner for every view
    del ours
    gc.collect()
    assert sys.getrefcount(theirs) == references + 1 and part.to_bytes() == b"k" * 8
    del part
    gc.collect()
    assert sys.getrefcount(theirs) == references
    dropped = devbuf.asarray(dm.MemoryUSMShared(64))  # the producer's only reference is ours
    gc.collect()
    assert dropped.to_bytes() is not None and dropped.nbytes == 64


def test_exports_outlive_our_objects(sycl):
    buffer = devbuf.alloc(64, "device")
    buffer.copy_from(b"z" * 64)
    theirs = dm.as_usm_memory(buffer)
    del buffer
    gc.collect()
    assert bytes(theirs.copy_to_host()) == b"z" * 64


def test_capsules_we_hand_out_are_ours_to_free(sycl):
    queue = devbuf.Device("sycl").queue
    for _ in range(1000):
        capsule = queue._get_capsule()
        assert "SyclQueueRef" in repr(capsule)
    their_queue = dpctl.SyclQueue(queue._get_capsule())
    assert their_queue.sycl_device.filter_string == queue.device.selector.removeprefix("sycl:")


def test_non_blocking_work_is_finished_before_another_library_reads(sycl):
    buffer = devbuf.alloc(1 << 24, "shared")
    buffer.fill(0)
    buffer.fill(9, blocking=False)
    assert np.asarray(buffer)[-1] == 9  # the buffer protocol waited for the fill
    buffer.fill(4, blocking=False)
    assert bytes(dm.as_usm_memory(buffer[:16]).copy_to_host()) in (b"\x04" * 16, b"\x09" * 16)
    buffer.synchronize()
    assert buffer.to_bytes()[:4] == b"\x04" * 4


@pytest.mark.parametrize("kind", KINDS)
def test_impossible_usm_allocation_is_a_memory_error(sycl, kind):
    with pytest.raises(MemoryError, match=kind):
        devbuf.alloc(1 << 60, kind)


def test_memory_outside_the_default_context_never_leaves_zero_copy_through_dlpack(sycl):
    from consumer import load

    device = dpctl.SyclDevice(sycl.selector.removeprefix("sycl:"))
    # A list of devices makes a new context (a single device gives the default one).
    own_context = dpctl.SyclContext([device])
    theirs = dm.MemoryUSMShared(64, queue=dpctl.SyclQueue(own_context, device))
    theirs.copy_from_host(bytes(range(64)))
    ours = devbuf.asarray(theirs)
    # dpctl and dpnp look DLPack pointers up in the default context: refused on every path.
    with pytest.raises(BufferError, match="default context"):
        ours.__dlpack__()
    with pytest.raises(BufferError, match="default context"):
        load().describe(ours)
    # The host can still read shared memory, and the CPU has no context.
    assert bytes(np.from_dlpack(ours, device="cpu")) == bytes(range(64))
