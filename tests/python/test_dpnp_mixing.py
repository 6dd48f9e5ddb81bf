"""Memory handed between devbuf and dpnp joins dpnp's own expressions, as a dpnp user writes them:
the next line after the hand-off (an elementwise operation, ``dot``, ``matmul``, ``where``,
``concatenate``, ``copyto``, ``out=``, ``+=``, both directions) mixes devbuf's memory with arrays
dpnp made by default, because devbuf hands its default queue's memory out on the queue dpnp makes
its arrays on (dpctl's cached queue), and memory it imported on its producer's queue. Every kind,
every creation path; the values are checked, on the real SYCL runtime."""

import numpy as np
import pytest

import devbuf
from conftest import require_backend

dpnp = pytest.importorskip("dpnp")
dpctl = pytest.importorskip("dpctl")

KINDS = ["device", "shared", "host"]
N = 1 << 16


@pytest.fixture(scope="module")
def sycl():
    require_backend("sycl")
    return devbuf.Device("sycl")


def made_by_devbuf(path, kind, value):
    """A float32 devbuf array of N elements set to `value`, made the way `path` says."""
    if path == "full":
        return devbuf.full(N, value, "float32", kind=kind, device="sycl")
    if path == "alloc":
        array = devbuf.alloc(N * 4, kind, device="sycl").view("float32")
        array.copy_from(np.full(N, value, np.float32))
        return array
    if path == "zeros+copy":
        array = devbuf.zeros(N, "float32", kind=kind, device="sycl")
        array.copy_from(np.full(N, value, np.float32), blocking=False)
        return array
    raise AssertionError(path)


@pytest.mark.parametrize("path", ["full", "alloc", "zeros+copy"])
@pytest.mark.parametrize("kind", KINDS)
def test_devbuf_memory_mixes_with_dpnps_own_arrays(sycl, kind, path):
    x = made_by_devbuf(path, kind, 2.0)
    d = dpnp.asarray(x)
    ones = dpnp.ones(N, dtype="float32")
    assert d.sycl_queue == ones.sycl_queue
    assert float((d + ones)[N - 1]) == 3.0
    assert float(dpnp.dot(d, ones)) == 2.0 * N
    square = d[:256].reshape(16, 16)
    assert float(dpnp.matmul(square, dpnp.ones((16, 16), dtype="float32"))[0, 0]) == 32.0
    assert float(dpnp.where(d > 1, d, ones)[0]) == 2.0
    assert dpnp.concatenate((d, ones)).shape == (2 * N,)
    # Writes through dpnp land in devbuf's memory, ordered before devbuf's next read.
    dpnp.copyto(d, ones)
    assert (x.get() == 1).all()
    dpnp.add(ones, ones, out=d)
    assert (x.get() == 2).all()
    d += ones
    assert (x.get() == 3).all()
    # devbuf's writes land before dpnp's next operation on its own queue.
    x.copy_from(np.full(N, 5, np.float32), blocking=False)
    assert float((d * ones).sum()) == 5.0 * N
    # devbuf memory as the operand of dpnp's in-place operation on its own array.
    ones += d
    assert float(ones[0]) == 6.0


@pytest.mark.parametrize("kind", KINDS)
def test_dpnp_memory_round_trips_through_devbuf_and_still_mixes(sycl, kind):
    o = dpnp.arange(N, dtype="float32", usm_type=kind)
    y = devbuf.asarray(o)
    assert y.ptr == o.data.ptr if hasattr(o.data, "ptr") else True
    z = dpnp.asarray(y)
    assert z.sycl_queue == o.sycl_queue
    assert float((z + o)[N - 1]) == 2.0 * (N - 1)
    y.copy_from(np.zeros(N, np.float32), blocking=False)
    assert float(o.sum()) == 0.0
    assert dpnp.from_dlpack(y).sycl_queue == o.sycl_queue


@pytest.mark.parametrize("in_order", [False, True])
def test_a_users_queue_is_kept_through_devbuf(sycl, in_order):
    props = ["in_order"] if in_order else []
    q = dpctl.SyclQueue(sycl.selector.removeprefix("sycl:"), property=props)
    theirs = dpnp.full(N, 4.0, dtype="float32", sycl_queue=q)
    back = dpnp.asarray(devbuf.asarray(theirs))
    assert back.sycl_queue == q
    assert float((back + theirs)[0]) == 8.0
    # devbuf memory made on their queue (as device= or stream=), and like their array.
    for made in (devbuf.zeros(N, "float32", device=q), devbuf.zeros(N, "float32", stream=q),
                 devbuf.empty_like(theirs), devbuf.zeros_like(theirs)):
        assert made.sycl_queue == q
        d = dpnp.asarray(made)
        d += theirs
        assert float(d[N - 1]) == 4.0 or made is None


def test_dpnp_from_dlpack_of_devbuf_memory_mixes(sycl):
    x = devbuf.full(N, 3.0, "float32", kind="device", device="sycl")
    d = dpnp.from_dlpack(x)
    assert float((d + dpnp.ones(N, dtype="float32"))[0]) == 4.0


def test_dpnp_tensor_mixes_too(sycl):
    tensor = pytest.importorskip("dpnp.tensor")
    x = devbuf.full(N, 2.0, "float32", kind="shared", device="sycl")
    t = tensor.asarray(x)
    ones = tensor.ones(N, dtype="float32")
    assert t.sycl_queue == ones.sycl_queue
    assert float(tensor.sum(t + ones)) == 3.0 * N


def test_dpctl_objects_are_taken_as_device_and_stream(sycl):
    device = dpctl.SyclDevice(sycl.selector.removeprefix("sycl:"))
    on_device = devbuf.zeros(8, "float32", device=device)
    assert on_device.queue == sycl.queue
    assert devbuf.Device(device).selector == sycl.selector
    assert devbuf.Device(dpctl.SyclQueue(device)).selector == sycl.selector
    stream = devbuf.Stream(device)
    assert stream != sycl.queue and stream.device.selector == sycl.selector
    q = dpctl.SyclQueue(device)
    buffer = devbuf.alloc(64, "shared", device="sycl")
    buffer.fill(7, stream=q)
    assert buffer.to_bytes(stream=q) == bytes([7]) * 64
    assert buffer.view("uint8").get(stream=q).tolist() == [7] * 64
    with pytest.raises(TypeError, match=r"^stream: expected None, a devbuf.Stream, .*dpctl.SyclQueue, got SyclDevice"):
        buffer.fill(1, stream=device)
    with pytest.raises(TypeError, match=r"^stream: expected .* got str"):
        buffer.fill(1, stream="sycl")
