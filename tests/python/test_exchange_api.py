"""DLPack 1.3's C exchange table, called from a consumer written in C."""

import gc
import weakref

import numpy as np
import pytest

import devbuf
from consumer import load


@pytest.fixture(scope="module")
def consumer():
    return load()


def test_the_table_is_a_capsule_on_the_type_under_both_names():
    table = devbuf.Array.__dlpack_c_exchange_api__
    assert type(table).__name__ == "PyCapsule" and "dlpack_exchange_api" in repr(table)
    assert devbuf.Buffer.__dlpack_c_exchange_api__ is not None
    assert devbuf.Array.__c_dlpack_exchange_api__ is not None


def test_non_owning_fill_describes_a_strided_view(consumer):
    buffer = devbuf.alloc(96, device="host")
    view = buffer.view("float64", shape=(3, 2), strides=(-32, 8), offset=64)
    described = consumer.describe(view)
    assert described == {
        "data": view.ptr,
        "device": (1, 0),
        "ndim": 2,
        "dtype": (2, 64, 1),
        "shape": (3, 2),
        "strides": (-4, 1),
        "byte_offset": 0,
    }
    # The table checks that the object really is one of devbuf's.
    with pytest.raises(TypeError, match="py_object"):
        consumer.describe(_Impostor())


class _Impostor:
    """Claims devbuf's table without being a devbuf array."""

    __dlpack_c_exchange_api__ = devbuf.Array.__dlpack_c_exchange_api__


def test_a_bare_dltensor_of_read_only_memory_is_refused(consumer):
    # DLTensor has no flags; the owning export's flags say read-only.
    readonly = devbuf.asarray(np.frombuffer(b"abcdefgh", dtype=np.uint8))
    with pytest.raises(BufferError, match="read-only"):
        consumer.describe(readonly)
    _, described, flags = consumer.round_trip(readonly)
    assert flags & 1 and described["data"] == readonly.ptr


def test_a_bare_dltensor_of_a_closed_array_is_refused_and_of_an_open_one_is_not(consumer):
    # Each case the fast fill does not take goes through the guarded path, which raises.
    buffer = devbuf.alloc(16, device="host")
    open_view, closed_view = buffer.view("float32"), buffer.view("float32")
    closed_view.close()
    for _ in range(3):
        with pytest.raises(ValueError, match="closed"):
            consumer.describe(closed_view)
        assert consumer.describe(open_view)["data"] == buffer.ptr


def test_refused_bare_dltensors_release_what_they_hold_at_once(consumer):
    """The C exchange fast path raised its errors as `__dlpack__` did: each refusal left its
    error's references in pyo3's pending pool until some other devbuf call ran."""
    import sys
    import tracemalloc

    readonly = devbuf.asarray(np.frombuffer(b"abcdefgh", dtype=np.uint8))
    impostor = _Impostor()
    for refused, error in ((readonly, BufferError), (impostor, TypeError)):
        with pytest.raises(error):
            consumer.describe(refused)
        references = sys.getrefcount(refused), sys.getrefcount(type(refused))
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            for _ in range(1000):
                try:
                    consumer.describe(refused)
                except error:
                    pass
            grown = tracemalloc.get_traced_memory()[0] - before
        finally:
            tracemalloc.stop()
        assert (sys.getrefcount(refused), sys.getrefcount(type(refused))) == references
        assert grown < 16_000, f"{type(refused).__name__}: {grown} bytes held after 1,000 refusals"


def test_owning_export_round_trips_through_the_producer(consumer):
    source = np.arange(12, dtype=np.int32).reshape(3, 4)
    imported = devbuf.asarray(source)
    back, described, flags = consumer.round_trip(imported)
    assert isinstance(back, devbuf.Array)
    assert described["shape"] == (3, 4) and described["data"] == source.ctypes.data
    assert back.ptr == source.ctypes.data and flags == 0
    np.testing.assert_array_equal(np.from_dlpack(back), source)


def test_deleter_releases_the_producer(consumer):
    source = np.arange(4.0)
    alive = weakref.ref(source)
    imported = devbuf.asarray(source)
    del source
    consumer.export_and_delete(imported)
    del imported
    gc.collect()
    assert alive() is None


def test_allocator_makes_tensors_and_reports_errors(consumer):
    like = devbuf.alloc(1, device="host")
    made = consumer.allocate(like, (2, 5), (2, 32), (1, 0))
    assert (made.shape, made.dtype, made.kind, made.c_contiguous) == ((2, 5), "float32", "host", True)
    np.from_dlpack(made)[:] = 1.5
    assert np.from_dlpack(made).sum() == 15.0
    with pytest.raises(MemoryError):
        consumer.allocate(like, (1 << 27, 1 << 30), (2, 64), (1, 0))
    with pytest.raises(ValueError, match="device"):
        consumer.allocate(like, (4,), (2, 32), (9, 0))


def test_current_work_stream_is_null_on_the_cpu(consumer):
    assert consumer.current_stream(devbuf.alloc(1, device="host"), 1, 0) == 0


def test_the_table_serves_imports_of_types_that_publish_one(consumer):
    # devbuf consumes its own table when it imports an object whose type publishes one.
    source = devbuf.alloc(8, device="host")
    assert devbuf.asarray(source).ptr == source.ptr


OWNERS = {
    "devbuf allocation": lambda: devbuf.alloc(64, device="host"),
    "imported NumPy array": lambda: devbuf.asarray(np.arange(8.0)),
    "imported bytes (buffer protocol)": lambda: devbuf.asarray(bytearray(b"x" * 64)),
}


@pytest.mark.parametrize("owner", list(OWNERS))
def test_deleters_run_without_the_gil_on_another_thread(consumer, owner):
    array = OWNERS[owner]()
    capsule = array.__dlpack__(max_version=(1, 0))
    consumer.delete_without_gil(capsule)
    del array, capsule
    gc.collect()


def test_deleters_release_the_producer_from_another_thread(consumer):
    source = np.arange(8.0)
    alive = weakref.ref(source)
    capsule = devbuf.asarray(source).__dlpack__(max_version=(1, 0))
    del source
    gc.collect()
    consumer.delete_without_gil(capsule)
    del capsule
    gc.collect()
    # The owner's reference was released without the GIL (deferred to the next time it is held).
    devbuf.alloc(1, device="host")
    gc.collect()
    assert alive() is None


def test_deleters_run_after_interpreter_shutdown():
    import pathlib
    import subprocess
    import sys
    import textwrap

    script = textwrap.dedent(
        f"""
        import sys
        sys.path.insert(0, {str(pathlib.Path(__file__).parent)!r})
        import numpy as np
        import devbuf
        from consumer import load
        consumer = load()
        keep = []
        for make in (
            lambda: devbuf.alloc(64, device="host"),
            lambda: devbuf.asarray(np.arange(8.0)),
            lambda: devbuf.asarray(bytearray(64)),
        ):
            capsule = make().__dlpack__(max_version=(1, 0))
            consumer.delete_at_exit(capsule)
            keep.append(capsule)
        print("exiting")
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "exiting"
    assert "deleters ran after finalization" in done.stderr
