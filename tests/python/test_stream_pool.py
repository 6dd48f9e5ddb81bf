"""devbuf.StreamPool: RMM's CudaStreamPool, streams of one device handed out in turn, on every
backend that makes streams (the host's one queue is every stream)."""

import threading

import pytest

import devbuf
from conftest import backend_names, require_backend


@pytest.fixture(params=backend_names(makes_streams=True))
def device(request):
    require_backend(request.param)
    return devbuf.Device(request.param)


def test_streams_are_distinct_and_handed_out_in_turn(device):
    pool = devbuf.StreamPool(device, pool_size=3, non_blocking=False)
    assert pool.get_pool_size() == len(pool) == 3
    streams = [pool.get_stream() for _ in range(3)]
    if device.backend != "host":
        assert all(a != b for i, a in enumerate(streams) for b in streams[i + 1 :])
        assert all(s != device.default_stream and s.is_nonblocking is False for s in streams)
    assert [pool.get_stream() for _ in range(3)] == streams, "round robin"
    assert pool.get_stream(4) is streams[1] and pool.get_stream(-1) is streams[2]
    assert all(s.device == device for s in streams)
    devbuf.alloc(16, "shared", streams[0]).fill(1, stream=streams[1])


def test_threads_share_the_turns():
    pool = devbuf.StreamPool("host", pool_size=4)
    taken = []
    workers = [threading.Thread(target=lambda: taken.extend(pool.get_stream() for _ in range(100))) for _ in range(4)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    counts = {i: sum(t is pool.get_stream(i) for t in taken) for i in range(4)}
    assert sorted(counts.values()) == [100, 100, 100, 100]


@pytest.mark.parametrize("size", [0, -1, 1.5, True])
def test_a_pool_size_that_is_not_a_positive_int_is_refused(size):
    with pytest.raises(ValueError, match="pool_size: expected a positive int"):
        devbuf.StreamPool("host", pool_size=size)
