"""IPC handles: host memory shared with a `spawn`ed child (the child writes, the parent reads the
same bytes), backends that cannot share saying so, and bad handles as clean exceptions: a handle is
untrusted, it opens only memory devbuf exported (a sealed memfd of its own), never more bytes than
exist, and read-only stays read-only."""

import multiprocessing
import os
import pickle

import numpy as np
import pytest

import devbuf
from conftest import backend_info, require_backend
from ipc_craft import Fields, decode_host_payload, host_payload

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


# Untrusted handles: a handle names memory in another process, and anyone can write one.


def forged(handle, **payload_fields):
    """`handle` with its host payload's fields replaced (pid, fd, dev, ino)."""
    fields = Fields.parse(bytes(handle))
    pid, fd, dev, ino = decode_host_payload(fields.payload)
    values = dict(pid=pid, fd=fd, dev=dev, ino=ino) | payload_fields
    return fields.but(payload=host_payload(**values))


def test_a_forged_handle_naming_another_file_is_refused_and_the_file_untouched(tmp_path):
    # Forged from another open descriptor of a process of the same user, it mapped the file
    # read-write, and devbuf's fill changed the file on disk.
    genuine = devbuf.alloc(4096, "host", device="host", ipc=True).ipc_handle()
    path = tmp_path / "victim"
    path.write_bytes(b"A" * 4096)
    with open(path, "r+b") as victim:
        st = os.fstat(victim.fileno())
        fields = forged(genuine, pid=os.getpid(), fd=victim.fileno(), dev=st.st_dev, ino=st.st_ino)
        for readonly in (0, 1):
            with pytest.raises(ValueError, match="^ipc_handle: .* not devbuf's shared memory"):
                devbuf.open_ipc(fields.but(readonly=readonly).encode())
    assert path.read_bytes() == b"A" * 4096
    # Nor a memfd someone else made: another name, or devbuf's name without its seals.
    for name, flags in (("other", 0), ("devbuf-ipc", 0), ("devbuf-ipc", os.MFD_ALLOW_SEALING)):
        fd = os.memfd_create(name, flags)
        try:
            os.ftruncate(fd, 4096)
            st = os.fstat(fd)
            with pytest.raises(ValueError, match="devbuf's"):
                devbuf.open_ipc(forged(genuine, pid=os.getpid(), fd=fd, dev=st.st_dev, ino=st.st_ino).encode())
        finally:
            os.close(fd)


def child_opens_and_shrinks(handle, done):
    import devbuf

    view = devbuf.open_ipc(handle)
    pid, fd, _, _ = decode_host_payload(Fields.parse(bytes(handle)).payload)
    outcomes = []
    with open(f"/proc/{pid}/fd/{fd}", "r+b") as exported:
        for size in (1 << 20, 4096, 0):  # ending small: a read past the end is a SIGBUS
            try:
                os.ftruncate(exported.fileno(), size)
                outcomes.append("resized")
            except PermissionError:
                outcomes.append("refused")
    done.put((outcomes, view.to_bytes()[:4], view.to_bytes()[-4:]))  # a read after: no SIGBUS


def test_no_process_can_resize_shared_memory_under_a_reader():
    # A shrink by any process of the user after an importer opened the memfd killed the importer
    # with SIGBUS on its next read: the file is sealed at its size.
    buffer = devbuf.alloc(1 << 16, "host", device="host", ipc=True)
    buffer.fill(6)
    done = spawn.Queue()
    child = spawn.Process(target=child_opens_and_shrinks, args=(buffer.ipc_handle(), done))
    child.start()
    child.join(120)
    assert child.exitcode == 0, f"the reader died: exit code {child.exitcode}"
    assert done.get(timeout=10) == (["refused"] * 3, b"\x06" * 4, b"\x06" * 4)


def child_opens_read_only(handle, done):
    import mmap

    import devbuf

    view = devbuf.open_ipc(handle)
    outcomes = [view.readonly, np.asarray(view).flags.writeable, view.to_bytes()[:2]]
    try:
        view.fill(1)
    except ValueError as err:
        outcomes.append(str(err))
    del view
    # The flag flipped in the handle's bytes: refused, not opened writable.
    flipped = Fields.parse(bytes(handle)).but(readonly=0).encode()
    try:
        devbuf.open_ipc(flipped)
    except ValueError as err:
        outcomes.append(str(err))
    # And without devbuf: the kernel maps the file for reading only.
    pid, fd, _, _ = decode_host_payload(Fields.parse(flipped).payload)
    with open(f"/proc/{pid}/fd/{fd}", "r+b") as exported:
        try:
            mmap.mmap(exported.fileno(), 4096, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ | mmap.PROT_WRITE)
            outcomes.append("mapped writable")
        except PermissionError:
            outcomes.append("not writable")
    done.put(outcomes)


def test_a_read_only_handle_opens_read_only_in_another_process():
    buffer = devbuf.alloc(4096, "host", device="host", ipc=True)
    buffer.fill(8)
    handle = buffer[:100].ipc_handle(readonly=True)
    assert handle.readonly and "read-only" in repr(handle)
    assert devbuf.IpcHandle.from_bytes(bytes(handle)) == handle
    done = spawn.Queue()
    child = spawn.Process(target=child_opens_read_only, args=(handle, done))
    child.start()
    child.join(120)
    assert child.exitcode == 0
    readonly, writeable, head, fill, flipped, mapped = done.get(timeout=10)
    assert (readonly, writeable, head) == (True, False, b"\x08\x08")
    assert fill == "fill: this buffer is read-only: its memory is mapped for reading only (an IPC handle opened read-only)"
    assert flipped.startswith("ipc_handle: the exporter shared this allocation read-only")
    assert mapped == "not writable"
    # The exporter keeps writing its own buffer.
    buffer.fill(9)
    assert buffer.to_bytes() == b"\x09" * 4096


def test_fuzzed_handles_never_crash():
    """The CI profile of the IPC handle fuzzer (ci/soak runs 10^6 inputs): random and mutated
    handles of host memory, and of CUDA memory where CUDA is usable, each opening the exporter's
    bytes or raising a clean error."""
    from fuzz_ipc import run

    tally = run(20_000, seed=20)
    classes = ("random", "bytes", "fields", "forged")
    assert all(tally[name][1] > 0 for name in classes), tally
    assert tally["valid"][0] > 0, tally


def child_opens_cuda_claims(handle, done):
    import devbuf

    outcomes = []
    fields = Fields.parse(bytes(handle))
    for size in (1 << 30, fields.size + 1):
        claim = fields.but(size=size, len=size - fields.offset)
        try:
            view = devbuf.open_ipc(claim.encode())
            view[8192:8200].fill(1)  # past the 4 KiB shared: a crash, if it opened
            outcomes.append("opened")
        except ValueError as refused:
            outcomes.append(str(refused))
    view = devbuf.open_ipc(handle)
    outcomes.append((view.nbytes, view.to_bytes()[:2]))
    done.put(outcomes)


def test_a_cuda_handle_claiming_more_than_its_allocation_is_refused():
    # A real 4 KiB handle whose size field was rewritten to 1 GiB opened as a 1 GiB buffer, and a
    # fill past 4 KiB segfaulted. CUDA opens a handle only in another process: the child opens.
    require_backend("cuda")
    buffer = devbuf.alloc(4096, "device", device="cuda", ipc=True)
    buffer.fill(4)
    done = spawn.Queue()
    child = spawn.Process(target=child_opens_cuda_claims, args=(buffer.ipc_handle(), done))
    child.start()
    child.join(120)
    assert child.exitcode == 0, f"the importer died: exit code {child.exitcode}"
    huge, one_more, genuine = done.get(timeout=10)
    # The allocation behind a 4 KiB shareable buffer is one whole 2 MiB IPC block (CUDA IPC shares
    # whole blocks): the handle's size says so, and a claim past it is refused.
    block = 2 << 20
    assert huge == f"ipc_handle: the handle claims 1073741824 bytes, but the memory it opens holds {block}"
    assert one_more.endswith(f"claims {block + 1} bytes, but the memory it opens holds {block}")
    assert genuine == (4096, b"\x04\x04")


IMPORTER_BY_UUID = """
import sys
import devbuf

handle = bytes.fromhex(sys.argv[1])
try:
    view = devbuf.open_ipc(handle)
except ValueError as refused:
    print("refused:", refused)
else:
    assert view.device.selector == "cuda:0", view.device
    assert view.to_bytes() == b"\\x05" * 4096
    view.fill(6)
    view.synchronize()
    print("opened")
"""


def test_a_cuda_handle_names_its_device_by_uuid_whatever_the_importer_s_ordinals():
    # CUDA ordinals are per process: with CUDA_VISIBLE_DEVICES=1,0 the exporter's cuda:1 is the
    # importer's cuda:0. The handle names the device by UUID, so it opens on the same device; an
    # importer that sees no device with that UUID is refused, naming it.
    import subprocess
    import sys

    info = require_backend("cuda")
    if len(info.devices) < 2:
        pytest.skip("needs two CUDA devices")
    buffer = devbuf.alloc(4096, "device", device="cuda:1", ipc=True)
    buffer.fill(5)
    handle = buffer.ipc_handle()
    assert handle.device.startswith("cuda:GPU-")
    assert devbuf.Device(handle.device) == devbuf.Device("cuda:1")
    assert handle.device != devbuf.alloc(64, "device", device="cuda:0", ipc=True).ipc_handle().device

    def importer(visible):
        env = dict(os.environ, CUDA_VISIBLE_DEVICES=visible)
        run = subprocess.run(
            [sys.executable, "-c", IMPORTER_BY_UUID, bytes(handle).hex()],
            env=env, capture_output=True, text=True, timeout=120,
        )
        assert run.returncode == 0, run.stderr
        return run.stdout.strip()

    assert importer("1,0") == "opened"
    assert buffer.to_bytes() == b"\x06" * 4096
    refused = importer("0")
    uuid = handle.device.removeprefix("cuda:")
    assert refused.startswith("refused:") and f"has UUID {uuid}" in refused, refused
