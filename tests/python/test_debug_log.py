"""devbuf's debug log behind RMM's switches (devbuf.mr.set_logging_level and kin): what each level
keeps, where the lines go ($DEVBUF_DEBUG_LOG_FILE), and when they are written out (the flush
level). The log is process-wide: each scenario that writes lines runs in a fresh process."""

import subprocess
import sys
import textwrap

import pytest

import devbuf.mr as mr
from devbuf.mr import level_enum


@pytest.fixture(autouse=True)
def _levels_back():
    level, flush = mr.get_logging_level(), mr.get_flush_level()
    yield
    mr.set_logging_level(level)
    mr.set_flush_level(flush)


def test_levels_are_rmms_and_switch_what_is_kept():
    assert [level.name for level in level_enum] == ["trace", "debug", "info", "warn", "error", "critical", "off"]
    assert mr.get_logging_level() == level_enum.off and mr.get_flush_level() == level_enum.warn
    mr.set_logging_level(level_enum.error)
    assert mr.get_logging_level() is level_enum.error
    assert not mr.should_log(level_enum.warn) and mr.should_log(level_enum.critical)
    assert not mr.should_log(level_enum.off)
    mr.set_flush_level(level_enum.trace)
    assert mr.get_flush_level() is level_enum.trace
    mr.flush_logger()


@pytest.mark.parametrize("level", ["INFO", 3, None, 1.5, level_enum.info.value])
def test_a_level_that_is_not_a_level_enum_is_a_type_error(level):
    for switch in (mr.set_logging_level, mr.set_flush_level, mr.should_log):
        with pytest.raises(TypeError, match="level: expected a devbuf.mr.level_enum"):
            switch(level)


def run(code, tmp_path):
    log = tmp_path / "debug.log"
    script = "import devbuf, devbuf.mr as mr\nfrom devbuf.mr import level_enum\n" + textwrap.dedent(code)
    done = subprocess.run([sys.executable, "-c", script], env={**__import__("os").environ, "DEVBUF_DEBUG_LOG_FILE": str(log)},
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout, log.read_text() if log.exists() else ""


def test_each_level_logs_what_the_guide_says(tmp_path):
    _, log = run("""
        mr.set_logging_level(level_enum.trace)
        pool = mr.PoolMemoryResource(mr.QueueMemoryResource("host"), initial_pool_size=0, maximum_pool_size="2MiB")
        mr.set_current_device_resource(pool, kind="host")
        buffer = devbuf.alloc(1000, "host", "host")
        try:
            devbuf.alloc(4 << 20, "host", "host")
        except MemoryError:
            pass
        del buffer
        pool.release()
        mr.reset_current_device_resource("host", "host")
    """, tmp_path)
    lines = log.splitlines()
    assert any("[debug" in l and "current host resource of host" in l for l in lines), log
    assert any("[trace" in l and "[A][PoolResource][host][host][1000B]" in l for l in lines), log
    assert any("[trace" in l and "[D][PoolResource][host][host][1000B]" in l for l in lines), log
    assert any("[debug" in l and "[A][PoolResource][host][host][Upstream" in l for l in lines), log
    assert any("[debug" in l and "[D][PoolResource][host][host][Upstream" in l for l in lines), log
    assert any("[error" in l and "FAILURE maximum pool size exceeded" in l for l in lines), log


def test_nothing_is_written_unless_asked(tmp_path):
    _, log = run("""
        pool = mr.PoolMemoryResource(mr.QueueMemoryResource("host"), initial_pool_size=0, maximum_pool_size="1MiB")
        devbuf.alloc(100, "host", "host", mr=pool)
        try:
            devbuf.alloc(2 << 20, "host", "host", mr=pool)
        except MemoryError:
            pass
        mr.set_logging_level(level_enum.error)
        mr.set_current_device_resource(pool, kind="host")
        devbuf.alloc(200, "host", "host", mr=pool)
        mr.set_logging_level(level_enum.debug)
        mr.set_current_device_resource(pool, kind="host")
    """, tmp_path)
    assert "FAILURE" not in log and "[trace" not in log, "off by default"
    assert log.count("current host resource") == 1, log


def test_lines_below_the_flush_level_wait_for_a_flush(tmp_path):
    out, log = run("""
        import os
        mr.set_logging_level(level_enum.debug)
        mr.set_current_device_resource(mr.QueueMemoryResource("host"), kind="host")
        print(os.path.getsize(os.environ["DEVBUF_DEBUG_LOG_FILE"]))
        mr.flush_logger()
        print(os.path.getsize(os.environ["DEVBUF_DEBUG_LOG_FILE"]))
        mr.set_flush_level(level_enum.debug)
        mr.set_current_device_resource(mr.QueueMemoryResource("host"), kind="host")
        print(os.path.getsize(os.environ["DEVBUF_DEBUG_LOG_FILE"]))
    """, tmp_path)
    before, flushed, at_once = map(int, out.split())
    assert before == 0 < flushed < at_once
    assert log.count("current host resource of host") == 2
