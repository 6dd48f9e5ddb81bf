"""Typed allocation, views and copies as CuPy, dpnp and NumPy users write them:
``devbuf.zeros((4, 6), "float32", device=...)``, ``x[1:3, ::-2]``, ``x.T``, ``x.reshape(2, -1)``,
``x.copy()``, ``x.to_device(...)``, ``y.copy_from(x.T)``. Each result is checked against NumPy
doing the same on the host (``get()`` copies device memory back); on every backend compiled in.
test_cuda_arrays.py runs the same tests on CUDA, for ci/test's runs on the CUDA test driver."""

import numpy as np
import pytest

import devbuf
from conftest import backend_names, require_backend


@pytest.fixture(params=backend_names())
def device(request):
    require_backend(request.param)
    return devbuf.Device(request.param)


@pytest.fixture(params=["device", "shared"])
def kind(request, device):
    if request.param not in device.kinds:
        pytest.skip(f"{device} has no {request.param} memory")
    return request.param


def numbered(shape, dtype, kind, device):
    """A devbuf array holding 0, 1, 2... and the same NumPy array."""
    expected = np.arange(np.prod(shape), dtype=dtype).reshape(shape)
    x = devbuf.empty(shape, dtype, kind=kind, device=device)
    x.copy_from(expected)
    return x, expected


def test_empty_zeros_full_and_likes(device, kind):
    x = devbuf.empty((3, 4), np.float32, kind=kind, device=device)
    assert (x.shape, x.dtype, x.strides, x.kind) == ((3, 4), np.float32, (16, 4), kind)
    assert x.device == device and len(x) == 3
    assert devbuf.empty(5).dtype == np.float64
    np.testing.assert_array_equal(devbuf.zeros((2, 3), "int16", kind=kind, device=device).get(), np.zeros((2, 3), np.int16))
    for value, dtype in [(1.5, np.float16), (-3, np.int8), (2 + 1j, np.complex64), (True, np.bool_), (7, None), (0.25, "bfloat16" if False else np.float32)]:
        full = devbuf.full((5, 3), value, dtype, kind=kind, device=device)
        np.testing.assert_array_equal(full.get(), np.full((5, 3), value, dtype))
    like = devbuf.zeros_like(x)
    assert (like.shape, like.dtype, like.kind, like.device) == (x.shape, x.dtype, x.kind, x.device)
    assert devbuf.empty_like(np.zeros((2, 2), np.int8), dtype="uint16").dtype == np.uint16
    assert devbuf.empty((0, 3), device=device).size == 0


def test_creation_mistakes_name_the_argument(device):
    with pytest.raises(ValueError, match=r"^fill_value: 300 is out of range for uint8"):
        devbuf.full(3, 300, "uint8", device=device)
    with pytest.raises(TypeError, match=r"^fill_value: a complex value cannot fill a float32"):
        devbuf.full(3, 1j, "float32", device=device)
    with pytest.raises(ValueError, match=r"^shape: \[2, -1\] has the negative extent -1"):
        devbuf.empty((2, -1), device=device)
    with pytest.raises(TypeError, match=r"^shape: expected an int or a sequence of ints"):
        devbuf.zeros("big", device=device)
    with pytest.raises(ValueError, match=r"^kind: "):
        devbuf.zeros(3, kind="pinned", device=device)


@pytest.mark.parametrize(
    "key",
    [
        1,
        -1,
        (1, 2),
        slice(1, 3),
        slice(None, None, 2),
        slice(None, None, -1),
        (slice(1, 3), slice(None, None, -2)),
        (Ellipsis, 2),
        (None, 1, Ellipsis, None),
        (slice(4, None), slice(6, None)),
        (slice(-100, 100, 3), 0),
        (),
    ],
)
def test_basic_indexing_is_numpys_and_returns_views(device, kind, key):
    x, expected = numbered((4, 6), np.int32, kind, device)
    view = x[key]
    want = expected[key]
    assert view.shape == want.shape and view.strides == want.strides
    np.testing.assert_array_equal(view.get(), want)
    if view.size:
        # A view: writes through the parent show in it.
        x.copy_from(expected + 100)
        np.testing.assert_array_equal(view.get(), want + 100)
        assert view.buffer.ptr == x.buffer.ptr


def test_index_mistakes_are_numpys_exceptions_in_devbufs_voice(device):
    x = devbuf.zeros((4, 6), np.int32, device=device)
    with pytest.raises(IndexError, match=r"^index: 4 is out of bounds for axis 0 with size 4$"):
        x[4]
    with pytest.raises(IndexError, match=r"^index: too many indices"):
        x[0, 0, 0]
    with pytest.raises(ValueError, match=r"^index: a slice step cannot be zero"):
        x[::0]
    with pytest.raises(ValueError, match=r"single ellipsis"):
        x[..., ...]
    with pytest.raises(TypeError, match=r"^index: list is not a basic index"):
        x[[0, 1]]
    with pytest.raises(TypeError, match=r"^index: a bool is not a position"):
        x[True]


def test_buffers_slice_to_buffers_and_index_as_uint8_arrays(device):
    buf = devbuf.alloc(16, device=device)
    buf.copy_from(bytes(range(16)))
    assert isinstance(buf[2:6], devbuf.Buffer) and buf[2:6].nbytes == 4
    one = buf[8]
    assert type(one) is devbuf.Array and one.shape == () and one.dtype == np.uint8
    assert one.get() == 8
    np.testing.assert_array_equal(buf[::4].get(), [0, 4, 8, 12])
    with pytest.raises(IndexError, match=r"^index: 16 is out of bounds for axis 0 with size 16"):
        buf[16]


def test_transpose_and_reshape(device, kind):
    x, expected = numbered((2, 3, 4), np.float32, kind, device)
    for got, want in [
        (x.T, expected.T),
        (x.transpose(1, 0, 2), expected.transpose(1, 0, 2)),
        (x.transpose((2, 0, 1)), expected.transpose((2, 0, 1))),
        (x.transpose(-1, 0, 1), expected.transpose(-1, 0, 1)),
        (x.reshape(6, 4), expected.reshape(6, 4)),
        (x.reshape((4, -1)), expected.reshape((4, -1))),
        (x[:, ::2].reshape(2, 8), expected[:, ::2].reshape(2, 8)),
    ]:
        assert got.shape == want.shape
        np.testing.assert_array_equal(got.get(), want)
    # A view where the strides allow (NumPy's rule), a copy where not.
    assert x.reshape(24).buffer.ptr == x.buffer.ptr
    assert x[:, ::2].reshape(2, 2, 2, 2).strides == expected[:, ::2].reshape(2, 2, 2, 2).strides
    flat = x.T.reshape(-1)
    assert flat.c_contiguous and flat.buffer.ptr != x.buffer.ptr
    np.testing.assert_array_equal(flat.get(), expected.T.reshape(-1))
    with pytest.raises(ValueError, match=r"^copy: .* without copying, and copy=False forbids"):
        x.T.reshape(24, copy=False)
    assert x.reshape(24, copy=True).buffer.ptr != x.buffer.ptr
    with pytest.raises(ValueError, match=r"^shape: cannot reshape an array of 24 elements"):
        x.reshape(5, 5)
    with pytest.raises(ValueError, match=r"^axes: axis 1 is repeated"):
        x.transpose(1, 1, 0)


def test_copy_is_c_contiguous_and_holds_only_the_elements(device, kind):
    x, expected = numbered((6, 8), np.int64, kind, device)
    part = x[1:5, ::3]
    copy = part.copy()
    assert copy.c_contiguous and copy.kind == kind and copy.device == device
    assert copy.buffer.nbytes == copy.nbytes == part.nbytes
    np.testing.assert_array_equal(copy.get(), expected[1:5, ::3])


def test_copy_from_takes_any_layout_on_either_side(device, kind):
    x, expected = numbered((4, 6), np.int16, kind, device)
    y = devbuf.zeros((6, 4), np.int16, kind=kind, device=device)
    y.copy_from(x.T)
    np.testing.assert_array_equal(y.get(), expected.T)
    y.T.copy_from(expected[::-1])
    np.testing.assert_array_equal(y.get(), expected[::-1].T)
    z = devbuf.zeros((4, 3), np.int16, kind=kind, device=device)
    z.copy_from(x[:, 1::2], blocking=False)
    np.testing.assert_array_equal(z.get(), expected[:, 1::2])
    raw = devbuf.alloc(24, kind=kind, device=device)
    raw.copy_from(x[:, ::2])
    np.testing.assert_array_equal(raw.view(np.int16, (4, 3)).get(), expected[:, ::2])
    with pytest.raises(ValueError, match=r"share bytes of one allocation"):
        x[:, :3].copy_from(x[:, 1:4])


def test_to_device_and_asarray_move_only_what_a_strided_slice_covers(device, kind):
    x, expected = numbered((8, 16), np.float32, kind, device)
    columns = x[:, ::4]
    elsewhere = "host" if device.selector != "host" else devbuf.default_device().selector
    if elsewhere == device.selector:
        pytest.skip("no second device to move to")
    for moved in (
        devbuf.asarray(columns, device=elsewhere),
        columns.to_device(elsewhere),
        devbuf.asarray(columns, copy=True),
    ):
        assert moved.buffer.nbytes == columns.nbytes == 8 * 4 * 4
        np.testing.assert_array_equal(moved.get(), expected[:, ::4])
    assert columns.to_device(elsewhere).device == devbuf.Device(elsewhere)
    assert x.to_device(device) is x


@pytest.mark.parametrize("backend", backend_names(makes_streams=True))
def test_likes_of_memory_whose_stream_was_closed_allocate_on_its_device(backend):
    # The memory outlives its stream (Stream.close()): *_like allocates on its device, as
    # NumPy-style code expects, instead of raising that the stream was closed.
    require_backend(backend)
    stream = devbuf.Device(backend).create_stream()
    x = devbuf.zeros(4, "float32", stream=stream)
    stream.close()
    for like in (devbuf.empty_like, devbuf.zeros_like, devbuf.ones_like):
        y = like(x)
        assert (y.shape, y.dtype, y.kind, y.device) == (x.shape, x.dtype, x.kind, x.device)
    np.testing.assert_array_equal(devbuf.ones_like(x).get(), np.ones(4, "float32"))
