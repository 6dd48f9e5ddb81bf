"""The host backend through every protocol, with NumPy as the other side."""

import ctypes
import gc
import weakref

import numpy as np
import pytest

import devbuf

pythonapi = ctypes.pythonapi
pythonapi.PyCapsule_GetPointer.restype = ctypes.c_void_p
pythonapi.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
pythonapi.PyCapsule_GetName.restype = ctypes.c_char_p
pythonapi.PyCapsule_GetName.argtypes = [ctypes.py_object]
pythonapi.PyCapsule_SetName.argtypes = [ctypes.py_object, ctypes.c_char_p]


pythonapi.PyObject_GetBuffer.argtypes = [ctypes.py_object, ctypes.c_void_p, ctypes.c_int]
pythonapi.PyBuffer_Release.argtypes = [ctypes.c_void_p]
PyBUF_WRITABLE = 0x0001


def get_buffer(obj, flags):
    """PyObject_GetBuffer with explicit flags (what Python code cannot ask for directly)."""
    view = ctypes.create_string_buffer(256)  # larger than a Py_buffer
    pythonapi.PyObject_GetBuffer(obj, view, flags)
    pythonapi.PyBuffer_Release(view)


def capsule_name(capsule):
    return pythonapi.PyCapsule_GetName(capsule).decode()


class DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device_type", ctypes.c_int32),
        ("device_id", ctypes.c_int32),
        ("ndim", ctypes.c_int32),
        ("code", ctypes.c_uint8),
        ("bits", ctypes.c_uint8),
        ("lanes", ctypes.c_uint16),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [
        ("version", DLPackVersion),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", ctypes.c_void_p),
        ("flags", ctypes.c_uint64),
        ("dl_tensor", DLTensor),
    ]


def versioned_tensor(capsule):
    ptr = pythonapi.PyCapsule_GetPointer(capsule, b"dltensor_versioned")
    return DLManagedTensorVersioned.from_address(ptr)


@pytest.mark.parametrize("kind", ["host", "device", "shared"])
def test_alloc_every_kind_and_read_it_through_the_buffer_protocol(kind):
    buffer = devbuf.alloc(1000, kind=kind, device="host")
    assert (buffer.nbytes, buffer.kind, buffer.owned, buffer.readonly) == (1000, kind, True, False)
    assert buffer.ptr % 256 == 0
    view = np.asarray(buffer)
    assert view.ctypes.data == buffer.ptr and view.shape == (1000,) and view.dtype == np.uint8
    view[:] = np.arange(1000) % 251
    assert buffer.to_bytes() == (np.arange(1000) % 251).astype(np.uint8).tobytes()


def test_fill_copy_from_and_slices_share_the_allocation():
    buffer = devbuf.alloc(64, device="host")
    buffer.fill(7)
    assert buffer.to_bytes() == b"\x07" * 64
    part = buffer[16:32]
    assert isinstance(part, devbuf.Buffer) and part.ptr == buffer.ptr + 16 and part.nbytes == 16
    part.copy_from(bytes(range(16)))
    assert buffer.to_bytes()[16:32] == bytes(range(16))
    with pytest.raises(ValueError, match="nbytes"):
        part.copy_from(b"short")
    del buffer
    gc.collect()
    assert part.to_bytes() == bytes(range(16))


def test_typed_views_follow_numpy_conventions():
    buffer = devbuf.alloc(48, device="host")
    np.asarray(buffer)[:] = np.arange(48, dtype=np.uint8)
    view = buffer.view("float32", shape=(2, 3), strides=(4, 8), offset=8)
    assert (view.shape, view.strides, view.offset, view.dtype, view.typestr) == (
        (2, 3), (4, 8), 8, "float32", "<f4"
    )
    assert view.f_contiguous and not view.c_contiguous
    expected = np.ndarray((2, 3), np.float32, buffer=np.asarray(buffer), offset=8, strides=(4, 8))
    np.testing.assert_array_equal(np.asarray(view), expected)
    np.testing.assert_array_equal(np.from_dlpack(view), expected)
    with pytest.raises(ValueError, match="strides"):
        buffer.view("float64", shape=(7,))
    with pytest.raises(ValueError, match="offset"):
        buffer.view("float32", shape=(2,), offset=2)
    with pytest.raises(ValueError, match="dtype"):
        buffer.view("float128")


def test_buffer_protocol_checks_the_contiguity_a_consumer_asks_for():
    # PyBUF_ND without strides asks for C order; each *_CONTIGUOUS flag for its own order.
    nd, strides = 0x0008, 0x0018
    c_order, f_order, any_order = 0x0020 | strides, 0x0040 | strides, 0x0080 | strides
    fortran = devbuf.alloc(48, device="host").view("float32", shape=(2, 3), strides=(4, 8))
    for flags in (strides, f_order, any_order, 0x0100 | strides):
        get_buffer(fortran, flags)
    for flags in (nd, c_order):
        with pytest.raises(BufferError, match="contiguity does not hold"):
            get_buffer(fortran, flags)
    gapped = devbuf.alloc(48, device="host").view("float32", shape=(3,), strides=(8,))
    get_buffer(gapped, strides)
    for flags in (nd, c_order, f_order, any_order):
        with pytest.raises(BufferError, match="contiguity does not hold"):
            get_buffer(gapped, flags)


@pytest.mark.parametrize(
    "make",
    [
        lambda: np.arange(24, dtype=np.float64).reshape(4, 6),
        lambda: np.arange(24, dtype=np.int32).reshape(4, 6)[:, ::-1],
        lambda: np.arange(24, dtype=np.complex64).reshape(4, 6)[1:, ::2],
        lambda: np.arange(24, dtype=np.int16).reshape(4, 6).T,
        lambda: np.arange(24, dtype=np.uint8)[::-3],
        lambda: np.zeros((0, 5), dtype=np.float32),
        lambda: np.array(3.5),
        lambda: np.array([True, False, True]),
    ],
    ids=["c", "reversed", "offset-step", "fortran", "negative-step", "empty", "0-d", "bool"],
)
def test_numpy_round_trips_zero_copy_through_each_protocol(make):
    source = make()
    imported = devbuf.asarray(source)
    assert imported.shape == source.shape
    assert imported.strides == source.strides
    if source.size:
        assert imported.ptr == source.ctypes.data
    for back in (np.from_dlpack(imported), np.asarray(imported), np.asarray(memoryview(imported))):
        np.testing.assert_array_equal(back, source)
        if source.size:
            assert back.ctypes.data == source.ctypes.data
    # Writes on one side are seen on the other.
    if source.size and source.dtype != np.bool_:
        source.flat[0] = 42
        assert np.from_dlpack(imported).flat[0] == 42


def test_imports_keep_the_producer_alive_exactly_as_long_as_a_view(collect):
    source = np.arange(10.0)
    alive = weakref.ref(source)
    imported = devbuf.asarray(source[2:])
    del source
    collect()
    assert alive() is not None
    again = np.from_dlpack(imported)
    del imported
    collect()
    assert alive() is not None
    np.testing.assert_array_equal(again, np.arange(2.0, 10.0))
    del again
    collect()
    assert alive() is None


def test_dlpack_capsules_are_consumed_once_and_release_their_producer(collect):
    source = np.arange(5, dtype=np.int64)
    alive = weakref.ref(source)
    capsule = source.__dlpack__(max_version=(1, 0))
    del source
    imported = devbuf.from_dlpack(capsule)
    assert capsule_name(capsule) == "used_dltensor_versioned"
    with pytest.raises(ValueError, match="already consumed"):
        devbuf.from_dlpack(capsule)
    assert imported.to_bytes() == np.arange(5, dtype=np.int64).tobytes()
    del imported, capsule
    collect()
    assert alive() is None  # the deleter ran (once: a second call would have crashed)


def test_unconsumed_exports_free_their_memory_with_the_capsule(collect):
    source = np.arange(5.0)
    alive = weakref.ref(source)
    imported = devbuf.asarray(source)
    del source
    for max_version in (None, (1, 3)):
        capsule = imported.__dlpack__(max_version=max_version)
        assert capsule_name(capsule) == ("dltensor" if max_version is None else "dltensor_versioned")
        del capsule
    del imported
    collect()
    assert alive() is None


def test_a_capsule_named_again_with_its_own_name_is_still_unconsumed(collect):
    # The destructor tells an unconsumed capsule by its name's address first; the same name at
    # another address (a consumer that set it again) is still unconsumed: the memory goes with it.
    source = np.arange(5.0)
    alive = weakref.ref(source)
    imported = devbuf.asarray(source)
    del source
    capsule = imported.__dlpack__(max_version=(1, 3))
    same_name = ctypes.create_string_buffer(b"dltensor_versioned")
    assert pythonapi.PyCapsule_SetName(capsule, same_name) == 0
    del imported, capsule
    collect()
    assert alive() is None


def test_dlpack_export_fields_flags_and_device():
    buffer = devbuf.alloc(24, device="host")
    view = buffer.view("int32", shape=(2, 3))
    assert view.__dlpack_device__() == (1, 0)
    tensor = versioned_tensor(capsule := view.__dlpack__(max_version=(1, 3)))
    assert (tensor.version.major, tensor.version.minor) == (1, 3)
    t = tensor.dl_tensor
    assert (t.device_type, t.ndim, t.code, t.bits, t.lanes, t.byte_offset) == (1, 2, 0, 32, 1, 0)
    assert [t.shape[i] for i in range(2)] == [2, 3] and [t.strides[i] for i in range(2)] == [3, 1]
    assert t.data == view.ptr and tensor.flags == 0
    del capsule
    copied = versioned_tensor(capsule := view.__dlpack__(max_version=(1, 3), copy=True))
    assert copied.flags & 2 and copied.dl_tensor.data != view.ptr
    readonly = devbuf.asarray(np.frombuffer(b"abcd", dtype=np.uint8))
    assert readonly.readonly
    assert versioned_tensor(readonly.__dlpack__(max_version=(1, 0))).flags & 1
    back = np.from_dlpack(readonly)
    assert not back.flags.writeable
    with pytest.raises(BufferError, match="read-only"):
        get_buffer(readonly, PyBUF_WRITABLE)


def test_legacy_dlpack_of_read_only_memory_is_refused_like_numpy():
    # An unversioned capsule has no read-only flag: NumPy refuses, so does devbuf; a copy may go.
    source = np.frombuffer(b"abcd", dtype=np.uint8)
    with pytest.raises(BufferError):
        source.__dlpack__()
    readonly = devbuf.asarray(source)
    with pytest.raises(BufferError, match="read-only .* legacy"):
        readonly.__dlpack__()
    with pytest.raises(BufferError, match="read-only .* legacy"):
        readonly.__dlpack__(max_version=None, copy=False)
    copied = readonly.__dlpack__(copy=True)
    assert capsule_name(copied) == "dltensor"
    assert capsule_name(readonly.__dlpack__(max_version=(1, 0))) == "dltensor_versioned"
    # The consumer's fallback without max_version still gets the data, as a copy, where asked.
    assert np.from_dlpack(readonly, copy=True).tobytes() == b"abcd"



def test_dlpack_dl_device_and_copy_follow_the_array_api():
    buffer = devbuf.alloc(8, device="host")
    capsule = buffer.__dlpack__(max_version=(1, 0), dl_device=(1, 0), copy=False)
    assert capsule_name(capsule) == "dltensor_versioned"
    with pytest.raises(BufferError, match="dl_device"):
        buffer.__dlpack__(max_version=(1, 0), dl_device=(2, 0), copy=False)
    with pytest.raises(BufferError, match="dl_device"):
        buffer.__dlpack__(max_version=(1, 0), dl_device=(2, 0))
    with pytest.raises(ValueError, match="stream"):
        buffer.__dlpack__(stream=5)
    buffer.__dlpack__(stream=-1)


def test_read_only_memory_refuses_writes():
    imported = devbuf.asarray(b"immutable bytes!")
    assert imported.readonly and imported.kind == "unknown"
    with pytest.raises(ValueError, match="read-only"):
        imported.copy_from(b"x" * 16)
    view = np.asarray(imported)
    assert not view.flags.writeable
    with pytest.raises(ValueError):
        view.setflags(write=True)
    with pytest.raises(TypeError, match="read-only"):
        memoryview(imported)[0] = 1
    assert bytes(memoryview(imported)) == b"immutable bytes!"


def test_bfloat16_exports_through_dlpack_only():
    view = devbuf.alloc(8, device="host").view("bfloat16")
    assert view.dtype == "bfloat16" and view.shape == (4,)
    assert not hasattr(view, "__sycl_usm_array_interface__")
    assert not hasattr(view, "__cuda_array_interface__")
    tensor = versioned_tensor(view.__dlpack__(max_version=(1, 0)))
    assert (tensor.dl_tensor.code, tensor.dl_tensor.bits) == (4, 16)


def test_protocols_the_memory_cannot_honour_are_missing_attributes():
    buffer = devbuf.alloc(8, device="host")
    assert not hasattr(buffer, "__sycl_usm_array_interface__")
    assert not hasattr(buffer, "__cuda_array_interface__")
    assert hasattr(buffer, "__dlpack__") and hasattr(type(buffer), "__dlpack_c_exchange_api__")
    assert type(buffer).__c_dlpack_exchange_api__ is not None


def test_impossible_allocation_is_a_memory_error():
    for kind in ("host", "device", "shared"):
        with pytest.raises(MemoryError):
            devbuf.alloc(1 << 60, kind=kind, device="host")
    with pytest.raises(ValueError, match="kind"):
        devbuf.alloc(8, kind="pinned")
    with pytest.raises(ValueError, match="no backend"):
        devbuf.alloc(8, device="nonsense")


def rss_bytes():
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * 4096


def test_twenty_thousand_alloc_free_cycles_keep_rss_flat():
    source = np.arange(16.0)

    def cycle(n):
        for i in range(n):
            buffer = devbuf.alloc(4096 + i % 7, kind=("host", "device", "shared")[i % 3], device="host")
            np.from_dlpack(buffer.view("uint8"))
            buffer.__dlpack__()  # unconsumed capsules, both ABIs
            buffer.__dlpack__(max_version=(1, 3), copy=bool(i % 2))
            devbuf.asarray(source[i % 4 :])
            del buffer

    cycle(2000)
    before = rss_bytes()
    cycle(20000)
    growth = rss_bytes() - before
    assert growth < 4 << 20, f"RSS grew by {growth} bytes over 20 000 cycles"


def test_devices_queues_and_backends_describe_themselves():
    [host] = devbuf.devices("host")
    assert host.usable and host.kinds == ["host", "device", "shared"] and host.reason is None
    assert devbuf.Device("host") == host and hash(devbuf.Device("host")) == hash(host)
    queue = devbuf.Queue("host")
    assert queue.device == host and queue.stream is None
    buffer = queue.alloc(16, "device")
    assert buffer.queue == queue and buffer.device == host
    with pytest.raises(AttributeError):
        queue._get_capsule()
    assert "host" in repr(buffer) and "host" in repr(host)


def test_alloc_arguments_are_sorted_checked_and_named_as_pyo3_names_them():
    import inspect

    assert str(inspect.signature(devbuf.alloc)) == (
        "(nbytes, kind='shared', device=None, *, ipc=False, mr=None, stream=None)"
    )
    assert devbuf.alloc.__module__ == "devbuf._devbuf"
    # Positional, by keyword, and keyword names built at run time (not interned: matched by text).
    assert devbuf.alloc(8, "host", "host").kind == "host"
    built = {"".join(["ki", "nd"]): "host", "".join(["dev", "ice"]): "host"}
    made = devbuf.alloc(nbytes=24, **built)
    assert (made.nbytes, made.kind, made.device.selector) == (24, "host", "host")
    assert devbuf.alloc(16, device=None, ipc=False, mr=None, stream=None).nbytes == 16

    def error(*args, **kwargs):
        with pytest.raises(Exception) as caught:
            devbuf.alloc(*args, **kwargs)
        return type(caught.value), str(caught.value), getattr(caught.value, "__notes__", None)

    assert error() == (TypeError, "alloc() missing 1 required positional argument: 'nbytes'", None)
    assert error(kind="host") == (TypeError, "alloc() missing 1 required positional argument: 'nbytes'", None)
    assert error(1, "host", "host", 1) == (
        TypeError, "alloc() takes from 1 to 3 positional arguments but 4 were given", None)
    assert error(1, "host", kind="host") == (TypeError, "alloc() got multiple values for argument 'kind'", None)
    assert error(1, **{"".join(["ki", "nd"]): "host", "kind ": 1}) == (
        TypeError, "alloc() got an unexpected keyword argument 'kind '", None)
    assert error(1, strem=None) == (TypeError, "alloc() got an unexpected keyword argument 'strem'", None)
    # devbuf's own messages, naming the argument (not pyo3's "'int' object is not an instance of 'str'").
    assert error("x") == (TypeError, "nbytes: expected an int number of bytes, got str", None)
    assert error(-1) == (ValueError, "nbytes: -1 is negative; alloc takes a number of bytes, 0 or more", None)
    assert error(1, 3) == (TypeError, 'kind: expected "host", "device" or "shared", got int', None)
    assert error(1, ipc=None) == (TypeError, "ipc: expected True or False, got NoneType", None)
    assert error(1, stream=3) == (TypeError, "stream: expected None, a devbuf.Stream, an object with __cuda_stream__ (cuda.core, CuPy) or a dpctl.SyclQueue, got int", None)
    assert error(1, "hostx") == (ValueError, 'kind: "hostx" is not one of "host", "device", "shared"', None)
    # A plain int and an interned kind name are read on a short path; every other int and str
    # on the general path, and both give the same value, or the same error.
    class Int(int):
        pass

    assert devbuf.alloc(Int(8), "".join(["ho", "st"]), device="host").nbytes == 8
    assert devbuf.alloc(True, "host", device="host").nbytes == 1
    for value in (2**64, -1, 2**64 - 1):
        assert error(value, "host", device="host") == error(Int(value), "host", device="host")
    assert error(2**64) == (
        ValueError, "nbytes: 18446744073709551616 bytes is more than any device's address space", None)
    assert error(2**64 - 1, "host", device="host")[0] is MemoryError


def test_alloc_keyword_tuple_seen_before_still_meets_its_positional_arguments():
    # One call site, one keyword tuple: alloc keeps where its names went, and a later call with
    # the same tuple but more positional arguments (through *args) is still told apart.
    def call(*args):
        return devbuf.alloc(*args, kind="host", device="host")

    for _ in range(3):
        assert call(8).kind == "host"
        with pytest.raises(TypeError, match=r"^alloc\(\) got multiple values for argument 'kind'$"):
            call(8, "device")
        with pytest.raises(TypeError, match=r"^alloc\(\) got multiple values for argument 'device'$"):
            devbuf.alloc(*(8, "host", "host"), **{"device": "host"})


def test_dlpack_max_version_takes_subclasses_and_refuses_what_is_not_two_ints():
    class Version(tuple):
        pass

    class Major(int):
        pass

    array = devbuf.alloc(16, device="host").view("float32")
    for version in [(1, 0), Version((1, 3)), (Major(1), 0), (True, 0)]:
        assert "versioned" in repr(array.__dlpack__(max_version=version)), version
    assert "versioned" not in repr(array.__dlpack__(max_version=Version((0, 8))))
    for malformed in [[1, 0], (1, 0, 0), (1,), ("1", 0), (1.0, 0), (2**70, 0), (-1, 0), 1]:
        with pytest.raises(TypeError, match=r"max_version: expected a \(major, minor\) tuple of ints, got "):
            array.__dlpack__(max_version=malformed)


def test_dlpack_max_version_is_read_again_for_every_other_tuple():
    # __dlpack__ keeps the major version of the last exact tuple it read (by identity: NumPy passes
    # one tuple on every call): that tuple repeats its answer, any other is read afresh.
    array = devbuf.alloc(16, device="host").view("float32")
    versioned, legacy = (1, 0), (0, 8)
    for _ in range(3):
        assert "versioned" in repr(array.__dlpack__(max_version=versioned))
        assert "versioned" in repr(array.__dlpack__(max_version=versioned))
        assert "versioned" not in repr(array.__dlpack__(max_version=legacy))
        assert "versioned" not in repr(array.__dlpack__(max_version=legacy))
        with pytest.raises(TypeError, match=r"max_version: expected a \(major, minor\) tuple"):
            array.__dlpack__(max_version=(1, 0, 0))


def test_dlpack_keywords_go_to_their_arguments_whatever_call_came_before():
    # Each call site (its own keyword tuple, in its own order) gets its arguments where they
    # belong, whichever call came before, and an unknown name its TypeError.
    array = devbuf.alloc(16, device="host").view("float32")
    for _ in range(3):
        assert "versioned" in repr(array.__dlpack__(max_version=(1, 0), copy=None))
        assert "versioned" not in repr(array.__dlpack__(max_version=None, copy=False))
        assert "versioned" in repr(array.__dlpack__(copy=None, max_version=(1, 0)))
        assert "versioned" in repr(array.__dlpack__(**{"copy": None, "max_version": (1, 0)}))
        with pytest.raises(TypeError, match="unexpected keyword argument 'versions'"):
            array.__dlpack__(copy=None, versions=(1, 0))


def test_dlpack_arguments_are_keyword_only_checked_and_named():
    import inspect

    array = devbuf.alloc(16, device="host").view("float32")
    assert str(inspect.signature(devbuf.Array.__dlpack__)) == (
        "(self, /, *, max_version=None, dl_device=None, copy=None, stream=None)"
    )
    # Keyword names built at run time (not interned) are matched by text.
    name = "".join(["max_", "version"])
    assert "versioned" in repr(array.__dlpack__(**{name: (1, 3)}))
    assert "versioned" not in repr(array.__dlpack__(max_version=None, dl_device=None, copy=None, stream=None))
    with pytest.raises(TypeError, match=r"^Array.__dlpack__\(\) takes 0 positional arguments but 1 was given$"):
        array.__dlpack__((1, 0))
    with pytest.raises(TypeError, match="unexpected keyword argument 'strem'"):
        array.__dlpack__(strem=None)
    with pytest.raises(TypeError, match="dl_device"):
        array.__dlpack__(dl_device="cpu")
    with pytest.raises(TypeError, match="copy"):
        array.__dlpack__(copy="yes")
    with pytest.raises(TypeError, match="doesn't apply"):
        devbuf.Array.__dlpack__(np.zeros(1))
