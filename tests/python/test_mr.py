"""devbuf.mr: pools, limits, statistics and leak reports, with RMM's names, on the host backend
and on the SYCL and OpenCL backends where they run; memory by address; resources written in
Python."""

import ctypes
import gc
import os
import subprocess
import sys
import textwrap
import time
import weakref

import numpy as np
import pytest

import devbuf
import devbuf.mr as mr
from conftest import require_backend, usable_kinds


def pool_on(device="host", **options):
    return mr.PoolMemoryResource(mr.QueueMemoryResource(device), **options)


def test_a_pool_hands_a_freed_block_out_again_and_releases_it():
    pool = pool_on()
    first = devbuf.alloc(1000, "host", mr=pool)
    ptr = first.ptr
    del first
    assert devbuf.alloc(1000, "host", mr=pool).ptr == ptr
    assert pool.pool_size() >= 1 << 20
    pool.release()
    assert pool.pool_size() == 0


def test_a_limit_raises_memory_error_naming_it():
    limited = mr.LimitingResourceAdaptor(mr.QueueMemoryResource("host"), allocation_limit=1000)
    held = devbuf.alloc(600, "host", mr=limited)
    assert limited.get_allocated_bytes() == 600 and limited.get_allocation_limit() == 1000
    with pytest.raises(MemoryError, match="limit of 1000 bytes.*600 bytes in use"):
        devbuf.alloc(500, "host", mr=limited)
    del held
    devbuf.alloc(1000, "host", mr=limited)


def test_statistics_count_overall_and_in_a_region():
    stats = mr.StatisticsResourceAdaptor(pool_on())
    kept = devbuf.alloc(100, "host", mr=stats)
    with mr.statistics(stats) as region:
        devbuf.alloc(50, "host", mr=stats)
    assert region["total_count"] == 1 and region["peak_bytes"] == 50
    with pytest.raises(IndexError, match="pop_counters: no region is open"):
        stats.pop_counters()
    counts = stats.allocation_counts
    assert counts["current_bytes"] == 100 and counts["peak_bytes"] == 150 and counts["total_count"] == 2
    del kept


def test_tracking_reports_outstanding_allocations():
    tracking = mr.TrackingResourceAdaptor(mr.QueueMemoryResource("host"))
    kept = devbuf.alloc(123, "host", mr=tracking)
    devbuf.alloc(7, "host", mr=tracking)
    report = tracking.get_outstanding_allocations_str()
    assert "1 outstanding" in report and "123 bytes of host memory" in report
    assert tracking.get_allocated_bytes() == 123
    del kept


def test_the_current_resource_serves_alloc_and_copies_without_mr():
    stats = mr.StatisticsResourceAdaptor(pool_on())
    before = mr.get_current_device_resource("host", "host")
    assert isinstance(before, mr.QueueMemoryResource)
    mr.set_current_device_resource(stats)
    try:
        assert mr.get_current_device_resource("host", "host") is stats
        devbuf.alloc(64, "host", device="host")
        devbuf.asarray(np.arange(4.0), copy=True, device="host")
        assert stats.allocation_counts["total_count"] == 2
    finally:
        for kind in ("host", "device", "shared"):
            mr.set_current_device_resource(mr.QueueMemoryResource("host"), kind=kind)


def test_alloc_refuses_what_is_not_a_resource():
    with pytest.raises(TypeError, match="MemoryResource"):
        devbuf.alloc(8, "host", mr=object())


def exported_block_is_not_reused(device, kind, export, reused_once_let_go=True):
    pool = pool_on(device)
    ours = devbuf.alloc(4096, kind, mr=pool)
    ptr = ours.ptr
    theirs = export(ours)
    del ours
    others = [devbuf.alloc(4096, kind, mr=pool) for _ in range(8)]
    assert ptr not in {other.ptr for other in others}
    del others, theirs
    again = [devbuf.alloc(4096, kind, mr=pool) for _ in range(300)]
    if reused_once_let_go:
        assert ptr in {buffer.ptr for buffer in again}
        return
    # Where devbuf cannot wait for the consumer's queues, the block is never handed out again:
    # its upstream block goes back to the runtime, whose free waits for them.
    assert ptr not in {buffer.ptr for buffer in again}
    del again
    pool.release()
    assert pool.pool_size() == 0


def test_a_block_numpy_still_holds_is_not_handed_out_again():
    exported_block_is_not_reused("host", "host", np.asarray)


def test_a_block_dpctl_still_holds_is_not_handed_out_again():
    require_backend("sycl")
    dm = pytest.importorskip("dpctl.memory")
    for kind in usable_kinds(devbuf.Device("sycl")):
        exported_block_is_not_reused("sycl", kind, dm.as_usm_memory, reused_once_let_go=False)


def test_a_block_numpy_still_holds_is_not_handed_out_again_on_opencl():
    require_backend("opencl")
    for device in devbuf.devices("opencl"):
        if "shared" in device.kinds:
            exported_block_is_not_reused(device.selector, "shared", np.asarray)


def rss_bytes():
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_rss_stays_flat_over_pooled_sycl_shared_alloc_and_free():
    """ci/soak runs 10^6 cycles (DEVBUF_MR_SOAK_CYCLES)."""
    require_backend("sycl")
    cycles = int(os.environ.get("DEVBUF_MR_SOAK_CYCLES", "20000"))
    pool = pool_on("sycl")
    for _ in range(1000):
        devbuf.alloc(1024, "shared", mr=pool)
    before = rss_bytes()
    for _ in range(cycles):
        devbuf.alloc(1024, "shared", mr=pool)
    grown = rss_bytes() - before
    assert grown <= 1 << 20, f"RSS grew {grown} bytes over {cycles} pooled alloc+free cycles"


def test_push_and_pop_counters_are_rmms():
    stats = mr.StatisticsResourceAdaptor(mr.QueueMemoryResource("host"))
    kept = devbuf.alloc(100, "host", mr=stats)
    before = stats.push_counters()  # the enclosing counters, as they were
    assert before["current_bytes"] == 100 and before["total_count"] == 1
    devbuf.alloc(30, "host", mr=stats)
    region = stats.pop_counters()
    assert (region["total_bytes"], region["total_count"], region["current_bytes"]) == (30, 1, 0)
    del kept


def test_reprs_are_short_and_name_the_device_and_sizes():
    bottom = mr.QueueMemoryResource("host")
    pool = mr.PoolMemoryResource(bottom, maximum_pool_size=1 << 24)
    kept = devbuf.alloc(600, "host", mr=pool)
    limited = mr.LimitingResourceAdaptor(pool, 1000)
    stats = mr.StatisticsResourceAdaptor(pool)
    tracking = mr.TrackingResourceAdaptor(pool)
    assert repr(bottom) == '<devbuf.mr.QueueMemoryResource on "host">'
    assert repr(pool) == f'<devbuf.mr.PoolMemoryResource on "host" pool_size={pool.pool_size()} maximum_pool_size=16777216>'
    assert repr(limited) == '<devbuf.mr.LimitingResourceAdaptor on "host" allocated_bytes=0 allocation_limit=1000>'
    assert repr(stats) == '<devbuf.mr.StatisticsResourceAdaptor on "host" current_bytes=0 current_count=0>'
    assert repr(tracking) == '<devbuf.mr.TrackingResourceAdaptor on "host" allocated_bytes=0 outstanding=0>'
    del kept


def test_upstream_is_rmms_upstream_mr_and_get_upstream():
    bottom = mr.QueueMemoryResource("host")
    pool = mr.PoolMemoryResource(bottom)
    stats = mr.StatisticsResourceAdaptor(upstream_mr=pool)
    assert stats.upstream_mr is pool and stats.get_upstream() is pool and pool.upstream_mr is bottom
    assert bottom.upstream_mr is None and bottom.get_upstream() is None
    assert stats.device == devbuf.Device("host") and stats.queue == bottom.queue


def test_every_class_and_method_says_what_it_does():
    for name in mr.__all__:
        item = getattr(mr, name)
        assert item.__doc__, name
        if isinstance(item, type):
            for member, value in vars(item).items():
                if not member.startswith("_"):
                    assert value.__doc__, f"{name}.{member}"


def test_memory_by_address_is_freed_only_as_handed_out():
    counted = mr.StatisticsResourceAdaptor(mr.QueueMemoryResource("host"))
    pool = mr.PoolMemoryResource(counted)
    ptr = pool.allocate(100, "host")
    assert ptr % 256 == 0
    ctypes.memset(ptr, 7, 100)  # host memory, the caller's until deallocate
    refusals = [
        ((ptr + 256, 100, "host"), f"ptr: {ptr + 256:#x} was not handed out by this resource's allocate"),
        ((ptr, 99, "host"), f"nbytes: {ptr:#x} was allocated with 100 bytes, not 99"),
        ((ptr, 100, "device"), f"kind: {ptr:#x} is host memory, not device"),
    ]
    for args, message in refusals:
        with pytest.raises(ValueError, match=f"{message}.*; nothing was freed"):
            pool.deallocate(*args)
    with pytest.raises(ValueError, match="was not handed out"):
        mr.PoolMemoryResource(counted).deallocate(ptr, 100, "host")  # another resource's
    again = pool.allocate(100, "host")
    assert again != ptr, "the refused frees freed nothing"
    pool.deallocate(ptr, 100, "host")
    with pytest.raises(ValueError, match="or was deallocated already"):
        pool.deallocate(ptr, 100, "host")
    assert pool.allocate(0, "host") == 0
    pool.deallocate(0, 0, "host")
    held = counted.allocation_counts["current_bytes"]
    del pool  # what is still out goes back with the resource
    gc.collect()
    assert held > 0 and counted.allocation_counts["current_bytes"] == 0


class Counting(mr.MemoryResource):
    """A resource written in Python over another: counts its calls."""

    def __init__(self, upstream):
        super().__init__(upstream_mr=upstream)
        self.calls = []

    def allocate(self, nbytes, kind="shared"):
        ptr = self.upstream_mr.allocate(nbytes, kind)
        self.calls.append(("allocate", ptr, nbytes, kind))
        return ptr

    def deallocate(self, ptr, nbytes, kind="shared"):
        self.calls.append(("deallocate", ptr, nbytes, kind))
        self.upstream_mr.deallocate(ptr, nbytes, kind)


def test_a_resource_written_in_python_serves_alloc_adaptors_and_the_current_resource():
    counting = Counting(mr.QueueMemoryResource("host"))
    assert repr(counting) == f'<{__name__}.Counting on "host">' and counting.device == devbuf.Device("host")
    buffer = devbuf.alloc(100, "host", mr=counting)
    np.asarray(buffer)[:] = 5
    ptr = buffer.ptr
    assert counting.calls == [("allocate", ptr, 100, "host")]
    del buffer
    assert counting.calls[-1] == ("deallocate", ptr, 100, "host")
    pool = mr.PoolMemoryResource(counting)
    devbuf.alloc(64, "device", mr=pool)
    assert counting.calls[-1][0] == "allocate" and counting.calls[-1][2] >= 1 << 20
    mr.set_current_device_resource(counting, kind="host")
    try:
        assert mr.get_current_device_resource("host", "host") is counting
        devbuf.alloc(8, "host", device="host")
        devbuf.asarray(np.arange(3.0), copy=True, device="host")
        assert [call[0] for call in counting.calls[-4:]] == ["allocate", "deallocate"] * 2
    finally:
        mr.set_current_device_resource(mr.QueueMemoryResource("host"), kind="host")
    del pool


def test_a_resource_written_in_python_is_collected_with_its_last_buffer(collect):
    counting = Counting(mr.QueueMemoryResource("host"))
    buffer = devbuf.alloc(10, "host", mr=counting)
    gone = weakref.ref(counting)
    del counting
    collect()
    assert gone() is not None, "a buffer keeps its resource"
    del buffer
    collect()
    assert gone() is None


class Refusing(mr.MemoryResource):
    def allocate(self, nbytes, kind="shared"):
        raise OverflowError(f"no room for {nbytes}")

    def deallocate(self, ptr, nbytes, kind="shared"):
        raise AssertionError("never handed out")


def test_what_python_allocate_raises_reaches_the_caller_through_adaptors():
    refusing = Refusing("host")
    for resource in (refusing, mr.StatisticsResourceAdaptor(refusing), mr.PoolMemoryResource(refusing)):
        with pytest.raises(OverflowError, match="no room for"):
            devbuf.alloc(8, "host", mr=resource)


class Returning(mr.MemoryResource):
    """Returns whatever it is told to, and gives back what it handed out."""

    def __init__(self, value):
        super().__init__("host")
        self.upstream = mr.QueueMemoryResource("host")
        self.value = value
        self.returned = []

    def allocate(self, nbytes, kind="shared"):
        return self.value(self.upstream.allocate(nbytes, kind))

    def deallocate(self, ptr, nbytes, kind="shared"):
        self.returned.append(ptr)
        self.upstream.deallocate(ptr - ptr % 256, nbytes, kind)


@pytest.mark.parametrize(
    ("value", "error", "match"),
    [
        (lambda ptr: None, TypeError, r"Returning.allocate returned None; it returns the address of the memory, an int"),
        (lambda ptr: 0, ValueError, r"Returning.allocate returned 0x0 for 8 bytes; devbuf needs a non-null address aligned to 256"),
        (lambda ptr: ptr + 8, ValueError, r"Returning.allocate returned 0x[0-9a-f]+8 for 8 bytes"),
    ],
)
def test_an_address_devbuf_cannot_use_is_refused_and_given_back(value, error, match):
    resource = Returning(value)
    with pytest.raises(error, match=match):
        devbuf.alloc(8, "host", mr=resource)
    if error is ValueError and "0x0" not in match:
        assert len(resource.returned) == 1 and resource.returned[0] % 256 == 8


def test_what_python_deallocate_raises_goes_to_the_unraisable_hook(monkeypatch):
    seen = []
    monkeypatch.setattr(sys, "unraisablehook", seen.append)

    class Raising(Counting):
        def deallocate(self, ptr, nbytes, kind="shared"):
            super().deallocate(ptr, nbytes, kind)
            raise KeyError("deallocate failed")

    resource = Raising(mr.QueueMemoryResource("host"))
    devbuf.alloc(8, "host", mr=resource)  # freed at once
    assert [type(hook.exc_value) for hook in seen] == [KeyError] and seen[0].object is resource
    assert [call[0] for call in resource.calls] == ["allocate", "deallocate"]


def test_a_python_resource_must_be_initialised_and_implement_both_methods():
    class Forgot(mr.MemoryResource):
        def __init__(self):
            pass

    with pytest.raises(RuntimeError, match=r"Forgot was not initialised: .* super\(\).__init__\(device\)"):
        devbuf.alloc(8, "host", mr=Forgot())
    assert repr(Forgot()).endswith("Forgot (not initialised)>")

    class Empty(mr.MemoryResource):
        pass

    with pytest.raises(NotImplementedError, match="Empty.allocate: a MemoryResource written in Python implements"):
        devbuf.alloc(8, "host", mr=Empty("host"))
    with pytest.raises(TypeError, match="MemoryResource is abstract"):
        mr.MemoryResource()


def test_a_python_resource_is_on_its_upstreams_device():
    other = next((d for d in devbuf.devices() if d.backend != "host" and d.usable), None)
    if other is None:
        pytest.skip("no usable device besides the host")

    class Passing(mr.MemoryResource):
        pass

    upstream = mr.QueueMemoryResource(other)
    assert Passing(upstream_mr=upstream).device == other
    with pytest.raises(ValueError, match=f'device: "host" is not the device of upstream_mr, which allocates on "{other.selector}"'):
        Passing("host", upstream_mr=upstream)


def test_a_python_resource_that_allocates_from_itself_gets_a_recursion_error():
    class Itself(mr.MemoryResource):
        def allocate(self, nbytes, kind="shared"):
            return devbuf.alloc(nbytes, kind, mr=self).ptr

        def deallocate(self, ptr, nbytes, kind="shared"):
            pass

    with pytest.raises(RecursionError, match="Itself.allocate allocated from itself"):
        devbuf.alloc(8, "host", mr=Itself("host"))


def test_python_deallocate_runs_after_the_work_pending_on_the_memory():
    require_backend("sycl")
    nbytes = 1 << 26
    seen = []

    class Checking(Counting):
        def deallocate(self, ptr, nbytes, kind="shared"):
            seen.append(b"".join(ctypes.string_at(ptr + at, 1) for at in (0, nbytes // 2, nbytes - 1)))
            super().deallocate(ptr, nbytes, kind)

    resource = Checking(mr.QueueMemoryResource("sycl"))
    for _ in range(3):
        buffer = devbuf.alloc(nbytes, "shared", mr=resource)
        for value in range(1, 11):
            buffer.fill(value, blocking=False)
        del buffer  # the fills are still running
    assert seen == [b"\x0a" * 3] * 3


def test_python_deallocate_of_memory_handed_out_runs_after_the_work_pending_on_it():
    # Memory another library was given goes back as "only the runtime's free may take it", which
    # Python's deallocate cannot carry: devbuf first waits for all the work it can see.
    require_backend("sycl")
    nbytes = 1 << 26
    seen = []

    class Checking(Counting):
        def deallocate(self, ptr, nbytes, kind="shared"):
            seen.append(b"".join(ctypes.string_at(ptr + at, 1) for at in (0, nbytes // 2, nbytes - 1)))
            super().deallocate(ptr, nbytes, kind)

    resource = Checking(mr.QueueMemoryResource("sycl"))
    for _ in range(3):
        buffer = devbuf.alloc(nbytes, "shared", mr=resource)
        for value in range(1, 11):
            buffer.fill(value, blocking=False)
        buffer.__sycl_usm_array_interface__  # handed out
        del buffer  # the fills are still running
    # The release waits for them on devbuf's release thread (docs/architecture.md, the ordering
    # invariant): it comes back after `del`.
    deadline = time.monotonic() + 30
    while len(seen) < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert seen == [b"\x0a" * 3] * 3


THREADS_THROUGH_A_POOL = """
import sys, threading
import devbuf, devbuf.mr as mr

class Passing(mr.MemoryResource):
    def __init__(self, upstream):
        super().__init__(upstream_mr=upstream)
    def allocate(self, nbytes, kind="shared"):
        return self.upstream_mr.allocate(nbytes, kind)
    def deallocate(self, ptr, nbytes, kind="shared"):
        self.upstream_mr.deallocate(ptr, nbytes, kind)

sys.setswitchinterval(1e-6)  # switch threads inside the Python resource's calls
pool = mr.PoolMemoryResource(Passing(mr.QueueMemoryResource("host")))

def work():
    for round in range(100):
        held = [devbuf.alloc(1 << 20, "host", mr=pool) for _ in range(3)]
        del held
        if round % 5 == 0:
            pool.release()  # so that the pool grows from the Python resource again

threads = [threading.Thread(target=work) for _ in range(8)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
print("done")
"""


def test_threads_through_a_pool_over_a_python_resource_do_not_deadlock():
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(THREADS_THROUGH_A_POOL)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0 and done.stdout == "done\n", done.stderr
