"""dpnp, the SYCL ecosystem's array library, against devbuf memory on the real SYCL CPU runtime:
zero-copy both ways for each USM kind, dpctl's attributes (`sycl_queue` & co.), in-place dpnp
operations seen by devbuf, views, read-only memory, and one queue across round trips. Without dpctl,
or on other memory, the attributes are missing, so probes answer False."""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import devbuf
from conftest import require_backend

dpctl = pytest.importorskip("dpctl")
dpnp = pytest.importorskip("dpnp")

KINDS = ["host", "device", "shared"]
DPCTL_ATTRIBUTES = ["sycl_queue", "sycl_device", "sycl_context", "usm_type"]


@pytest.fixture(scope="module")
def sycl():
    require_backend("sycl")
    return devbuf.Device("sycl")


def float_array(kind, values, **alloc):
    values = np.asarray(values, dtype=np.float32)
    array = devbuf.alloc(values.nbytes, kind, **alloc).view("float32", shape=values.shape)
    array.copy_from(values)
    return array


@pytest.mark.parametrize("kind", KINDS)
def test_dpctl_attributes_name_the_same_queue_device_context_and_kind(sycl, kind):
    array = float_array(kind, range(8))
    assert array.usm_type == kind
    assert array.sycl_queue == array.queue.sycl_queue
    assert array.sycl_queue is array.sycl_queue  # one queue object per array: dpnp compares identity
    assert array.sycl_device == dpctl.SyclDevice(sycl.selector.removeprefix("sycl:"))
    assert array.sycl_context == array.sycl_queue.sycl_context
    # The same sycl::queue: work dpnp enqueues on it is ordered with devbuf's.
    assert dpctl.SyclQueue(array.queue._get_capsule()) == array.sycl_queue


@pytest.mark.parametrize("kind", KINDS)
def test_dpnp_asarray_is_zero_copy_on_our_queue(sycl, kind):
    array = float_array(kind, range(8))
    for theirs in (dpnp.asarray(array), dpnp.asarray(array, copy=False)):
        assert theirs.data.ptr == array.ptr and theirs.usm_type == kind
        assert theirs.sycl_queue == array.sycl_queue
        assert dpnp.asnumpy(theirs).tolist() == list(range(8))
    buffer = array.buffer
    assert dpnp.asarray(buffer, copy=False).data.ptr == buffer.ptr


@pytest.mark.parametrize("kind", KINDS)
def test_dpnp_in_place_operations_are_seen_by_devbuf(sycl, kind):
    array = float_array(kind, range(8))
    theirs = dpnp.asarray(array, copy=False)
    theirs += 1
    assert np.frombuffer(array.to_bytes(), np.float32).tolist() == list(range(1, 9))
    square = float_array(kind, [[1, 2], [3, 4]])
    result = devbuf.alloc(16, kind).view("float32", shape=(2, 2))
    x, out = dpnp.asarray(square, copy=False), dpnp.asarray(result, copy=False)
    dpnp.matmul(x, x, out=out)
    assert np.frombuffer(result.to_bytes(), np.float32).tolist() == [7, 10, 15, 22]


@pytest.mark.parametrize("kind", KINDS)
def test_dpnp_from_dlpack_is_zero_copy(sycl, kind):
    array = float_array(kind, range(4))
    theirs = dpnp.from_dlpack(array)
    assert theirs.data.ptr == array.ptr and dpnp.asnumpy(theirs).tolist() == [0, 1, 2, 3]


def test_strided_and_offset_views_keep_their_layout(sycl):
    buffer = devbuf.alloc(4 * 24, "device")
    buffer.view("float32").copy_from(np.arange(24, dtype=np.float32))
    # Every other column of rows 1..3 of a 4x6 matrix: element strides (6, 2), offset 6 elements.
    view = buffer.view("float32", shape=(3, 3), strides=(24, 8), offset=24)
    theirs = dpnp.asarray(view, copy=False)
    assert theirs.data.ptr == view.ptr
    assert theirs.strides == (24, 8)  # dpnp reports bytes, as NumPy
    expected = np.arange(24, dtype=np.float32).reshape(4, 6)[1:, ::2]
    assert (dpnp.asnumpy(theirs) == expected).all()
    theirs[...] = 0
    assert (np.frombuffer(buffer.to_bytes(), np.float32).reshape(4, 6)[1:, ::2] == 0).all()
    backwards = buffer.view("float32", shape=(4,), strides=(-4,), offset=12)
    assert dpnp.asnumpy(dpnp.asarray(backwards, copy=False)).tolist() == [3, 2, 1, 0]


def test_read_only_memory_never_becomes_a_writable_dpnp_array(sycl):
    source = dpnp.arange(8, dtype=dpnp.float32)
    source_view = dpnp.tensor.asarray(source.get_array())
    source_view.flags["W"] = False
    read_only = devbuf.asarray(source_view)
    assert read_only.readonly
    for theirs in (dpnp.asarray(read_only), dpnp.asarray(read_only, copy=False), dpnp.from_dlpack(read_only)):
        assert theirs.data.ptr == read_only.ptr
        assert not theirs.flags.writable
        with pytest.raises(ValueError):
            theirs += 1
    assert dpnp.asnumpy(source).tolist() == list(range(8))


def test_dpnp_arrays_are_imported_zero_copy(sycl):
    theirs = dpnp.arange(16, dtype=dpnp.float32)
    ours = devbuf.asarray(theirs)
    assert ours.ptr == theirs.data.ptr and ours.kind == "device" and ours.shape == (16,)
    assert np.frombuffer(ours.to_bytes(), np.float32).tolist() == list(range(16))
    ours.buffer.fill(0)
    assert dpnp.asnumpy(theirs).tolist() == [0] * 16


def test_arrays_with_suai_and_dlpack_are_imported_through_suai(sycl):
    # dpnp's __dlpack__ with our queue as stream puts barriers on both queues: SUAI goes first.
    # dpctl and dpnp write "|f4" for float32, which is native order (as NumPy reads it).
    class Both:
        def __init__(self, array):
            self.array, self.dlpack_calls = array, 0

        @property
        def __sycl_usm_array_interface__(self):
            return self.array.__sycl_usm_array_interface__

        def __dlpack_device__(self):
            return self.array.__dlpack_device__()

        def __dlpack__(self, **kwargs):
            self.dlpack_calls += 1
            return self.array.__dlpack__(**kwargs)

    theirs = Both(dpnp.arange(8, dtype=dpnp.float32))
    assert theirs.__sycl_usm_array_interface__["typestr"] == "|f4"
    ours = devbuf.asarray(theirs)
    assert ours.dtype == np.float32 and ours.ptr == theirs.array.data.ptr
    assert np.frombuffer(ours.to_bytes(), np.float32).tolist() == list(range(8))
    assert theirs.dlpack_calls == 0


def test_round_trips_keep_one_queue(sycl):
    array = float_array("device", range(4))
    back = devbuf.asarray(dpnp.asarray(array))
    assert back.ptr == array.ptr and back.queue is array.queue
    # Another library's in-order queue: devbuf adopts that very sycl::queue, and keeps it.
    theirs_queue = dpctl.SyclQueue(sycl.selector.removeprefix("sycl:"), property="in_order")
    queue = devbuf.Queue(theirs_queue)
    assert queue.sycl_queue == theirs_queue
    on_theirs = devbuf.alloc(16, "shared", device=theirs_queue)
    assert on_theirs.queue == queue and on_theirs.sycl_queue == theirs_queue
    made_by_dpnp = dpnp.ones(4, sycl_queue=theirs_queue)
    assert devbuf.asarray(made_by_dpnp).queue == queue
    through_dpnp = dpnp.asarray(on_theirs.view("float32"))
    assert through_dpnp.sycl_queue == theirs_queue
    assert devbuf.asarray(through_dpnp).queue == queue


def test_out_of_order_queues_are_handed_out_as_they_are(sycl):
    # dpctl's default queues run out of order: devbuf hands that very queue out with the memory
    # (so dpnp mixes it with its arrays there), its own commands on an in-order queue beside it.
    theirs = dpctl.SyclQueue(sycl.selector.removeprefix("sycl:"))
    queue = devbuf.Queue(theirs)
    assert queue != sycl.queue and queue.sycl_queue == theirs
    assert devbuf.Queue(theirs) == queue
    on_theirs = devbuf.zeros(4, "float32", device=theirs)
    assert on_theirs.sycl_queue == theirs
    assert (dpnp.asarray(on_theirs) + dpnp.ones(4, sycl_queue=theirs)).sycl_queue == theirs
    # dpctl's cached queue for the device, where dpnp makes its arrays by default, is the one the
    # device's own queue hands out.
    cached = dpctl.get_device_cached_queue(theirs.sycl_device)
    assert devbuf.Queue(cached) == sycl.queue and sycl.queue.sycl_queue == cached


def test_other_memory_has_no_dpctl_attributes(sycl):
    host = devbuf.alloc(16, device="host")
    foreign = devbuf.asarray(np.zeros(4))
    for array in (host, foreign, devbuf.alloc(16, device="opencl") if devbuf.devices("opencl") else host):
        for name in DPCTL_ATTRIBUTES + ["__usm_ndarray__"]:
            assert not hasattr(array, name), name
    assert not hasattr(host.queue, "sycl_queue")


def test_no_dpctl_import_and_no_attributes_without_dpctl(sycl):
    script = textwrap.dedent("""
        import sys
        import devbuf
        assert "dpctl" not in sys.modules, "import devbuf imported dpctl"

        class NoDpctl:
            def find_spec(self, name, path=None, target=None):
                if name == "dpctl" or name.startswith("dpctl."):
                    raise ImportError("dpctl is blocked")

        sys.meta_path.insert(0, NoDpctl())
        # Without dpctl, the device's queue hands out a queue devbuf made, and all works.
        array = devbuf.alloc(64, "device").view("float32")
        assert array.buffer.device.backend == "sycl"
        array.buffer.fill(1)
        assert array.buffer.to_bytes() == bytes([1]) * 64
        for name in ("sycl_queue", "sycl_device", "sycl_context", "usm_type", "__usm_ndarray__"):
            assert not hasattr(array, name), name
        assert not hasattr(array.queue, "sycl_queue")
        print("ok")
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                          env=os.environ)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr
