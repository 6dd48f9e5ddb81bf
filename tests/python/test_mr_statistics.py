"""devbuf.mr.statistics: RMM's rmm.statistics (enable, get, push, pop, the statistics() context
manager) on the current resources, and the profiler whose report names Python functions and
lines."""

import inspect

import pytest

import devbuf
import devbuf.mr as mr
from devbuf.mr import statistics as stats_module


@pytest.fixture
def host_current():
    """The host device's current resources are the queue's again after the test."""
    yield
    for kind in ("host", "device", "shared"):
        mr.set_current_device_resource(mr.QueueMemoryResource("host"), kind=kind)


def alloc(nbytes, kind="host"):
    return devbuf.alloc(nbytes, kind, device="host")


def test_the_context_manager_counts_a_block_and_restores_the_current_resources(host_current):
    before = mr.get_current_device_resource("host", "host")
    kept = alloc(100)
    with mr.statistics(device="host") as region:
        assert isinstance(mr.get_current_device_resource("host", "host"), mr.StatisticsResourceAdaptor)
        held = alloc(300)
        alloc(50, "shared")  # kinds sharing a resource share its adaptor
    assert region == {
        "current_bytes": 300,
        "current_count": 1,
        "peak_bytes": 350,
        "peak_count": 2,
        "total_bytes": 350,
        "total_count": 2,
    }
    assert mr.get_current_device_resource("host", "host").__class__ is before.__class__
    assert not isinstance(mr.get_current_device_resource("host", "host"), mr.StatisticsResourceAdaptor)
    del kept, held


def test_a_statistics_adaptor_still_works_as_before():
    stats = mr.StatisticsResourceAdaptor(mr.QueueMemoryResource("host"))
    with mr.statistics(stats) as region:
        devbuf.alloc(64, "host", mr=stats)
    assert region["total_bytes"] == 64
    with pytest.raises(TypeError, match="needs a StatisticsResourceAdaptor"):
        with mr.statistics(mr.QueueMemoryResource("host")):
            pass


def test_enable_get_push_and_pop_are_rmms(host_current):
    assert stats_module.get_statistics("host") is None
    assert stats_module.push_statistics("host") is None
    stats_module.enable_statistics("host")
    stats_module.enable_statistics("host")  # already enabled: nothing more wraps
    current = mr.get_current_device_resource("host", "host")
    assert isinstance(current, mr.StatisticsResourceAdaptor)
    assert not isinstance(current.upstream_mr, mr.StatisticsResourceAdaptor)
    kept = alloc(1000)
    outer = stats_module.push_statistics("host")
    assert outer == stats_module.Statistics(1000, 1, 1000, 1, 1000, 1)
    alloc(24)
    assert stats_module.get_statistics("host").total_bytes == 24
    region = stats_module.pop_statistics("host")
    assert (region.total_bytes, region.peak_bytes, region.current_bytes) == (24, 24, 0)
    with pytest.raises(IndexError, match="no region is open"):
        stats_module.pop_statistics("host")
    del kept


def test_the_profiler_names_functions_and_lines(host_current):
    records = stats_module.ProfilerRecords()
    stats_module.enable_statistics("host")

    @stats_module.profiler(records=records, device="host")
    def step(nbytes):
        return alloc(nbytes)

    step(1000)
    step(3000)
    with_line = inspect.currentframe().f_lineno + 1
    with stats_module.profiler(records=records, device="host"):
        alloc(5000)
    found = records.records
    function = f"{__file__}:{step.__wrapped__.__code__.co_firstlineno}(test_the_profiler_names_functions_and_lines.<locals>.step)"
    block = f"{__file__}:{with_line}(test_the_profiler_names_functions_and_lines)"
    assert set(found) == {function, block}, found
    assert (found[function].num_calls, found[function].memory_peak, found[function].memory_total) == (2, 3000, 4000)
    assert (found[block].num_calls, found[block].memory_total) == (1, 5000)
    report = records.report()
    assert report.index(block) < report.index(function), "largest peak first"
    assert "5,000" in report and "step)" in report
    assert records.report("num_calls").index(function) < records.report("num_calls").index(block)
    with pytest.raises(ValueError, match="ordered_by"):
        records.report("bytes")


def test_the_profiler_records_nothing_without_statistics(host_current):
    records = stats_module.ProfilerRecords()
    with stats_module.profiler(records=records, device="host"):
        alloc(10)
    assert records.records == {}


def test_a_region_that_frees_older_memory_counts_below_zero(host_current):
    # RMM's counters are signed; before, a region never went below zero.
    stats_module.enable_statistics("host")
    older = alloc(10)
    stats_module.push_statistics("host")
    del older
    region = stats_module.pop_statistics("host")
    assert (region.current_bytes, region.current_count) == (-10, -1)
    assert (region.peak_bytes, region.total_bytes) == (0, 0)
    assert stats_module.get_statistics("host").current_bytes == 0


def test_the_block_of_a_new_adaptor_sees_no_region_of_its_own(host_current):
    # Before: statistics() opened a region on the adaptor it made, so code in the block could pop
    # it (RMM's stack has none there), and the block's end then failed.
    with mr.statistics(device="host") as region:
        kept = alloc(64)
        with pytest.raises(IndexError, match="cannot pop the last counter pair"):
            stats_module.pop_statistics("host")
    assert region["total_bytes"] == 64 and region["current_bytes"] == 64
    del kept


def test_records_are_found_by_the_descriptive_name_of_the_profiled_function(host_current):
    records = stats_module.ProfilerRecords()
    stats_module.enable_statistics("host")

    @stats_module.profiler(records=records, device="host")
    def step():
        return alloc(100)

    step()
    name = stats_module.descriptive_name(step)
    assert name == stats_module.descriptive_name(step.__wrapped__)
    assert records.records[name] == stats_module.ProfilerRecords.MemoryRecord(num_calls=1, memory_total=100, memory_peak=100)
    assert stats_module.descriptive_name(records) == "ProfilerRecords"

