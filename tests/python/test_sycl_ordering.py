"""Ordering with other libraries' SYCL queues (issue 16): work a dpctl producer still has pending
on its own queue when devbuf imports, DLPack's `stream` for oneAPI, and exports released or
handed out while work is pending. The copies are large (tens of milliseconds on the CPU runtime)
so that a read that does not wait sees the bytes before the copy wrote them, every time."""

import ctypes
import os
import shutil
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import devbuf
from conftest import require_backend

dpctl = pytest.importorskip("dpctl")
dm = pytest.importorskip("dpctl.memory")

BIG = 1 << 28  # 256 MiB
USM = {"host": dm.MemoryUSMHost, "device": dm.MemoryUSMDevice, "shared": dm.MemoryUSMShared}


@pytest.fixture(scope="module")
def sycl():
    require_backend("sycl")
    return devbuf.Device("sycl")


def filter_string(device):
    return device.selector.removeprefix("sycl:")


def pending_copy(queue, kind, nbytes=BIG):
    """dpctl memory of `kind` on `queue`, all zeros, into which a copy of ones is still running."""
    ones = dm.MemoryUSMShared(nbytes, queue=queue)
    ones.memset(1)
    target = USM[kind](nbytes, queue=queue)
    target.memset(0)
    queue.memcpy_async(target, ones, nbytes)
    return target, ones


def last_byte(array):
    return array.buffer[array.buffer.nbytes - 1 :].to_bytes()


def copied_last_byte(array):
    target = devbuf.alloc(1, "device")
    target.copy_from(array.buffer[array.buffer.nbytes - 1 :])
    return target.to_bytes()[0]


def test_host_views_of_an_import_wait_for_an_in_order_producer(sycl):
    queue = dpctl.SyclQueue(filter_string(sycl), property="in_order")
    target, keep = pending_copy(queue, "shared")
    assert np.asarray(devbuf.asarray(target))[-1] == 1
    target, keep = pending_copy(queue, "shared")
    assert np.from_dlpack(devbuf.asarray(target), device="cpu")[-1] == 1


@pytest.mark.parametrize("kind", ["device", "shared"])
def test_our_reads_of_an_import_wait_for_an_out_of_order_producer(sycl, kind):
    queue = dpctl.SyclQueue(filter_string(sycl))
    assert not queue.is_in_order
    target, keep = pending_copy(queue, kind)
    assert last_byte(devbuf.asarray(target)) == b"\x01"


def test_an_import_with_sync_false_leaves_the_producer_queue_to_the_caller(sycl):
    queue = dpctl.SyclQueue(filter_string(sycl), property="in_order")
    target, keep = pending_copy(queue, "shared")
    # Nothing waits: the copy (tens of milliseconds) has not reached the last byte yet.
    assert np.asarray(devbuf.asarray(target, sync=False))[-1] == 0
    queue.wait()


def test_an_import_from_an_idle_producer_waits_for_nothing(sycl):
    queue = dpctl.SyclQueue(filter_string(sycl))
    memory = dm.MemoryUSMShared(64, queue=queue)
    memory.memset(5)
    ours = devbuf.asarray(memory)
    assert np.asarray(ours)[0] == 5 and ours.to_bytes() == b"\x05" * 64


@pytest.mark.parametrize("in_order", [False, True], ids=["out-of-order", "in-order"])
def test_stress_a_busy_producer_keeps_work_pending_while_we_import(sycl, in_order):
    """Many rounds of: the producer's copy is still running; devbuf imports, then reads through
    every path (buffer protocol, DLPack to the CPU, its own copy, and a copy into its memory)."""
    props = {"property": "in_order"} if in_order else {}
    queue = dpctl.SyclQueue(filter_string(sycl), **props)
    nbytes = 1 << 24
    readers = [
        lambda ours: np.asarray(ours)[-1],
        lambda ours: np.from_dlpack(ours, device="cpu")[-1],
        lambda ours: last_byte(ours)[0],
        copied_last_byte,
    ]
    for round in range(24):
        target, keep = pending_copy(queue, "shared", nbytes)
        assert readers[round % len(readers)](devbuf.asarray(target)) == 1, round


def test_dlpack_stream_for_oneapi_is_a_sycl_queue_or_none(sycl):
    buffer = devbuf.alloc(64, "device")
    for stream in ("x", 1, -1, 3.5):
        with pytest.raises(TypeError, match="stream"):
            buffer.__dlpack__(stream=stream)
    buffer.__dlpack__(stream=None)
    buffer.__dlpack__(stream=dpctl.SyclQueue(filter_string(sycl)))
    buffer.__dlpack__(stream=buffer.queue)


def test_a_consumer_queue_passed_as_dlpack_stream_waits_without_blocking_the_host(sycl):
    buffer = devbuf.alloc(BIG, "shared")
    buffer.fill(0)
    buffer.fill(7, blocking=False)
    consumer = dpctl.SyclQueue(filter_string(sycl))
    buffer.__dlpack__(stream=consumer)
    after = consumer.submit_barrier()
    # The host did not wait: the consumer's queue does, behind our fill.
    assert after.execution_status != dpctl.event_status_type.complete
    after.wait()
    assert ctypes.string_at(buffer.ptr + BIG - 1, 1) == b"\x07"


def test_a_dlpack_export_without_a_stream_completes_pending_work_first(sycl):
    # No consumer queue to order (stream=None): the generic rule, which blocks until the fill
    # has run, also on the path that does not ask the backend for its rule.
    buffer = devbuf.alloc(BIG, "shared")
    buffer.fill(0)
    buffer.fill(7, blocking=False)
    capsule = buffer.__dlpack__(max_version=(1, 0))
    assert ctypes.string_at(buffer.ptr + BIG - 1, 1) == b"\x07"
    del capsule


def test_we_pass_our_queue_as_a_dpctl_queue_to_a_oneapi_producer(sycl):
    inner = devbuf.alloc(64, "device")
    inner.fill(3)
    streams = []

    class Producer:
        def __dlpack_device__(self):
            return inner.__dlpack_device__()

        def __dlpack__(self, stream=None, max_version=None, **kwargs):
            streams.append(stream)
            return inner.__dlpack__(stream=stream, max_version=max_version)

    ours = devbuf.from_dlpack(Producer())
    assert ours.to_bytes() == b"\x03" * 64
    (stream,) = streams
    assert isinstance(stream, dpctl.SyclQueue)
    assert stream.sycl_device.filter_string == filter_string(sycl)


def test_current_work_stream_names_our_sycl_queue(sycl):
    from consumer import load

    buffer = devbuf.alloc(64, "device")
    device_type, device_id = buffer.__dlpack_device__()
    stream = load().current_stream(buffer, device_type, device_id)
    assert stream not in (0, None)
    # It is a live sycl::queue* on our device: dpctl can wrap a capsule of it.
    capsule = ctypes.pythonapi.PyCapsule_New
    capsule.restype, capsule.argtypes = ctypes.py_object, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
    queue = dpctl.SyclQueue(capsule(stream, b"SyclQueueRef", None))
    assert queue.sycl_device.filter_string == filter_string(sycl)


def test_a_failed_capsule_allocation_releases_the_export_once(tmp_path):
    """PyCapsule_New fails under _testcapi.set_nomemory: valgrind must see no access to the freed
    export block."""
    if shutil.which("valgrind") is None:
        pytest.skip("valgrind is not installed")
    script = tmp_path / "nomemory.py"
    script.write_text(
        "import _testcapi, devbuf\n"
        "b = devbuf.alloc(64, kind='host', device='host')\n"
        "for _ in range(3):\n"
        "    _testcapi.set_nomemory(0)\n"
        "    try:\n"
        "        b.__dlpack__()\n"
        "    except MemoryError:\n"
        "        pass\n"
        "    finally:\n"
        "        _testcapi.remove_mem_hooks()\n"
        "print('done')\n"
    )
    run = subprocess.run(
        ["valgrind", "-q", "--leak-check=no", sys.executable, str(script)],
        env={**os.environ, "PYTHONMALLOC": "malloc"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "done" in run.stdout, run.stderr[-2000:]
    # valgrind separates its reports with empty "==pid==" lines; the loader's own are not ours.
    reports, report = [], []
    for line in run.stderr.splitlines():
        text = line.split("== ", 1)[1] if line.startswith("==") and "== " in line else ""
        if text.strip():
            report.append(text)
        elif report:
            reports.append("\n".join(report))
            report = []
    reports.append("\n".join(report))
    ours = [r for r in reports if r.startswith("Invalid") and "devbuf" in r]
    assert not ours, ours[0]


def test_dropping_memory_with_pending_work_lets_other_threads_run(sycl):
    buffer = devbuf.alloc(BIG, "shared")
    buffer.fill(0)
    buffer.fill(1, blocking=False)
    buffer.fill(2, blocking=False)
    ticks = []
    stop = threading.Event()

    def ticker():
        while not stop.is_set():
            ticks.append(time.perf_counter())
            time.sleep(0.0005)

    thread = threading.Thread(target=ticker)
    thread.start()
    time.sleep(0.005)
    start = time.perf_counter()
    del buffer  # waits for both fills before the memory goes back
    end = time.perf_counter()
    stop.set()
    thread.join()
    assert end - start > 0.01, "the fills finished before the drop: nothing to measure"
    assert sum(start < t < end for t in ticks) >= 3


def test_a_non_blocking_copy_from_host_memory_does_not_wait(sycl):
    source = np.ones(BIG, np.uint8)
    target = devbuf.alloc(BIG, "device")
    target.copy_from(source)  # the first copy also faults the pages in
    start = time.perf_counter()
    target.copy_from(source, blocking=True)
    blocking = time.perf_counter() - start
    start = time.perf_counter()
    target.copy_from(source, blocking=False)
    enqueued = time.perf_counter() - start
    del source  # the pending copy keeps its source alive
    assert enqueued < blocking / 4, (enqueued, blocking)
    assert last_byte(target) == b"\x01"


def test_a_finalizer_run_by_a_syclobj_cache_eviction_may_import_again(sycl):
    """An evicted syclobj is dropped after the cache is unlocked: its finalizer may import (under
    the lock this deadlocked the thread on itself)."""
    script = (
        "import devbuf, dpctl.memory as dm\n"
        "memory = dm.MemoryUSMShared(64)\n"
        "budget = [20]\n"
        "class Syclobj:\n"
        "    def _get_capsule(self):\n"
        "        return memory.sycl_queue._get_capsule()\n"
        "    def __del__(self):\n"
        "        if budget[0] > 0:\n"
        "            budget[0] -= 1\n"
        "            devbuf.asarray(Producer())\n"
        "class Producer:\n"
        "    def __init__(self):\n"
        "        self.__sycl_usm_array_interface__ = {'version': 1, 'data': (memory._pointer, False),\n"
        "            'shape': (64,), 'typestr': '|u1', 'syclobj': Syclobj()}\n"
        "for _ in range(40):\n"
        "    devbuf.asarray(Producer())\n"
        "print('done')\n"
    )
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert run.stdout.strip() == "done", run.stderr[-2000:]


@pytest.mark.parametrize("stream", [0, 1, 2, 3])
def test_memory_a_dpnp_host_task_lets_go_of_is_freed_after_writes_on_the_queues_it_was_handed_out_on(sycl, stream, tmp_path):
    """The ordering machine's sequence (ordering_sequences/dlpack_keepalive_release.txt, with the
    DLPack `stream` varied over the machine's four streams): memory imported by dpnp.from_dlpack
    and written by dpnp.copyto behind a long copy, then handed out as DLPack's `stream` to a queue
    whose late copy into it waits in the SYCL scheduler for dpnp's keep-alive host task, which
    lets go of the memory when the devbuf object is closed. The release ran inside that host
    task: the runtime's free did not wait for the held copy, which then wrote freed memory (a
    segfault), or the barrier the release submitted there deadlocked with a queue's wait (a hang).
    A subprocess, since the failure is a crash or a hang."""
    pytest.importorskip("dpnp")
    here = os.path.dirname(os.path.abspath(__file__))
    with open(os.path.join(here, "ordering_sequences", "dlpack_keepalive_release.txt")) as f:
        sequence = f.read().replace("protocol='dlpack-stream', stream=2", f"protocol='dlpack-stream', stream={stream}")
    script = tmp_path / "sequence.txt"
    script.write_text(sequence)
    run = subprocess.run([sys.executable, os.path.join(here, "ordering_machine.py"), "sycl", "replay", str(script)],
                         capture_output=True, text=True, timeout=90, cwd=here)
    assert run.returncode == 0, f"rc {run.returncode}:\n{run.stdout[-2000:]}\n{run.stderr[-2000:]}"
    assert "read what the model says" in run.stdout
