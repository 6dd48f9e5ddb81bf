"""What NumPy users expect of devbuf's arrays: `dtype` is NumPy's, `shape` and `strides` are
tuples, `copy_from` converts, reshapes and broadcasts nothing (CuPy's `ndarray.set`), a view never
drops a tail of bytes, `copy=False` is kept or refused (NumPy 2, the array API), a resource of
another device is refused, and the everyday mistakes get messages that say what to do."""

import importlib.util

import numpy as np
import pytest

import devbuf
import devbuf.mr as mr

NUMPY_TYPES = [
    np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64,
    np.float16, np.float32, np.float64, np.complex64, np.complex128,
]


def host_array(values):
    """A devbuf array of host memory holding `values`."""
    values = np.asarray(values)
    array = devbuf.alloc(values.nbytes, "host", device="host").view(values.dtype, shape=values.shape)
    array.copy_from(values)
    return array


def another_device():
    """A usable device other than the host, or a skip."""
    for device in devbuf.devices():
        if device.backend != "host" and device.usable and "host" in device.kinds:
            return device
    pytest.skip("no usable device besides the host")


@pytest.mark.parametrize("scalar_type", NUMPY_TYPES)
def test_dtype_is_numpys_and_equals_every_spelling_of_it(scalar_type):
    array = devbuf.alloc(32, "host", device="host").view(scalar_type)
    expected = np.dtype(scalar_type)
    assert isinstance(array.dtype, np.dtype)
    assert array.dtype == expected and array.dtype == scalar_type and array.dtype == expected.name
    assert array.dtype == expected.str and array.dtype == np.asarray(array).dtype


def test_a_byte_swapped_dtype_is_numpys_byte_swapped_dtype():
    array = devbuf.alloc(16, "host", device="host").view(">f4")
    assert array.dtype == np.dtype(">f4") and array.dtype != np.float32


@pytest.mark.skipif(importlib.util.find_spec("ml_dtypes") is not None, reason="ml_dtypes is installed")
def test_bfloat16_without_ml_dtypes_is_its_name():
    assert devbuf.alloc(8, "host", device="host").view("bfloat16").dtype == "bfloat16"


def test_bfloat16_with_ml_dtypes_is_its_dtype():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    view = devbuf.alloc(8, "host", device="host").view(ml_dtypes.bfloat16)
    assert view.dtype == np.dtype(ml_dtypes.bfloat16) and view.shape == (4,)


def test_shape_and_strides_are_tuples_as_numpys():
    theirs = np.arange(12.0).reshape(3, 4)[:, ::2]
    ours = devbuf.asarray(theirs)
    assert type(ours.shape) is tuple and type(ours.strides) is tuple
    assert (ours.shape, ours.strides) == (theirs.shape, theirs.strides)


@pytest.mark.parametrize("spelling", [np.float32, np.dtype("float32"), "float32", "<f4", "f4", "single"])
def test_view_takes_what_numpy_dtype_takes(spelling):
    view = devbuf.alloc(16, "host", device="host").view(spelling)
    assert view.dtype == np.float32 and view.shape == (4,)


def test_view_takes_python_types_and_an_int_shape_as_numpy_does():
    buffer = devbuf.alloc(32, "host", device="host")
    assert buffer.view(float).dtype == np.float64 and buffer.view(int, shape=2).shape == (2,)
    with pytest.raises(ValueError, match="shape: -1 is not a length"):
        buffer.view(np.uint8, shape=-1)


@pytest.mark.parametrize(
    ("dtype", "error", "match"),
    [
        (object, ValueError, r"dtype: NumPy's dtype\('O'\) is not a type devbuf supports"),
        ("complex1024", ValueError, r"dtype: 'complex1024' is not a data type"),
        ([1, 2], TypeError, r"dtype: expected a data type .* got \[1, 2\]"),
    ],
)
def test_a_dtype_devbuf_cannot_use_is_named(dtype, error, match):
    with pytest.raises(error, match=match):
        devbuf.alloc(16, "host", device="host").view(dtype)


def test_a_view_never_drops_a_tail_of_bytes():
    ten = devbuf.alloc(10, "host", device="host")
    with pytest.raises(ValueError, match=r"shape: the buffer's 10 bytes .* float32 elements \(4 bytes each\); pass shape="):
        ten.view(np.float32)
    assert ten.view(np.float32, shape=2).nbytes == 8  # asked for explicitly
    assert ten.view(np.uint16).shape == (5,) and ten.view(np.uint16, offset=2).shape == (4,)
    with pytest.raises(ValueError, match="offset: 11 is past the end"):
        ten.view(np.uint8, offset=11)


def test_copy_from_refuses_another_dtype_naming_both():
    array = host_array(np.zeros(4, np.int32))
    with pytest.raises(TypeError, match="source: cannot copy float32 elements into a int32 array"):
        array.copy_from(np.ones(4, np.float32))
    assert np.asarray(array).tolist() == [0, 0, 0, 0]  # not 1065353216, the float's bytes


def test_copy_from_neither_reshapes_nor_broadcasts():
    array = host_array(np.zeros((4, 4), np.float32))
    with pytest.raises(ValueError, match=r"source: shape \(16,\) does not match this array's shape \(4, 4\)"):
        array.copy_from(np.ones(16, np.float32))
    with pytest.raises(ValueError, match=r"shape \(1, 4\)"):
        array.copy_from(np.ones((1, 4), np.float32))
    array.copy_from(np.full((4, 4), 2, np.float32))
    assert np.asarray(array).sum() == 32


def test_a_buffer_takes_the_bytes_of_any_source_of_its_size():
    buffer = devbuf.alloc(16, "host", device="host")
    buffer.copy_from(np.arange(4, dtype=np.float32))
    assert buffer.to_bytes() == np.arange(4, dtype=np.float32).tobytes()


def test_copy_false_that_cannot_be_kept_raises_and_none_copies_only_to_move():
    other = another_device()
    theirs = np.arange(4.0)
    with pytest.raises(ValueError, match=rf'copy: the data lives on "host" and copy=False forbids copying it to "{other.selector}"'):
        devbuf.asarray(theirs, copy=False, device=other)
    moved = devbuf.asarray(theirs, device=other)
    assert moved.device == other and np.frombuffer(moved.to_bytes()).tolist() == theirs.tolist()
    assert devbuf.asarray(theirs, copy=False, device="host").ptr == theirs.ctypes.data
    assert devbuf.asarray(theirs, device="host").ptr == theirs.ctypes.data
    assert devbuf.asarray(theirs, copy=True, device="host").ptr != theirs.ctypes.data


def test_alloc_refuses_a_resource_of_another_device_naming_both():
    other = another_device()
    host = mr.QueueMemoryResource("host")
    message = rf'device: "{other.selector}" is not the device of mr, a QueueMemoryResource on "host"'
    with pytest.raises(ValueError, match=message):
        devbuf.alloc(64, "host", device=other, mr=host)
    assert devbuf.alloc(64, "host", device="host", mr=host).device.selector == "host"
    with pytest.raises(ValueError, match="ipc: "):
        devbuf.alloc(64, "host", mr=host, ipc=True)


@pytest.mark.parametrize(
    ("kind", "hint"),
    [
        ("pinned", r"CUDA's pinned \(page-locked\) host memory, which the device reaches, is \"host\""),
        ("managed", r"CUDA's managed \(unified\) memory, which migrates on demand, is \"shared\""),
        ("unknown", r"\"unknown\" is what devbuf reports for memory it cannot classify"),
        ("gpu", r'is not one of "host", "device", "shared"$'),
    ],
)
def test_a_kind_error_lists_what_can_be_allocated_and_hints_at_other_names(kind, hint):
    with pytest.raises(ValueError, match=hint) as raised:
        devbuf.alloc(8, kind, device="host")
    assert str(raised.value).startswith(f'kind: "{kind}" is not one of "host", "device", "shared"')


def test_fill_names_value_and_the_range():
    buffer = devbuf.alloc(4, "host", device="host")
    for value in (256, -1):
        with pytest.raises(ValueError, match=rf"value: {value} is out of range: fill sets bytes, 0 to 255"):
            buffer.fill(value)
    with pytest.raises(TypeError, match="value: expected an int from 0 to 255, got <class 'float'>"):
        buffer.fill(1.5)
    buffer.fill(255)
    assert buffer.to_bytes() == b"\xff" * 4
