"""devbuf.mr's binning, fixed-size, logging and failure-callback resources, with RMM's names and
constructors, and the replay of a log; on the host backend and on SYCL and OpenCL where they run
(the conformance kit reruns every check through each resource on every backend)."""

import csv
import io
import os
import subprocess
import sys
import weakref

import pytest

import devbuf
import devbuf.mr as mr
from conftest import backend_names, require_backend, usable_kinds


def queue_mr(device="host"):
    return mr.QueueMemoryResource(device)


def test_a_fixed_size_resource_hands_out_blocks_and_refuses_larger_requests():
    fixed = mr.FixedSizeMemoryResource(queue_mr(), block_size=1000, blocks_to_preallocate=4)
    assert fixed.block_size == 1024
    blocks = [devbuf.alloc(1000, "host", mr=fixed) for _ in range(4)]
    assert [b.ptr - blocks[0].ptr for b in blocks] == [0, 1024, 2048, 3072]
    assert fixed.get_upstream_bytes() == 4096
    freed = blocks[2].ptr
    del blocks[2]
    assert devbuf.alloc(10, "host", mr=fixed).ptr == freed, "a freed block is handed out again"
    assert fixed.get_upstream_bytes() == 4096
    with pytest.raises(MemoryError, match="serves up to 1024 bytes"):
        devbuf.alloc(1025, "host", mr=fixed)


def test_a_binning_resource_sends_sizes_to_bins_and_larger_upstream():
    stats = mr.StatisticsResourceAdaptor(queue_mr())
    binning = mr.BinningMemoryResource(stats, 8, 12)
    bins = binning.bin_mrs
    assert [type(b) for b in bins] == [mr.FixedSizeMemoryResource] * 5
    assert [b.block_size for b in bins] == [256, 512, 1024, 2048, 4096]
    assert all(b.upstream_mr is stats for b in bins)
    small = devbuf.alloc(300, "host", mr=binning)
    assert bins[1].get_upstream_bytes() == 512 * 128 and bins[0].get_upstream_bytes() == 0
    before = stats.allocation_counts["current_count"]
    large = devbuf.alloc(5000, "host", mr=binning)
    assert stats.allocation_counts["current_count"] == before + 1
    del large, small


def test_bins_are_added_with_rmms_add_bin_before_the_first_allocation():
    binning = mr.BinningMemoryResource(queue_mr())
    assert binning.bin_mrs == []
    mine = mr.FixedSizeMemoryResource(queue_mr(), block_size=200, blocks_to_preallocate=8)
    assert mine.block_size == 256, "rounded up to RMM's 256-byte alignment"
    binning.add_bin(128, mine)
    binning.add_bin(4096)
    assert binning.bin_mrs[0] is mine and binning.bin_mrs[1].block_size == 4096
    with pytest.raises(TypeError, match="bin_resource: expected a devbuf.mr.MemoryResource"):
        binning.add_bin(64, object())
    with pytest.raises(ValueError, match="blocks of 256 bytes cannot serve a bin of 512"):
        binning.add_bin(512, mine)
    with pytest.raises(ValueError, match="min_size_exponent: -2 is not an exponent"):
        mr.BinningMemoryResource(queue_mr(), -2, 4)
    devbuf.alloc(100, "host", mr=binning)
    assert mine.get_upstream_bytes() == 256 * 8
    with pytest.raises(ValueError, match="before the binning resource's first allocation"):
        binning.add_bin(1 << 20)


@pytest.mark.parametrize("backend", backend_names())
def test_binning_serves_every_kind_on_every_backend(backend):
    require_backend(backend)
    for device in devbuf.devices(backend):
        if not device.usable:
            continue
        binning = mr.BinningMemoryResource(queue_mr(device.selector), 8, 16)
        for kind in usable_kinds(device):
            buffers = [devbuf.alloc(n, kind, mr=binning) for n in (1, 300, 70000)]
            for i, buffer in enumerate(buffers):
                buffer.fill(i + 1)
                assert buffer.to_bytes() == bytes([i + 1]) * buffer.nbytes


@pytest.mark.parametrize("backend", backend_names())
def test_a_pool_serves_one_request_of_its_whole_maximum_in_every_kind(backend):
    # RMM's contract: a request of up to maximum_pool_size bytes fits an empty pool. Not a size
    # class of the pool's allocator (classes step by an eighth): a block rounded up to the
    # request's class would pass the maximum.
    require_backend(backend)
    maximum = (8 << 20) + 100 * 256
    for device in devbuf.devices(backend):
        if not device.usable:
            continue
        for kind in usable_kinds(device):
            for initial in (0, maximum):
                pool = mr.PoolMemoryResource(queue_mr(device.selector), initial, maximum, kind=kind)
                for _ in range(2):
                    whole = devbuf.alloc(maximum, kind, mr=pool)
                    assert pool.pool_size() == maximum, (device, kind, initial)
                    with pytest.raises(MemoryError):
                        devbuf.alloc(256, kind, mr=pool)  # the block holds that request alone
                    whole.fill(7)
                    assert whole.to_bytes() == b"\x07" * maximum
                    del whole
                    pool.release()
                    assert pool.pool_size() == 0


def test_a_failure_callback_spills_a_python_cache_on_a_limiting_resource():
    limited = mr.LimitingResourceAdaptor(queue_mr(), allocation_limit=4096)
    cache = {key: devbuf.alloc(1024, "host", mr=limited) for key in "abc"}
    asked = []

    def spill(nbytes):
        asked.append(nbytes)
        if not cache:
            return False
        cache.pop(next(iter(cache)))  # the oldest entry goes
        return True

    spilling = mr.FailureCallbackResourceAdaptor(limited, spill)
    assert spilling.callback is spill
    served = devbuf.alloc(3000, "host", mr=spilling)
    assert asked == [3000, 3000] and list(cache) == ["c"]
    assert limited.get_allocated_bytes() == 4024
    with pytest.raises(MemoryError, match="limit of 4096 bytes"):
        devbuf.alloc(3000, "host", mr=spilling)  # spills "c", then declines
    assert cache == {} and asked == [3000] * 4
    del served


def test_a_callback_holding_the_adaptors_buffers_is_collected(collect):
    limited = mr.LimitingResourceAdaptor(queue_mr(), allocation_limit=4096)
    cache = []

    def spill(nbytes):
        return bool(cache) and cache.pop() is not None

    spilling = mr.FailureCallbackResourceAdaptor(limited, spill)
    cache.extend(devbuf.alloc(1024, "host", mr=spilling) for _ in range(4))
    spill.adaptor = spilling  # the callback holds the adaptor too: a cycle through devbuf
    devbuf.alloc(1024, "host", mr=spilling)  # spills one of its own buffers
    gone = weakref.ref(spill)
    del spill, spilling, cache
    collect()
    assert gone() is None, "the callback, its cache and the adaptor were not collected"
    assert limited.get_allocated_bytes() == 0, "the cached buffers were not freed"


def test_what_the_failure_callback_raises_reaches_the_caller():
    limited = mr.LimitingResourceAdaptor(queue_mr(), allocation_limit=10)

    def broken(nbytes):
        raise KeyError(f"no cache for {nbytes}")

    with pytest.raises(KeyError, match="no cache for 100"):
        devbuf.alloc(100, "host", mr=mr.FailureCallbackResourceAdaptor(limited, broken))
    with pytest.raises(TypeError, match="callback: expected a callable"):
        mr.FailureCallbackResourceAdaptor(limited, 3)


def rows(text):
    return list(csv.DictReader(io.StringIO(text)))


def test_a_logging_adaptor_writes_rmms_columns_to_a_file(tmp_path):
    path = tmp_path / "log.csv"
    logging = mr.LoggingResourceAdaptor(queue_mr(), path)
    assert logging.get_file_name() == str(path)
    kept = devbuf.alloc(4000, "host", mr=logging)
    devbuf.alloc(100, "shared", mr=logging)
    logging.flush()
    log = rows(path.read_text())
    assert list(log[0]) == ["Thread", "Time", "Action", "Pointer", "Size", "Stream", "Kind", "Device"]
    assert [(r["Action"], r["Size"], r["Kind"]) for r in log] == [
        ("allocate", "4000", "host"),
        ("allocate", "100", "shared"),
        ("free", "100", "shared"),
    ]
    assert int(log[0]["Pointer"], 16) == kept.ptr and log[0]["Device"] == "host"
    assert int(log[0]["Thread"]) == __import__("threading").get_native_id()
    del kept


def test_a_logging_adaptor_writes_to_a_stream_and_logs_failures():
    stream = io.StringIO()
    limited = mr.LimitingResourceAdaptor(queue_mr(), allocation_limit=1000)
    logging = mr.LoggingResourceAdaptor(limited, stream)
    assert logging.get_file_name() is None
    with pytest.raises(MemoryError):
        devbuf.alloc(2000, "host", mr=logging)
    assert [(r["Action"], r["Size"]) for r in rows(stream.getvalue())] == [("allocate failure", "2000")]


def test_a_logging_adaptor_needs_a_log(monkeypatch, tmp_path):
    monkeypatch.delenv("DEVBUF_LOG_FILE", raising=False)
    with pytest.raises(ValueError, match="DEVBUF_LOG_FILE is not set"):
        mr.LoggingResourceAdaptor(queue_mr())
    with pytest.raises(TypeError, match="log_file_name: expected a path or a text stream"):
        mr.LoggingResourceAdaptor(queue_mr(), 42)
    monkeypatch.setenv("DEVBUF_LOG_FILE", str(tmp_path / "env.csv"))
    assert mr.LoggingResourceAdaptor(queue_mr()).get_file_name() == str(tmp_path / "env.csv")


def write_log(path):
    logging = mr.LoggingResourceAdaptor(queue_mr(), path)
    kept = [devbuf.alloc(n, "host", mr=logging) for n in (100, 200, 300)]
    del kept[1]
    logging.flush()
    return kept


def test_a_log_replays_against_any_resource(tmp_path):
    path = tmp_path / "log.csv"
    kept = write_log(path)
    stats = mr.StatisticsResourceAdaptor(mr.BinningMemoryResource(queue_mr(), 8, 12))
    report = mr.replay(path, stats, "host")
    assert report["allocations"] == 3 and report["frees"] == 1 and report["left_live"] == 2
    assert report["peak_bytes"] == 600 and report["failures"] == 0 and report["seconds"] > 0
    assert stats.allocation_counts["total_count"] == 3 and stats.allocation_counts["current_bytes"] == 0
    limited = mr.LimitingResourceAdaptor(queue_mr(), allocation_limit=250)
    refused = mr.replay(path, limited, "host")  # 200 bytes past 100, then 300 past 100
    assert (refused["failures"], refused["unmatched_frees"]) == (2, 1)
    path.write_text("Thread,Time,Action,Pointer,Size,Stream\n1,00:00:00.0,allocate,zz,8,0x0\n")
    with pytest.raises(ValueError, match='line 2: Pointer "zz" is not a hexadecimal address'):
        mr.replay(path, stats)
    with pytest.raises(OSError, match="cannot open"):
        mr.replay(tmp_path / "missing.csv", stats)
    del kept


def test_python_m_devbuf_replay_runs_a_log(tmp_path):
    path = tmp_path / "log.csv"
    kept = write_log(path)
    command = [sys.executable, "-m", "devbuf", "replay", str(path), "--device", "host", "--resource", "pool"]
    done = subprocess.run(command, capture_output=True, text=True, env=dict(os.environ), check=True)
    assert "against PoolMemoryResource on host" in done.stdout
    assert "allocations: 3" in done.stdout and "frees: 1" in done.stdout
    del kept
