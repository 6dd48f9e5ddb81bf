"""The ordering invariant on every queue devbuf hands out (issue 33), on the real SYCL CPU runtime:
a devbuf stream's `synchronize`, `record` and `wait` cover the work dpnp and dpctl enqueue on it,
not only devbuf's own last command; a devbuf stream passed as DLPack's `stream` is a queue the
memory was handed out on; and a block given back on a stream (`pool.deallocate(stream=)`,
`close(stream=)`) is handed out again only after all work on that stream.

Reads that check a stream's own promise go around devbuf (ctypes on the USM pointer), so that
only the stream's wait stands between the consumer's write and the read. The arrays are large
(tens of milliseconds of work on the CPU runtime), so that a read that does not wait sees the old
bytes."""

import ctypes
import time

import numpy as np
import pytest

import devbuf
import devbuf.mr
from test_sycl_consumer_ordering import N, dpnp, sycl  # noqa: F401 (fixtures)

dpctl = pytest.importorskip("dpctl")
dm = pytest.importorskip("dpctl.memory")

NBYTES = N * 4


def last_float(ptr):
    """The last float32 of the memory at `ptr`, read by the host without asking devbuf."""
    return np.frombuffer(ctypes.string_at(ptr + NBYTES - 4, 4), np.float32)[0]


class RawSuai:
    """Memory at `ptr` described to dpctl by hand (no devbuf export), on `queue`'s device."""

    def __init__(self, ptr, queue):
        self.__sycl_usm_array_interface__ = {
            "data": (ptr, False),
            "shape": (NBYTES,),
            "typestr": "|u1",
            "version": 1,
            "syclobj": queue,
        }


def ones(queue):
    # Callers keep it until the copy from it is done: dpctl's free of USM waits for the queue.
    memory = dm.MemoryUSMShared(NBYTES, queue=queue)
    np.frombuffer(memory, np.float32)[:] = 1
    return memory


def busy(queue):
    """Work queued before the consumer's write, so that the write lands late (kept alive by the
    returned event's copies until then)."""
    scratch = [dm.MemoryUSMDevice(4 * NBYTES, queue=queue) for _ in range(2)]
    return scratch, queue.memcpy_async(scratch[1], scratch[0], 4 * NBYTES)


WAITS = {
    "synchronize": lambda stream, other: stream.synchronize(),
    "record": lambda stream, other: stream.record().synchronize(),
    "wait": lambda stream, other: (other.wait(stream), other.synchronize()),
}


@pytest.mark.parametrize("wait", WAITS)
@pytest.mark.parametrize("fill", ["pending", "completed"])
def test_a_stream_covers_dpnp_work_on_it(dpnp, sycl, wait, fill):
    stream = devbuf.Stream(sycl)
    array = stream.alloc(NBYTES, "shared").view("float32")
    array.buffer.fill(0, stream=stream, blocking=fill == "completed")
    theirs = dpnp.asarray(array, copy=False)
    assert theirs.sycl_queue == stream.sycl_queue  # dpnp works on the stream devbuf handed out
    theirs += 1  # returns before the kernel ran
    WAITS[wait](stream, devbuf.Stream(sycl))
    assert last_float(array.buffer.ptr) == 1, f"{wait}() returned before dpnp's work"
    assert stream.query()


def test_the_recipe_for_an_adopted_queue_holds_after_devbufs_own_work_on_it(sycl):
    # README: dpctl's in-order queue adopted as a devbuf stream; its `record()` hands dpctl's
    # work over to another stream, also after devbuf itself worked on that queue.
    queue = dpctl.SyclQueue(sycl.selector.removeprefix("sycl:"), property="in_order")
    adopted = devbuf.Stream(queue)
    memory = devbuf.alloc(NBYTES, "shared", device=sycl)
    memory.fill(0, stream=adopted, blocking=False)  # devbuf's own command on the queue
    source = ones(queue)
    copy = queue.memcpy_async(dm.as_usm_memory(RawSuai(memory.ptr, queue)), source, NBYTES)
    reader = devbuf.Stream(sycl)
    reader.wait(adopted.record())
    reader.synchronize()
    assert last_float(memory.ptr) == 1, "the recipe did not cover dpctl's copy"
    copy.wait()


def test_a_dlpack_consumer_on_a_devbuf_streams_queue_comes_before_devbuf(sycl):
    stream = devbuf.Stream(sycl)
    memory = devbuf.alloc(NBYTES, "shared", device=sycl)
    memory.fill(0)
    capsule = memory.view("float32").__dlpack__(stream=stream.sycl_queue, max_version=(1, 0))
    queue = stream.sycl_queue  # the consumer writes back on the queue it passed
    source = ones(queue)
    copy = queue.memcpy_async(dm.as_usm_memory(RawSuai(memory.ptr, queue)), source, NBYTES)
    assert np.asarray(memory.view("float32"))[-1] == 1, "a host view before the consumer's write"
    copy.wait()
    del capsule


def test_a_block_deallocated_on_a_stream_waits_for_dpctls_work_there(sycl):
    pool = devbuf.mr.PoolMemoryResource(devbuf.mr.QueueMemoryResource(sycl))
    stream = devbuf.Stream(sycl)
    ptr = pool.allocate(NBYTES, "shared", stream=stream)
    scratch = devbuf.alloc(64, "shared", device=sycl)
    scratch.fill(0, stream=stream, blocking=False)  # devbuf's own (short) command on the stream
    queue = stream.sycl_queue
    source = ones(queue)
    earlier = busy(queue)
    copy = queue.memcpy_async(dm.as_usm_memory(RawSuai(ptr, queue)), source, NBYTES)
    pool.deallocate(ptr, NBYTES, "shared", stream=stream)
    time.sleep(0.01)  # devbuf's own command is done by now; dpctl's copy is not
    again = devbuf.alloc(NBYTES, "shared", mr=pool)
    ctypes.memset(again.ptr, 0, NBYTES)  # the next owner writes from the host
    copy.wait()
    del earlier
    assert again[NBYTES - 1 :].to_bytes() == b"\x00", "dpctl's copy landed in the new owner's block"


def test_close_on_a_stream_waits_for_all_work_there_not_only_devbufs(sycl):
    pool = devbuf.mr.PoolMemoryResource(devbuf.mr.QueueMemoryResource(sycl))
    stream = devbuf.Stream(sycl)
    memory = devbuf.alloc(NBYTES, "shared", mr=pool)
    memory[:64].fill(0, stream=stream, blocking=False)  # devbuf's own (short) command on it
    queue = stream.sycl_queue
    ptr = memory.ptr
    source = ones(queue)
    earlier = busy(queue)
    copy = queue.memcpy_async(dm.as_usm_memory(RawSuai(ptr, queue)), source, NBYTES)
    memory.close(stream=stream)
    time.sleep(0.01)  # devbuf's own command is done by now; dpctl's copy is not
    again = devbuf.alloc(NBYTES, "shared", mr=pool)
    ctypes.memset(again.ptr, 0, NBYTES)
    copy.wait()
    del earlier
    assert again[NBYTES - 1 :].to_bytes() == b"\x00", "dpctl's copy landed in the new owner's block"
