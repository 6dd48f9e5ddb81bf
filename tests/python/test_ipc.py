"""IPC handles: host memory shared with a `spawn`ed child (the child writes, the parent reads the
same bytes), backends that cannot share saying so, and bad handles as clean exceptions."""

import multiprocessing
import pickle

import numpy as np
import pytest

import devbuf
from conftest import backend_info

spawn = multiprocessing.get_context("spawn")


def child_writes(handle, value, done):
    import devbuf

    view = devbuf.open_ipc(handle)
    view.fill(value)
    done.put((view.nbytes, view.kind, view.owned))


def child_exports(queue, release):
    import devbuf

    buffer = devbuf.alloc(64, "host", device="host", ipc=True)
    buffer.fill(5)
    queue.put(buffer.ipc_handle())
    release.get()  # keep the buffer until the parent is done


def test_a_spawned_child_writes_what_the_parent_reads():
    buffer = devbuf.alloc(1 << 20, "host", device="host", ipc=True)
    assert buffer.owned and buffer.kind == "host"
    buffer.fill(1)
    part = buffer[4096 : 4096 + 1000]
    done = spawn.Queue()
    child = spawn.Process(target=child_writes, args=(part.ipc_handle(), 42, done))
    child.start()
    result = done.get(timeout=120)
    child.join(60)
    assert child.exitcode == 0 and result == (1000, "host", False)
    data = np.asarray(buffer)
    assert (data[4096:5096] == 42).all() and (data[:4096] == 1).all() and (data[5096:] == 1).all()


def test_handles_pickle_and_travel_as_bytes():
    buffer = devbuf.alloc(100, "host", device="host", ipc=True)
    handle = buffer.ipc_handle()
    assert (handle.device, handle.kind, handle.nbytes) == ("host", "host", 100)
    assert pickle.loads(pickle.dumps(handle)) == handle
    assert devbuf.IpcHandle.from_bytes(bytes(handle)) == handle
    view = devbuf.open_ipc(bytes(handle))
    view.fill(3)
    assert buffer.to_bytes() == b"\x03" * 100


def test_a_handle_opens_once_per_process_until_its_view_is_gone(collect):
    buffer = devbuf.alloc(100, "host", device="host", ipc=True)
    handle = buffer.ipc_handle()
    view = devbuf.open_ipc(handle)
    with pytest.raises(ValueError, match="already open"):
        devbuf.open_ipc(handle)
    del view
    collect()
    devbuf.open_ipc(handle)


def test_a_freed_buffer_or_an_exited_exporter_no_longer_opens(collect):
    buffer = devbuf.alloc(100, "host", device="host", ipc=True)
    handle = buffer.ipc_handle()
    del buffer
    collect()
    with pytest.raises(ValueError, match="freed"):
        devbuf.open_ipc(handle)

    queue, release = spawn.Queue(), spawn.Queue()
    child = spawn.Process(target=child_exports, args=(queue, release))
    child.start()
    handle = queue.get(timeout=120)
    devbuf.open_ipc(handle)  # opens while the exporter lives (the view is dropped right away)
    collect()
    release.put(None)
    child.join(60)
    with pytest.raises(ValueError, match="exited or freed"):
        devbuf.open_ipc(handle)


def test_only_buffers_allocated_for_sharing_have_handles():
    with pytest.raises(BufferError, match="ipc=True"):
        devbuf.alloc(10, "host", device="host").ipc_handle()


@pytest.mark.parametrize("backend", ["sycl", "opencl"])
def test_backends_that_cannot_share_say_why(backend):
    info = backend_info(backend)
    if info is None or not info.available:
        pytest.skip(f"{backend} unavailable")
    device = next(d for d in info.devices if d.usable)
    with pytest.raises(ValueError, match="between processes"):
        devbuf.alloc(64, device.kinds[0], device=device, ipc=True)


def test_garbled_and_foreign_handles_are_clean_errors():
    exporter = devbuf.alloc(10, "host", device="host", ipc=True)
    good = bytes(exporter.ipc_handle())
    for cut in range(len(good)):
        with pytest.raises(ValueError, match="ipc_handle|kind"):
            devbuf.IpcHandle.from_bytes(good[:cut])
    rng = np.random.default_rng(1)
    for _ in range(500):
        garbled = bytearray(good)
        garbled[rng.integers(0, len(good))] = rng.integers(0, 256)
        try:
            devbuf.open_ipc(bytes(garbled))
        except (ValueError, RuntimeError):
            pass
    with pytest.raises(TypeError, match="handle"):
        devbuf.open_ipc(42)
