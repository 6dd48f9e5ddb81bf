"""Arrays a user can write into, as NumPy's and CuPy's users write them, and what is out of scope:
``x.fill(2.5)``, ``x[...] = 0``, ``x[1:3] = host``, ``x[:, 0] = devbuf_array``, ``x[0] = [1, 2]``,
``x.view(np.int32)``, ``for row in x``, ``asarray([1, 2, 3])``, ``ones``; ``astype`` and
arithmetic refused with where to go. Each result is checked against NumPy doing the same on the
host; on every backend compiled in (test_cuda_array_writes.py runs them on CUDA)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import devbuf
from conftest import backend_info, backend_names, require_backend


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


def test_fill_is_typed_and_takes_any_layout(device, kind):
    x, expected = numbered((4, 6), np.float32, kind, device)
    x.fill(2.5)
    expected.fill(2.5)
    np.testing.assert_array_equal(x.get(), expected)
    # A strided view: only its elements change.
    x[1::2, ::3].fill(-1)
    expected[1::2, ::3].fill(-1)
    np.testing.assert_array_equal(x.get(), expected)
    for value, dtype in [(True, np.int16), (3, np.complex64), (2.9, np.int8), (1 + 2j, np.complex128), (np.float32(0.5), np.float16)]:
        y = devbuf.empty((2, 3), dtype, kind=kind, device=device)
        y.T.fill(value)
        np.testing.assert_array_equal(y.get(), np.full((2, 3), value, dtype))
    z = devbuf.empty(5, np.uint8, kind=kind, device=device)
    z.fill(7, blocking=False)
    z.buffer.synchronize()
    np.testing.assert_array_equal(z.get(), np.full(5, 7, np.uint8))


def test_fill_mistakes_name_the_value(device):
    x = devbuf.zeros(3, np.uint8, device=device)
    with pytest.raises(ValueError, match=r"^value: 256 is out of range for uint8 \(0 to 255\)"):
        x.fill(256)
    with pytest.raises(TypeError, match=r"^value: a complex value cannot fill a uint8"):
        x.fill(1j)
    with pytest.raises(TypeError, match=r"^value: fill takes one scalar .* not a list"):
        x.fill([1, 2, 3])
    np.testing.assert_array_equal(x.get(), np.zeros(3, np.uint8))


@pytest.mark.parametrize(
    "key, value",
    [
        (Ellipsis, 0),
        (slice(None), 7.5),
        ((slice(1, 3),), np.arange(6, dtype=np.float32)),
        ((slice(None), 1), np.float32(-2)),
        ((slice(None, None, -1), slice(None, None, 2)), np.arange(3, dtype=np.float32)),
        ((0,), [1, 2, 3, 4, 5, 6]),
        ((slice(None), slice(2, 4)), [[1], [2], [3], [4]]),
        ((None, 2), np.ones((1, 1, 6), np.float32)),
        ((-1, -1), True),
        ((slice(4, None),), 5),
    ],
)
def test_setitem_writes_what_numpy_writes(device, kind, key, value):
    x, expected = numbered((4, 6), np.float32, kind, device)
    x[key] = value
    expected[key] = value
    np.testing.assert_array_equal(x.get(), expected)


def test_setitem_from_devbuf_arrays_and_itself(device, kind):
    x, expected = numbered((4, 6), np.int32, kind, device)
    row, host_row = numbered((6,), np.int32, kind, device)
    x[1:3] = row
    expected[1:3] = host_row
    x[:, 0] = x[:, 5]
    expected[:, 0] = expected[:, 5]
    # Overlapping source and destination: NumPy's result (the source copied out first).
    x[1:] = x[:-1]
    expected[1:] = expected[:-1].copy()
    x[:, ::2] = x[:, 1::2]
    expected[:, ::2] = expected[:, 1::2]
    x[...] = x.T.T
    np.testing.assert_array_equal(x.get(), expected)


def test_setitem_overlap_between_two_imports_of_the_same_memory():
    host = np.arange(8, dtype=np.uint8)
    a, b = devbuf.asarray(host), devbuf.asarray(host)
    a[2:] = b[:-2]
    np.testing.assert_array_equal(host, [0, 1, 0, 1, 2, 3, 4, 5])


def test_setitem_mistakes(device):
    x = devbuf.zeros((2, 3), np.float32, device=device)
    with pytest.raises(ValueError, match=r"^value: could not broadcast input array from shape \(2,\) into shape \(2, 3\)"):
        x[...] = np.zeros(2, np.float32)
    with pytest.raises(TypeError, match=r"^value: cannot assign float64 elements into a float32 array: devbuf converts no"):
        x[0] = np.zeros(3)
    with pytest.raises(ValueError, match=r"^value: 1000 is out of range for int8"):
        devbuf.zeros(2, np.int8, device=device)[0] = 1000
    with pytest.raises(ValueError, match=r"^value: the nested sequence has an inhomogeneous shape"):
        x[0] = [1, [2, 3], 4]
    with pytest.raises(TypeError, match=r"^value: a nested sequence holds a str"):
        x[0] = [1, "2", 3]
    with pytest.raises(TypeError, match=r"^cannot import a object"):
        x[0] = object()
    with pytest.raises(IndexError, match=r"^index: 2 is out of bounds for axis 0 with size 2"):
        x[2] = 1
    with pytest.raises(ValueError, match="cannot delete array elements"):
        del x[0]
    np.testing.assert_array_equal(x.get(), np.zeros((2, 3), np.float32))


def test_writes_through_read_only_views_are_refused():
    host = np.arange(4, dtype=np.int16)
    host.flags.writeable = False
    x = devbuf.asarray(host)
    with pytest.raises(ValueError, match=r"^assignment destination is read-only: numpy.ndarray marked it read-only"):
        x[0] = 1
    with pytest.raises(ValueError, match=r"^fill: this array is read-only"):
        x[1:].fill(1)
    np.testing.assert_array_equal(host, np.arange(4))


def test_writes_run_on_the_current_stream(device):
    if not backend_info(device.backend).makes_streams:
        pytest.skip(f"{device.backend} makes no streams")
    x = devbuf.zeros(8, np.int16, kind="device" if "device" in device.kinds else "shared", device=device)
    stream = devbuf.Stream(device)
    with stream:
        x[::2] = [1, 2, 3, 4]
        x[1::2] = np.full(4, -1, np.int16)
    x[1:3].fill(9, stream=stream, blocking=False)
    stream.synchronize()
    np.testing.assert_array_equal(x.get(), [1, 9, 9, -1, 3, -1, 4, -1])


_shapes = st.lists(st.integers(0, 4), min_size=0, max_size=3).map(tuple)


@st.composite
def _assignments(draw):
    """A shape, a basic index of it, and the shape of a value that broadcasts into what the
    index selects (some of its dimensions dropped from the front or made 1)."""
    shape = draw(_shapes)
    key = []
    for n in shape:
        if draw(st.booleans()) and n > 0:
            key.append(draw(st.integers(-n, n - 1)))
        else:
            key.append(slice(draw(st.none() | st.integers(-5, 5)), draw(st.none() | st.integers(-5, 5)), draw(st.sampled_from([None, 1, 2, -1, -3]))))
    if draw(st.booleans()):
        key.insert(draw(st.integers(0, len(key))), None)
    selected = np.empty(shape)[tuple(key)].shape
    dropped = draw(st.integers(0, len(selected)))
    value_shape = tuple(1 if draw(st.booleans()) else n for n in selected[dropped:])
    return shape, tuple(key), value_shape


@settings(max_examples=60, deadline=None)
@given(_assignments())
def test_setitem_broadcasts_as_numpy_does(assignment):
    shape, key, value_shape = assignment
    x, expected = numbered(shape, np.int16, "device", "host")
    value = np.arange(-1, -1 - int(np.prod(value_shape)), -1, dtype=np.int16).reshape(value_shape)
    x[key] = value
    expected[key] = value
    np.testing.assert_array_equal(x.get(), expected)


@pytest.mark.parametrize(
    "shape, index, dtype",
    [
        ((4, 6), (), np.int32),
        ((4, 6), (), np.float64),
        ((4, 6), (), np.uint8),
        ((4, 6), (), np.complex64),
        ((4, 6), (slice(None, None, 2),), np.int16),
        ((4, 6), (slice(None), slice(0, 2)), np.float64),
        ((4, 1), (), np.int16),
        ((0, 6), (), np.float64),
        ((3,), (1,), np.int32),
    ],
)
def test_view_dtype_follows_numpy(device, shape, index, dtype):
    x, expected = numbered(shape, np.float32, "shared" if "shared" in device.kinds else "device", device)
    v, want = x[index].view(dtype), expected[index].view(dtype)
    assert (v.shape, v.strides, v.dtype) == (want.shape, want.strides, want.dtype)
    assert v.ptr == x[index].ptr
    np.testing.assert_array_equal(v.get(), want)


def test_view_dtype_refusals_name_the_dtype():
    x = devbuf.zeros((2, 3), np.float32, device="host")
    with pytest.raises(ValueError, match=r"^dtype: .*last axis must be contiguous"):
        x.T.view(np.float64)
    with pytest.raises(ValueError, match=r"^dtype: .*12 bytes, not a whole number of 16-byte"):
        x.view(np.complex128)
    with pytest.raises(ValueError, match=r"^dtype: .*0-d array"):
        x[0, 0].view(np.int16)
    assert x[0, 0].view(np.int32).shape == ()


def test_iteration_is_numpys(device):
    x, expected = numbered((3, 2), np.int64, "shared" if "shared" in device.kinds else "device", device)
    rows = list(x)
    assert [r.shape for r in rows] == [(2,)] * 3 and all(isinstance(r, devbuf.Array) for r in rows)
    assert [r.get().tolist() for r in rows] == expected.tolist()
    assert [e.shape for e in x[0]] == [(), ()]
    with pytest.raises(TypeError, match="iteration over a 0-d array"):
        iter(x[0, 0])
    assert list(devbuf.zeros((0, 3), device=device)) == []


@pytest.mark.parametrize(
    "obj, dtype",
    [
        (True, np.bool_),
        (3, np.int64),
        (3.0, np.float64),
        (1j, np.complex128),
        ([1, 2, 3], np.int64),
        ([True, 2], np.int64),
        ([[1, 2.5], [3, 4]], np.float64),
        ((1, 2j), np.complex128),
        ([], np.float64),
        ([[], []], np.float64),
        ([[True], [False]], np.bool_),
        ([np.float32(1.5), 2], np.float64),
    ],
)
def test_asarray_of_python_values_takes_the_array_apis_dtypes(device, obj, dtype):
    x = devbuf.asarray(obj, device=device)
    want = np.asarray(obj, dtype=dtype)
    assert (x.shape, x.dtype, x.device) == (want.shape, want.dtype, device)
    np.testing.assert_array_equal(x.get(), want)


def test_asarray_of_python_values_with_dtype_kind_and_mistakes(device):
    x = devbuf.asarray([[1, 2], [3, 4]], dtype=np.float16, kind="device" if "device" in device.kinds else "shared", device=device)
    np.testing.assert_array_equal(x.get(), np.array([[1, 2], [3, 4]], np.float16))
    assert devbuf.asarray(3.0).device == devbuf.default_device()
    with pytest.raises(ValueError, match=r"^copy: a Python scalar or sequence has no memory"):
        devbuf.asarray([1, 2], copy=False)
    with pytest.raises(ValueError, match=r"^obj: the nested sequence has an inhomogeneous shape after 1 dimensions \(detected shape \(2,\)\): sequences of lengths 2 and 1"):
        devbuf.asarray([[1, 2], [3]])
    with pytest.raises(ValueError, match=r"^obj: 300 is out of range for uint8"):
        devbuf.asarray([1, 300], dtype=np.uint8)
    looped = []
    looped.append(looped)
    with pytest.raises(ValueError, match=r"^obj: sequences nested more than 64 deep"):
        devbuf.asarray(looped)
    with pytest.raises(TypeError, match=r"^dtype: the data is float64, and devbuf converts no element types"):
        devbuf.asarray(np.zeros(3), dtype=np.float32)
    host = np.zeros(3, np.float32)
    assert devbuf.asarray(host, dtype="float32").ptr == host.ctypes.data
    # NumPy's scalars are imported as NumPy's asarray takes them (np.float64 is a float, too).
    for scalar in (np.float64(2.5), np.float32(2.5), np.int16(3)):
        imported = devbuf.asarray(scalar)
        assert (imported.shape, imported.dtype, imported.device.selector) == ((), scalar.dtype, "host")


def test_ones_and_ones_like(device, kind):
    x = devbuf.ones((2, 3), np.complex64, kind=kind, device=device)
    np.testing.assert_array_equal(x.get(), np.ones((2, 3), np.complex64))
    assert devbuf.ones(4).dtype == np.float64
    like = devbuf.ones_like(x, dtype=np.int8)
    assert (like.shape, like.dtype, like.kind, like.device) == ((2, 3), np.int8, kind, device)
    np.testing.assert_array_equal(like.get(), np.ones((2, 3), np.int8))


def test_astype_and_arithmetic_say_where_to_go():
    x = devbuf.zeros(3, device="host")
    with pytest.raises(TypeError, match=r"^astype: devbuf converts no element types .*dpnp.asarray\(x\), cupy.asarray\(x\), torch.from_dlpack\(x\)"):
        x.astype(np.float32)
    for operation in (lambda: x + 1, lambda: 1 + x, lambda: x * x, lambda: x / 2.0, lambda: 2 ** x, lambda: x @ x, lambda: -x, lambda: abs(x), lambda: x - [1, 2, 3], lambda: x % np.float64(2)):
        with pytest.raises(TypeError, match=r"devbuf arrays do no arithmetic .* x\.get\(\)"):
            operation()
    with pytest.raises(TypeError, match=r"^x \+ value: devbuf arrays do no arithmetic"):
        x += 1

    class Computes:
        """Another library's array: its reflected operator still gets its turn."""

        def __radd__(self, other):
            return "computed by its own library"

    assert x + Computes() == "computed by its own library"


def test_writes_are_ordered_after_pending_work(device):
    # Each write waits for the work pending on the memory (ci/test reruns this on the CUDA test
    # driver with a delay on every stream operation, where a missing wait reads wrong bytes).
    kind = "device" if "device" in device.kinds else "shared"
    x = devbuf.zeros(1 << 16, np.uint8, kind=kind, device=device)
    x.fill(1, blocking=False)
    x[::2] = 7
    x[:4] = [9, 9, 9, 9]
    y = devbuf.empty(1 << 16, np.uint8, kind=kind, device=device)
    y.fill(3, blocking=False)
    x[-4:] = y[:4]
    expected = np.ones(1 << 16, np.uint8)
    expected[::2] = 7
    expected[:4] = 9
    expected[-4:] = 3
    np.testing.assert_array_equal(x.get(), expected)


def test_writes_are_ordered_with_dpnps_work():
    require_backend("sycl")
    dpnp = pytest.importorskip("dpnp")
    x = devbuf.zeros((64, 64), np.float32, kind="device", device="sycl")
    theirs = dpnp.asarray(x)
    theirs += 1                       # dpnp's kernel on the memory
    x[0] = 0                          # after it; and dpnp's next read after this
    assert float(theirs[0, 0]) == 0 and float(theirs[1, 1]) == 1
    x[2] = theirs[1] * 5              # a dpnp array as the value, after dpnp computed it
    np.testing.assert_array_equal(x.get()[2], np.full(64, 5, np.float32))
