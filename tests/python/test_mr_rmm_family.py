"""RMM's resource family and process-wide switches on devbuf (docs/guide/memory-resources.md,
"RMM's resource family"), on the host backend: every kind exists there, as memory of the host."""

import gc

import numpy as np
import pytest

import devbuf
import devbuf.mr as mr

DEVICE = "host"


@pytest.fixture(autouse=True)
def _reset():
    yield
    mr.reset_current_device_resource(DEVICE)
    mr._setup._hooks.clear()
    mr._setup._devices.clear()


@pytest.mark.parametrize("cls, kind", [(mr.DeviceMemoryResource, "device"), (mr.ManagedMemoryResource, "shared"),
                                       (mr.PinnedHostMemoryResource, "host")])
def test_a_resource_of_one_kind_serves_its_kind_whatever_is_asked(cls, kind):
    resource = cls(DEVICE)
    assert resource.upstream_mr is None
    for asked in ("device", "shared", "host"):
        assert devbuf.alloc(64, asked, device=DEVICE, mr=resource).kind == kind
    mr.set_current_device_resource(resource)
    assert devbuf.alloc(64, "shared", device=DEVICE).kind == kind       # as the current resource
    pool = mr.PoolMemoryResource(resource, "64KiB")
    assert devbuf.alloc(64, "device", device=DEVICE, mr=pool).kind == kind
    ptr = resource.allocate(100)                                        # kind left out: its own
    resource.deallocate(ptr, 100)
    other = next(k for k in ("device", "shared", "host") if k != kind)
    with pytest.raises(ValueError, match=f"kind: {cls.__name__} serves {kind} memory, not {other}"):
        resource.allocate(100, other)


def test_a_binning_resource_reports_the_kind_of_the_bin_it_routes_to():
    binning = mr.BinningMemoryResource(mr.ManagedMemoryResource(DEVICE))
    binning.add_bin(1 << 20, mr.DeviceMemoryResource(DEVICE))
    assert devbuf.alloc(1024, "host", device=DEVICE, mr=binning).kind == "device"
    assert devbuf.alloc(2 << 20, "host", device=DEVICE, mr=binning).kind == "shared"


def test_sizes_as_strings_rmm_parse_bytes():
    assert mr.parse_bytes("4MiB") == 4 << 20
    assert mr.parse_bytes("2kib") == 2048 and mr.parse_bytes("1.5 kB") == 1500 and mr.parse_bytes(7) == 7
    for bad in ["2k", "-1", "1e6", "kib"]:
        with pytest.raises(ValueError, match="Could not parse"):
            mr.parse_bytes(bad)
    pool = mr.PoolMemoryResource(mr.QueueMemoryResource(DEVICE), initial_pool_size="1MiB", maximum_pool_size="8MiB")
    assert (pool.initial_pool_size, pool.maximum_pool_size) == (1 << 20, 8 << 20)
    with pytest.raises(ValueError, match="maximum_pool_size: Could not parse"):
        mr.PoolMemoryResource(mr.QueueMemoryResource(DEVICE), maximum_pool_size="8k")


def test_reinitialize_runs_hooks_last_first_and_sets_device_memory():
    calls = []

    def hook(x):
        calls.append(x)

    mr.register_reinitialize_hook(hook, 1)
    mr.register_reinitialize_hook(lambda: calls.append(2))
    mr.register_reinitialize_hook(hook, 3)
    mr.reinitialize(pool_allocator=True, managed_memory=True, initial_pool_size="64KiB", devices=DEVICE)
    assert calls == [3, 2, 1]
    current = mr.get_current_device_resource(DEVICE, "device")
    assert isinstance(current, mr.PoolMemoryResource) and current.initial_pool_size == 64 << 10
    assert isinstance(current.upstream_mr, mr.ManagedMemoryResource)
    assert devbuf.alloc(16, "device", device=DEVICE).kind == "shared"
    assert type(mr.get_current_device_resource(DEVICE, "host")) is mr.QueueMemoryResource  # untouched
    assert mr.is_initialized()
    mr.unregister_reinitialize_hook(hook)
    calls.clear()
    mr.reinitialize(devices=DEVICE)
    assert calls == [2]
    assert type(mr.get_current_device_resource(DEVICE, "device")) is mr.DeviceMemoryResource


def test_a_bad_reinitialize_changes_nothing():
    before = mr.get_current_device_resource(DEVICE, "device")
    with pytest.raises(ValueError, match="initial_pool_size"):
        mr.reinitialize(pool_allocator=True, initial_pool_size="2k", devices=DEVICE)
    assert type(mr.get_current_device_resource(DEVICE, "device")) is type(before)


def test_logging_switches_write_one_file_per_device(tmp_path):
    base = tmp_path / "log.csv"
    index = devbuf.Device(DEVICE).index
    mr.reinitialize(logging=True, log_file_name=str(base), devices=DEVICE)
    name = str(tmp_path / f"log.dev{index}.csv")
    assert mr.get_log_filenames() == {index: name}
    devbuf.alloc(64, "device", device=DEVICE)
    mr.flush_logs()
    assert "Action,Pointer,Size,Stream" in open(name).read()
    mr.disable_logging()
    assert not isinstance(mr.get_current_device_resource(DEVICE, "device"), mr.LoggingResourceAdaptor)
    assert mr.get_log_filenames() == {index: None}
    mr.enable_logging(str(base))
    assert isinstance(mr.get_current_device_resource(DEVICE, "device"), mr.LoggingResourceAdaptor)
    mr.disable_logging()


def test_async_resource_gives_blocks_back_over_its_release_threshold():
    kept = mr.AsyncMemoryResource(DEVICE, initial_pool_size="64KiB")
    released = mr.AsyncMemoryResource(DEVICE, initial_pool_size=0, release_threshold="64KiB")
    assert kept.release_threshold is None and released.release_threshold == 64 << 10
    for resource in (kept, released):
        buffer = devbuf.alloc(1 << 20, "shared", device=DEVICE, mr=resource)
        assert buffer.kind == "device" and resource.pool_size() >= 1 << 20
        del buffer
        gc.collect()
    assert kept.pool_size() >= 1 << 20        # no threshold: kept until release()
    assert released.pool_size() <= 64 << 10   # over the threshold: given back on the free
    kept.release()
    assert kept.pool_size() == 0
    assert devbuf.alloc(8, device=DEVICE, mr=mr.AsyncMemoryResource(DEVICE, kind="shared")).kind == "shared"
    with pytest.raises(ValueError, match="enable_ipc"):
        mr.AsyncMemoryResource(DEVICE, enable_ipc=True)


def test_arena_is_the_pool_and_callbacks_are_a_resource():
    arena = mr.ArenaMemoryResource(mr.DeviceMemoryResource(DEVICE), arena_size="1MiB")
    assert isinstance(arena, mr.PoolMemoryResource) and arena.initial_pool_size == 1 << 20
    base = mr.DeviceMemoryResource(DEVICE)
    calls = []

    def allocate(nbytes, stream):
        calls.append(("allocate", nbytes))
        return base.allocate(nbytes, stream)

    def deallocate(ptr, nbytes, stream):
        calls.append(("deallocate", nbytes))
        base.deallocate(ptr, nbytes, stream)

    callback = mr.CallbackMemoryResource(allocate, deallocate, DEVICE)
    buffer = devbuf.alloc(256, "device", device=DEVICE, mr=callback)
    del buffer
    gc.collect()
    assert calls == [("allocate", 256), ("deallocate", 256)]


@pytest.mark.parametrize("raised, caught", [
    (MemoryError, MemoryError), (RuntimeError, RuntimeError), (ValueError, RuntimeError),
    (Exception, RuntimeError), (BaseException, RuntimeError), (KeyboardInterrupt, KeyboardInterrupt),
])
def test_a_callback_resources_failure_is_a_memory_or_runtime_error(raised, caught):
    # RMM's contract for its callback resource; the interpreter's own exits pass as raised.
    def allocate(nbytes, stream):
        raise raised("no memory for you")

    callback = mr.CallbackMemoryResource(allocate, lambda *_: None, DEVICE)
    with pytest.raises(caught, match="no memory for you") as err:
        devbuf.alloc(256, "device", device=DEVICE, mr=callback)
    assert type(err.value) is caught
    assert type(err.value.__cause__ or err.value) is raised


def test_buffer_from_host_and_copies_into_its_start():
    buffer = devbuf.Buffer.from_host(b"abc", "device", DEVICE)
    assert buffer.kind == "device" and buffer.tobytes() == b"abc"
    target = devbuf.Buffer.from_host(np.zeros(6, "u1"), "device", DEVICE)
    target.copy_from_host(bytearray(b"xy"))
    target.copy_from_device(buffer[1:])
    assert target.tobytes() == b"bc\0\0\0\0"
    with pytest.raises(TypeError, match="from_host: expected a bytes-like object"):
        devbuf.Buffer.from_host("abc", "device", DEVICE)
    with pytest.raises(ValueError, match='format "B"'):
        devbuf.Buffer.from_host(np.ones(2, "u2"), "device", DEVICE)
    with pytest.raises(ValueError, match="contiguous"):
        devbuf.Buffer.from_host(np.ones(4, "u1")[::2], "device", DEVICE)
    with pytest.raises(ValueError, match="more than the buffer's 6"):
        target.copy_from_host(b"1234567")
    assert devbuf.Buffer.from_host(b"", "device", DEVICE).nbytes == 0


def test_from_host_allocates_from_mr_and_copies_on_stream():
    # RMM's to_device takes both: `mr` allocates, `stream` runs the copy (it was refused).
    stats = mr.StatisticsResourceAdaptor(mr.QueueMemoryResource(DEVICE))
    stream = devbuf.Device(DEVICE).create_stream()
    buffer = devbuf.Buffer.from_host(b"abcd", "device", DEVICE, stream=stream, mr=stats)
    assert buffer.tobytes() == b"abcd" and stats.allocation_counts.total_bytes == 4


def test_copy_from_device_copies_the_bytes_of_any_contiguous_array():
    # RMM's copy_from_device copies a CAI object's bytes, whatever its shape and dtype (a 2-d
    # float32 array was refused: it was copied element for element into a byte view).
    source = devbuf.asarray(np.arange(6, dtype="float32").reshape(2, 3))
    target = devbuf.alloc(32, "device", DEVICE)
    target.copy_from_device(source)
    assert target.tobytes()[:24] == np.arange(6, dtype="float32").tobytes()
    with pytest.raises(ValueError, match="not C-contiguous"):
        target.copy_from_device(source.T)


def test_statistics_counters_are_statistics_objects():
    stats = mr.StatisticsResourceAdaptor(mr.QueueMemoryResource(DEVICE))
    kept = devbuf.alloc(10, "host", device=DEVICE, mr=stats)
    counts = stats.allocation_counts
    assert isinstance(counts, mr.statistics.Statistics)
    assert counts.current_bytes == counts["current_bytes"] == 10
    assert isinstance(stats.push_counters(), mr.statistics.Statistics)
    assert stats.pop_counters().total_count == 0
    assert "No data" in mr.statistics.ProfilerRecords().report()
    del kept


def test_the_adaptors_are_resource_adaptors_and_the_rest_are_not():
    # Every class of devbuf.mr made of an upstream_mr, and only those (RMM's UpstreamResourceAdaptor).
    import inspect

    for name in mr.__all__:
        cls = getattr(mr, name)
        if not (isinstance(cls, type) and issubclass(cls, mr.MemoryResource)) or cls is mr.MemoryResource:
            continue
        first = next(iter(inspect.signature(cls).parameters))
        assert issubclass(cls, mr.ResourceAdaptor) == (first == "upstream_mr"), name
    pool = mr.PoolMemoryResource(mr.PinnedHostMemoryResource(DEVICE), "64KiB")
    assert isinstance(pool, mr.ResourceAdaptor) and isinstance(pool, mr.MemoryResource)
    assert not isinstance(pool.upstream_mr, mr.ResourceAdaptor)
