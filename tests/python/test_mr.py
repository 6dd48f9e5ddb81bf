"""devbuf.mr: pools, limits, statistics and leak reports, with RMM's names, on the host backend
and on the SYCL and OpenCL backends where they run."""

import os

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
