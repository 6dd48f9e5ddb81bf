"""Lifetime (issue 24): `close(stream=None)` and `with` on Buffers and Arrays, on every backend.
close() lets go of the memory the object holds at once; the memory itself goes when its last
user (another view, a DLPack capsule, a buffer-protocol view, a pickle in flight, a library that
took it through CAI or SUAI) lets go, which a TrackingResourceAdaptor under the allocation shows.
The CUDA scenario whose answer depends on a wait runs with the CUDA test driver's delay on (see
test_cuda_ordering.py), so that a free not ordered after the stream reads wrong bytes."""

import gc
import pickle

import numpy as np
import pytest

import devbuf
import devbuf.mr as mr
from conftest import backend_names, require_backend
from test_cuda_ordering import run

N = 4096


@pytest.fixture(params=backend_names(makes_streams=True))
def device(request):
    require_backend(request.param)
    return devbuf.Device(request.param)


@pytest.fixture
def tracking(device):
    return mr.TrackingResourceAdaptor(mr.QueueMemoryResource(device))


def allocated(tracking):
    gc.collect()
    return tracking.get_allocated_bytes()


def filled(tracking, byte, kind="device"):
    buffer = devbuf.alloc(N, kind, mr=tracking)
    buffer.fill(byte)
    return buffer


def test_close_returns_memory_nobody_else_holds(tracking):
    buffer = filled(tracking, 1)
    assert allocated(tracking) == N and not buffer.closed
    buffer.close()
    # `buffer` is still referenced: the memory went with close(), not with the object.
    assert buffer.closed and allocated(tracking) == 0
    buffer.close()  # again: nothing happens
    assert buffer.closed and allocated(tracking) == 0


def test_with_closes_at_the_end_of_the_block(tracking):
    with devbuf.alloc(N, "device", mr=tracking) as buffer:
        buffer.fill(2)
        assert allocated(tracking) == N
    assert buffer.closed and allocated(tracking) == 0
    with pytest.raises(KeyError):
        with devbuf.alloc(N, "device", mr=tracking).view("float32") as array:
            raise KeyError("propagates")
    assert array.closed and allocated(tracking) == 0
    with pytest.raises(ValueError, match="closed"):
        with buffer:
            pass


def test_a_view_keeps_the_memory_after_close(tracking):
    buffer = filled(tracking, 3)
    view = buffer.view("uint8")
    part = buffer[16:32]
    buffer.close()
    assert allocated(tracking) == N
    assert view.to_bytes() == bytes([3]) * N and bytes(view.get()) == bytes([3]) * N
    assert part.to_bytes() == bytes([3]) * 16
    del view
    assert allocated(tracking) == N
    part.close()
    assert allocated(tracking) == 0


def test_an_array_closes_too_and_its_buffer_stays_open(tracking):
    buffer = filled(tracking, 4)
    array = buffer.view("float32")
    array.close()
    with pytest.raises(ValueError, match="closed"):
        array.shape
    assert buffer.to_bytes() == bytes([4]) * N and allocated(tracking) == N
    buffer.close()
    assert allocated(tracking) == 0


def test_a_dlpack_capsule_keeps_the_memory_after_close(tracking):
    buffer = filled(tracking, 5)
    capsule = buffer.__dlpack__(max_version=(1, 0))
    buffer.close()
    assert allocated(tracking) == N
    imported = devbuf.from_dlpack(capsule)
    del capsule
    assert imported.to_bytes() == bytes([5]) * N
    del imported
    assert allocated(tracking) == 0


def test_a_buffer_protocol_consumer_keeps_the_object_and_so_the_memory(device):
    # NumPy's frombuffer releases its view at once and keeps the exporting object: after a
    # buffer-protocol export, close() must leave the memory to the object, which goes when the
    # consumers let go of it.
    tracking = mr.TrackingResourceAdaptor(mr.QueueMemoryResource(device))
    buffer = filled(tracking, 6, kind="host")
    from_buffer = np.frombuffer(buffer, dtype=np.uint8)
    view = memoryview(buffer)
    buffer.close()
    del buffer
    assert allocated(tracking) == N
    assert bytes(view) == bytes([6]) * N and view.shape == (N,)
    view.release()
    assert allocated(tracking) == N
    assert bytes(from_buffer) == bytes([6]) * N
    del from_buffer
    assert allocated(tracking) == 0


def test_a_pickle_in_flight_keeps_the_memory_after_close(tracking):
    buffer = filled(tracking, 7, kind="host")
    frames = []
    payload = pickle.dumps(buffer, protocol=5, buffer_callback=frames.append)
    buffer.close()
    assert allocated(tracking) == N
    copy = pickle.loads(payload, buffers=frames)
    assert copy.to_bytes() == bytes([7]) * N
    del copy, frames
    assert allocated(tracking) == 0


@pytest.mark.parametrize(
    "backend,attribute",
    [(backend.name, protocol) for backend in devbuf.backends() for protocol in backend.protocols],
)
def test_an_interface_dict_consumer_keeps_the_object_and_so_the_memory(backend, attribute):
    # CAI and SUAI consumers keep the exporting object, not a share of the memory: close() must
    # leave the memory to that object, which goes when the consumer lets go of it.
    require_backend(backend)
    tracking = mr.TrackingResourceAdaptor(mr.QueueMemoryResource(backend))
    buffer = filled(tracking, 8)
    described = getattr(buffer, attribute)
    consumer = [buffer, described["data"][0]]  # what numba, CuPy and dpctl keep
    buffer.close()
    with pytest.raises(ValueError, match="closed"):
        getattr(buffer, attribute)
    del buffer
    assert allocated(tracking) == N
    del consumer
    assert allocated(tracking) == 0


def test_use_after_close_is_a_value_error(tracking):
    buffer = filled(tracking, 9)
    array = buffer.view("float32")
    array.close()
    buffer.close()
    for use in [
        lambda: buffer.ptr,
        lambda: buffer.nbytes,
        lambda: buffer.kind,
        lambda: buffer.view("uint8"),
        lambda: buffer.fill(0),
        lambda: buffer.to_bytes(),
        lambda: buffer[0:4],
        lambda: buffer.__dlpack__(max_version=(1, 0)),
        lambda: buffer.__dlpack_device__(),
        lambda: buffer.copy_from(bytes(N)),
        lambda: memoryview(buffer),
        lambda: pickle.dumps(buffer),
        lambda: devbuf.asarray(buffer),
        lambda: array.shape,
        lambda: array.dtype,
        lambda: array.get(),
        lambda: len(array),
    ]:
        with pytest.raises(ValueError, match="closed"):
            use()
    assert repr(buffer) == "<devbuf.Buffer (closed)>" and "closed" in repr(array)
    assert buffer.device == array.device  # what the object knows without its memory


def test_close_on_a_stream_of_another_device_is_refused(device):
    buffer = devbuf.alloc(N, "device", device=device)
    other = "sycl" if device.backend == "host" else "host"
    require_backend(other)
    with pytest.raises(ValueError, match="stream"):
        buffer.close(stream=devbuf.Device(other).create_stream())
    assert not buffer.closed
    buffer.close(stream=device.create_stream())
    assert buffer.closed


def test_close_on_a_stream_orders_the_free_after_that_streams_work(cuda):
    # The block goes back to the pool at close(), while work the user enqueued on `stream` may
    # still write it. The pool holds one block: the next allocation reuses it as soon as devbuf's
    # free says the work on it is done, and the next user's write must land after the stream's.
    run(
        """
        import devbuf.mr

        pool = devbuf.mr.PoolMemoryResource(
            devbuf.mr.QueueMemoryResource("cuda:0"), initial_pool_size=N + N // 4, maximum_pool_size=N + N // 4
        )
        stream = devbuf.Device("cuda").create_stream()
        scratch = devbuf.alloc(64, "device", device="cuda")
        buffer = devbuf.alloc(N, "device", mr=pool)
        buffer.synchronize()
        ptr = buffer.ptr
        for _ in range(4):  # earlier work on the stream, so that its write lands late
            memset(scratch.ptr, 0, 64, stream.stream)
        memset(ptr, 1, N, stream.stream)
        buffer.close(stream=stream)
        again = devbuf.alloc(N, "device", mr=pool)
        assert again.ptr == ptr, "the pool did not reuse the block: the test proves nothing"
        again.fill(2)
        synchronize(stream.stream)
        assert again.to_bytes() == bytes([2]) * N, set(again.to_bytes())
        """
    )


def test_close_on_a_stream_makes_later_users_of_the_memory_wait_for_it(cuda):
    # A view outlives the close: its exports name the stream whose work the free waits for.
    run(
        """
        stream = devbuf.Device("cuda").create_stream()
        buffer = devbuf.alloc(N, "device", device="cuda")
        view = buffer[0:N]
        buffer.synchronize()
        devbuf.alloc(N, "device", device="cuda").fill(3, stream=stream, blocking=False)
        buffer.close(stream=stream)
        assert view.__cuda_array_interface__["stream"] == stream.stream
        """
    )


@pytest.fixture(scope="module")
def cuda():
    return require_backend("cuda")
