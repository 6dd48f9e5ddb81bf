"""A leak report points at Python code, as RMM users read theirs: with `capture_stacks=True`,
each outstanding allocation of a `TrackingResourceAdaptor` is followed by the Python file, line
and code that allocated it, not by devbuf's Rust and C frames."""

import devbuf
import devbuf.mr as mr


def allocate_here(tracking):
    return devbuf.alloc(256, "host", mr=tracking)


def test_the_report_names_the_python_line_that_allocated():
    tracking = mr.TrackingResourceAdaptor(mr.QueueMemoryResource("host"), capture_stacks=True)
    kept = allocate_here(tracking)
    report = tracking.get_outstanding_allocations_str()
    lines = report.splitlines()
    assert lines[0] == "1 outstanding allocations on host:"
    assert lines[1].endswith(": 256 bytes of host memory")
    line = allocate_here.__code__.co_firstlineno + 1
    assert f'File "{__file__}", line {line}, in allocate_here' in report
    assert 'return devbuf.alloc(256, "host", mr=tracking)' in report
    assert "rust" not in report.lower() and len(lines) <= 2 + 2 * 6
    del kept
    assert tracking.get_outstanding_allocations_str() == "", "nothing outstanding: an empty report, as RMM's"


def test_without_capture_stacks_the_report_is_one_line_per_allocation():
    tracking = mr.TrackingResourceAdaptor(mr.QueueMemoryResource("host"))
    kept = allocate_here(tracking)
    assert tracking.get_outstanding_allocations_str().count("\n") == 2
    del kept
