"""Streams and events (issue 24): `devbuf.Stream` made on a device or adopted from another
library's stream, `stream=` on the calls that enqueue work, `Stream.record()` / `Event`, and one
stream waiting for another, on every backend. The CUDA scenarios whose answer depends on a wait
run in a fresh process with the CUDA test driver's per-operation delay on (see
test_cuda_ordering.py), so that a missing or misplaced wait reads wrong bytes."""

import gc
import time
import weakref

import numpy as np
import pytest

import devbuf
from conftest import backend_names, require_backend
from test_cuda_ordering import run

N = 1 << 18


@pytest.fixture(params=backend_names(makes_streams=True))
def device(request):
    require_backend(request.param)
    return devbuf.Device(request.param)


def test_streams_are_made_on_a_device(device):
    first, second = device.create_stream(), devbuf.Stream(device, non_blocking=False, priority=0)
    assert devbuf.Queue is devbuf.Stream
    assert isinstance(first, devbuf.Stream) and first.device == device == second.device
    assert device.default_stream == device.queue
    assert devbuf.Stream(first) is first
    if device.backend == "host":
        # The host runs all work before returning: its one queue is every stream.
        assert first == second == device.default_stream
    else:
        assert first != second and first != device.default_stream
    assert "devbuf.Stream" in repr(first)


def test_two_streams_copy_record_wait_get(device):
    """The issue's scenario: copy on one stream, record, make the other wait, read back on it."""
    values = np.arange(N, dtype=np.float32)
    copier, reader = device.create_stream(), device.create_stream()
    source = devbuf.alloc(values.nbytes, "device", device=device).view("float32")
    source.copy_from(values)
    target = devbuf.alloc(values.nbytes, "device", stream=copier).view("float32")
    assert target.queue == copier
    target.copy_from(source, stream=copier, blocking=False)
    copied = copier.record()
    assert copied.stream == copier
    reader.wait(copied)
    np.testing.assert_array_equal(target.get(stream=reader), values)
    assert copied.done and copied.query()


def test_fill_and_events_on_a_stream(device):
    stream = device.create_stream()
    buffer = devbuf.alloc(N, "device", device=device)
    buffer.fill(9, stream=stream, blocking=False)
    filled = stream.record()
    filled.synchronize()
    assert filled.done
    filled.wait()
    stream.wait(device.default_stream)
    stream.synchronize()
    assert stream.query()
    assert bytes(buffer.get(stream=stream)) == bytes([9]) * N
    buffer.fill(1, stream=stream)
    assert buffer.to_bytes() == bytes([1]) * N
    buffer.fill(4, stream=stream, blocking=False)
    assert buffer.to_bytes(stream=stream) == bytes([4]) * N
    with pytest.raises(TypeError, match="event_or_stream"):
        stream.wait(1)


def test_a_synchronized_stream_answers_query_as_idle(device):
    # SYCL asks a barrier, which the runtime completes on its own threads a moment later: a
    # query right after synchronize() once said "busy" under load.
    stream = device.create_stream()
    buffer = devbuf.alloc(1 << 16, "device", device=device)
    for value in range(100):
        buffer.fill(value, stream=stream, blocking=False)
        stream.synchronize()
        assert stream.query(), f"busy after synchronize(), round {value}"


def test_timed_events_give_the_time_between(device):
    stream = device.create_stream()
    assert stream.timing
    start = stream.record(timing=True)
    buffer = devbuf.alloc(N, "device", device=device)
    buffer.fill(2, stream=stream, blocking=False)
    time.sleep(0.01)  # host time, which the host's events see; CUDA's see the fill's delay
    end = stream.record(timing=True)
    elapsed = end - start
    assert elapsed >= 0 and devbuf.get_elapsed_time(start, end) == elapsed
    if device.backend == "host":
        assert elapsed >= 10
    with pytest.raises(ValueError, match="timing"):
        end - stream.record()


def test_alloc_on_a_stream_of_another_device_is_refused(device):
    stream = device.create_stream()
    other = "host" if device.backend != "host" else "sycl"
    require_backend(other)
    with pytest.raises(ValueError, match="stream"):
        devbuf.alloc(16, device=other, stream=stream)


def test_opencl_says_it_makes_no_streams():
    require_backend("opencl")
    with pytest.raises(ValueError, match="cannot make streams"):
        devbuf.Device("opencl").create_stream()


def test_sycl_streams_are_in_order_queues_dpctl_sees():
    require_backend("sycl")
    dpctl = pytest.importorskip("dpctl")
    stream = devbuf.Stream("sycl")
    queue = stream.sycl_queue
    assert isinstance(queue, dpctl.SyclQueue) and queue.is_in_order
    assert queue != devbuf.Device("sycl").queue.sycl_queue
    assert devbuf.Stream(queue).sycl_queue == queue


@pytest.fixture(scope="module")
def cuda():
    return require_backend("cuda")


def test_events_of_two_cuda_devices_have_no_elapsed_time(cuda):
    # NVIDIA's driver refuses to time events of two devices (Programming Guide, multi-device
    # "Stream and Event Behavior"); devbuf says so as a ValueError naming both.
    if len(cuda.devices) < 2:
        pytest.skip("needs two CUDA devices")
    first, second = (devbuf.Device(f"cuda:{i}").create_stream() for i in (0, 1))
    start, end = first.record(timing=True), second.record(timing=True)
    with pytest.raises(ValueError, match=r"start, end: .*cuda:0.*cuda:1"):
        end - start
    with pytest.raises(ValueError, match=r"start on cuda:1, end on cuda:0"):
        devbuf.get_elapsed_time(end, start)
    assert first.record(timing=True) - start >= 0


def test_cuda_stream_options_reach_the_driver(cuda):
    run(
        """
        def flags(stream):
            value = ctypes.c_uint()
            ok(cu.cuStreamGetFlags(ctypes.c_void_p(stream.stream), ctypes.byref(value)))
            return value.value

        def priority(stream):
            value = ctypes.c_int()
            ok(cu.cuStreamGetPriority(ctypes.c_void_p(stream.stream), ctypes.byref(value)))
            return value.value

        least, greatest = ctypes.c_int(), ctypes.c_int()
        ok(cu.cuCtxGetStreamPriorityRange(ctypes.byref(least), ctypes.byref(greatest)))
        device = devbuf.Device("cuda")
        assert flags(device.create_stream()) == 1  # CU_STREAM_NON_BLOCKING
        assert flags(device.create_stream(non_blocking=False)) == 0
        assert priority(device.create_stream(priority=greatest.value)) == greatest.value
        assert priority(device.create_stream()) == 0

        # Timed events: the driver's delay on each stream operation is time between them.
        stream = device.create_stream()
        start = stream.record(timing=True)
        devbuf.alloc(N, "device", device=device).fill(1, stream=stream, blocking=False)
        end = stream.record(timing=True)
        assert end - start >= 20, end - start  # DEVBUF_CUDA_TEST_DELAY_US=20000 per operation
        """
    )


def test_a_wait_on_an_adopted_streams_event_orders_foreign_work(cuda):
    # Another library writes devbuf memory on its own stream, which devbuf cannot see; the user
    # hands devbuf that stream, records an event on it and makes a devbuf stream wait: get() on
    # that stream then reads the write, not the fill before it.
    run(
        """
        import weakref
        scratch = devbuf.alloc(64, "device", device="cuda")

        class TheirStream:
            def __init__(self):
                self.handle = new_stream()

            def __cuda_stream__(self):
                return (0, self.handle)

        theirs = TheirStream()
        adopted = devbuf.Stream(theirs)
        assert adopted.stream == theirs.handle and adopted.__cuda_stream__() == (0, theirs.handle)
        kept = weakref.ref(theirs)
        del theirs
        assert kept() is not None  # the adopted Stream keeps its owner

        memory = devbuf.alloc(N, "device", device="cuda")
        memory.fill(1)
        for _ in range(4):  # their earlier work, so that their write lands late
            memset(scratch.ptr, 0, 64, adopted.stream)
        memset(memory.ptr, 7, N, adopted.stream)
        written = adopted.record()
        reader = devbuf.Device("cuda").create_stream()
        reader.wait(written)
        got = memory.get(stream=reader)
        assert bytes(got) == bytes([7]) * N, set(bytes(got))
        """
    )


def test_pending_work_follows_the_stream_that_did_it(cuda):
    # No wait of the user's: devbuf records each command with its stream, so a read on another
    # stream (the default one, a third) and an export wait for it.
    run(
        """
        device = devbuf.Device("cuda")
        first, second = device.create_stream(), device.create_stream()
        memory = devbuf.alloc(N, "device", device=device)
        memory.fill(1)
        memory.fill(2, stream=first, blocking=False)
        assert memory.to_bytes() == bytes([2]) * N
        memory.fill(3, stream=first, blocking=False)
        assert bytes(memory.get(stream=second)) == bytes([3]) * N
        copy = devbuf.alloc(N, "device", stream=second)
        copy.copy_from(memory, stream=first, blocking=False)
        assert copy.__cuda_array_interface__["stream"] in (first.stream, second.stream)
        assert copy.to_bytes() == bytes([3]) * N
        """
    )


def test_a_pool_reuses_memory_freed_on_a_stream_only_after_that_streams_work(cuda):
    # RMM's deallocate(ptr, bytes, stream): the block comes back while work on the stream may
    # still write it; the pool hands it out again only once that work is done, so that a next
    # owner who writes it from the host (shared memory) is not overwritten (issue 33).
    run(
        """
        import devbuf.mr

        pool = devbuf.mr.PoolMemoryResource(devbuf.mr.QueueMemoryResource("cuda:0"))
        stream = devbuf.Device("cuda").create_stream()
        ptr = pool.allocate(N, "shared", stream=stream)
        scratch = pool.allocate(64, "device")
        for _ in range(4):  # earlier work on the stream, so that its write lands late
            memset(scratch, 0, 64, stream.stream)
        memset(ptr, 1, N, stream.stream)
        pool.deallocate(ptr, N, "shared", stream=stream)
        again = pool.allocate(N, "shared")
        assert again != ptr, "the block was handed out again while the stream still wrote it"
        ctypes.memset(again, 2, N)  # the next owner writes from the host
        stream.synchronize()
        assert ctypes.string_at(again, N) == bytes([2]) * N
        pool.deallocate(again, N, "shared")
        reused = pool.allocate(N, "shared")
        assert reused in (ptr, again), "once the stream's work is done the block is reused"
        """
    )


def test_from_handle_adopts_a_raw_stream_on_its_device(cuda):
    run(
        """
        handle = new_stream()
        owner = object()
        adopted = devbuf.Stream.from_handle(handle, owner=owner)
        assert adopted.stream == handle and adopted.device == devbuf.Device("cuda:0")
        on_device = devbuf.Stream.from_handle(handle, "cuda:0")
        assert on_device.stream == handle
        try:
            devbuf.Stream.from_handle(2)
        except ValueError as err:
            assert "per-thread" in str(err), err
        else:
            raise AssertionError("the per-thread default stream was adopted")
        """
    )


def test_cuda_core_streams_in_and_out(cuda):
    pytest.importorskip("cuda.core")
    run(
        """
        from cuda.core import Device

        core = Device(0)
        core.set_current()
        theirs = core.create_stream()
        adopted = devbuf.Stream(theirs)
        assert adopted.stream == int(theirs.handle)

        def device_bytes(memory):
            # A plain copy, ordered with neither stream: it sees only work already done.
            host = ctypes.create_string_buffer(N)
            ok(cu.cuMemcpyDtoH_v2(host, ctypes.c_uint64(memory.ptr), ctypes.c_size_t(N)))
            return host.raw

        # devbuf's work on cuda.core's stream: cuda.core's sync covers it.
        memory = devbuf.alloc(N, "device", device="cuda")
        memory.fill(1)
        memory.fill(5, stream=adopted, blocking=False)
        theirs.sync()
        assert device_bytes(memory) == bytes([5]) * N

        # devbuf's stream handed to cuda.core: the same CUstream, so its sync covers devbuf's work.
        ours = devbuf.Device("cuda").create_stream()
        wrapped = core.create_stream(ours)
        assert int(wrapped.handle) == ours.stream
        memory.fill(6, stream=ours, blocking=False)
        wrapped.sync()
        assert device_bytes(memory) == bytes([6]) * N
        """
    )


def test_an_adopted_streams_owner_is_released_with_it(cuda):
    class Owner:
        def __cuda_stream__(self):
            return (0, 1)  # the legacy default stream

    owner = Owner()
    adopted = devbuf.Stream(owner)
    released = weakref.ref(owner)
    del owner
    gc.collect()
    assert released() is not None
    buffer = devbuf.alloc(64, "device", stream=adopted)
    del adopted
    gc.collect()
    assert released() is not None  # the memory allocated on the stream still uses it
    del buffer
    gc.collect()
    assert released() is None
