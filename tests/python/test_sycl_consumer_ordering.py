"""The reverse direction of ordering on SYCL (issue 22), on the real SYCL CPU runtime: once devbuf
has handed memory out, work a consumer enqueued on devbuf's own queue (which dpnp uses for devbuf
memory, and which SUAI's `syclobj` hands out) comes before devbuf's next host view and command; and
a pooled block another library was given is never handed out again while that library's work on
its own queue may still write it. The arrays are large (tens of milliseconds of work on the CPU
runtime), so that a read that does not wait sees the old bytes."""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import devbuf
import devbuf.mr
from conftest import require_backend

dpctl = pytest.importorskip("dpctl")
dm = pytest.importorskip("dpctl.memory")

N = 1 << 25  # float32 elements: 128 MiB


@pytest.fixture(scope="module")
def sycl():
    require_backend("sycl")
    return devbuf.Device("sycl")


@pytest.fixture(scope="module")
def dpnp(sycl):
    return pytest.importorskip("dpnp")


def zeros(kind):
    array = devbuf.alloc(N * 4, kind).view("float32")
    array.buffer.fill(0)
    return array


HOST_VIEWS = {
    "np.asarray": lambda array: np.asarray(array)[-1],
    "np.from_dlpack(cpu)": lambda array: np.from_dlpack(array, device="cpu")[-1],
    "to_bytes": lambda array: np.frombuffer(array.buffer[N * 4 - 4 :].to_bytes(), np.float32)[0],
}


@pytest.mark.parametrize("reader", HOST_VIEWS)
@pytest.mark.parametrize("kind", ["shared", "host"])
def test_dpnp_work_on_our_queue_comes_before_host_views(dpnp, kind, reader):
    array = zeros(kind)
    theirs = dpnp.asarray(array, copy=False)
    assert theirs.sycl_queue == array.sycl_queue  # dpnp works on devbuf's queue
    theirs += 1  # returns before the kernel ran
    assert HOST_VIEWS[reader](array) == 1


def test_dpnp_work_on_our_queue_comes_before_a_copy_on_another_queue(dpnp, sycl):
    array = zeros("device")
    theirs = dpnp.asarray(array, copy=False)
    theirs += 1
    theirs += 1
    # Another in-order queue of the device (in its default context, so it reaches our memory).
    other = dpctl.SyclQueue(sycl.selector.removeprefix("sycl:"), property="in_order")
    target = devbuf.alloc(N * 4, "device", device=other).view("float32")
    assert target.queue != array.queue
    target.buffer.copy_from(array.buffer)
    assert np.frombuffer(target.buffer[N * 4 - 4 :].to_bytes(), np.float32)[0] == 2


def test_devbuf_commands_come_after_dpnp_work_on_our_queue(dpnp):
    array = zeros("shared")
    theirs = dpnp.asarray(array, copy=False)
    theirs += 1
    array.buffer.fill(0)
    assert np.asarray(array)[-1] == 0


@pytest.mark.parametrize("kind", ["shared", "host"])
def test_a_strided_write_on_the_host_comes_after_dpnp_work_on_our_queue(dpnp, kind):
    # The CPU device's shared and host memory is the host's own: devbuf writes a strided view
    # there on the host, once the work other libraries may have on the memory is done.
    array = zeros(kind)
    theirs = dpnp.asarray(array, copy=False)
    theirs += 1  # returns before the kernel ran
    array[::4096] = 5
    written = np.asarray(array)
    assert (written[::4096] == 5).all()
    assert written[1] == written[-1] == 1


def test_a_pooled_block_given_to_dpctl_is_not_handed_out_while_dpctls_queue_writes_it(sycl):
    pool = devbuf.mr.PoolMemoryResource(devbuf.mr.QueueMemoryResource())
    nbytes = N * 4
    ones = dm.MemoryUSMShared(nbytes)
    ones.memset(1)
    exported = devbuf.alloc(nbytes, "shared", mr=pool)
    exported.fill(0)
    theirs = dm.as_usm_memory(exported)  # through SUAI
    queue = dpctl.SyclQueue(filter_string(sycl))  # dpctl's own queue, out of devbuf's sight
    copy = queue.memcpy_async(theirs, ones, nbytes)
    del theirs, exported  # both let go while dpctl's copy runs
    again = devbuf.alloc(nbytes, "shared", mr=pool)
    again.fill(0)
    copy.wait()
    assert again[nbytes - 1 :].to_bytes() == b"\x00", "dpctl's copy landed in the new owner's block"


def filter_string(device):
    return device.selector.removeprefix("sycl:")


def test_work_on_another_librarys_queue_is_handed_over_in_one_line(sycl):
    # dpctl's own queue is out of devbuf's sight (the user's part, docs/guide/ordering.md): a
    # barrier on devbuf's queue that waits for dpctl's event hands the ordering over, without
    # blocking the host.
    nbytes = N * 4
    memory = devbuf.alloc(nbytes, "shared")
    memory.fill(0)
    theirs = dm.as_usm_memory(memory)
    queue = dpctl.SyclQueue(filter_string(sycl))
    ones = dm.MemoryUSMShared(nbytes, queue=queue)
    ones.memset(1)
    copy = queue.memcpy_async(theirs, ones, nbytes)
    memory.sycl_queue.submit_barrier([copy])  # the one line of the user's part
    assert np.asarray(memory)[-1] == 1


@pytest.mark.parametrize("then", ["nothing", "another-devbuf-command"])
def test_memory_dpnp_releases_from_its_host_task_is_freed_without_hanging(dpnp, then):
    # dpnp keeps the arrays of an operation alive until it is done, in a host task on the queue:
    # devbuf's last reference may go there, on a thread of devbuf's own queue. Waiting for that
    # queue there (for the host task itself, or for a devbuf command queued behind it) hangs.
    command = "devbuf.alloc(64, 'shared').fill(1)" if then != "nothing" else "pass"
    script = textwrap.dedent(
        f"""
        import devbuf, dpnp
        for _ in range(3):
            array = devbuf.alloc({N * 4}, "shared").view("float32")
            array.buffer.fill(0)
            theirs = dpnp.asarray(array, copy=False)
            theirs += 1
            del array, theirs  # dpnp's host task holds the last references
            {command}
        print("done")
        """
    )
    try:
        run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                             timeout=120, env=os.environ)
    except subprocess.TimeoutExpired:
        pytest.fail("releasing memory from dpnp's host task hung")
    assert run.stdout.strip() == "done", run.stderr[-2000:]


def test_the_demo_reads_dpnps_writes_while_the_runtime_is_busy(dpnp):
    # The demo hands memory to dpctl, dpnp and NumPy in turn. Here every dpnp array it makes comes
    # with large copies of another library's, on its own queue, that keep the runtime's threads
    # busy: dpnp's `+= 1` on devbuf's queue is still pending when NumPy reads.
    script = textwrap.dedent(
        """
        import dpctl, dpctl.memory as dm
        import dpnp
        import devbuf.__main__ as main

        real_asarray = dpnp.asarray
        other = dpctl.SyclQueue()  # another library's own queue
        keep = []

        def asarray_under_load(obj, *args, **kwargs):
            array = real_asarray(obj, *args, **kwargs)
            for _ in range(4):
                source = dm.MemoryUSMShared(1 << 27, queue=other)
                target = dm.MemoryUSMShared(1 << 27, queue=other)
                keep.append((source, target, other.memcpy_async(target, source, 1 << 27)))
            return array

        dpnp.asarray = asarray_under_load
        main.matrix = lambda wide=False: 0  # the conformance matrix is ci/demo's, not this test's
        raise SystemExit(main.demo())
        """
    )
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                         env=os.environ)
    assert run.stdout.count("NumPy reads [11. 12. 13. 14. 15. 16. 17. 18.]") == 2, run.stdout
    assert run.returncode == 0, run.stdout + run.stderr
