"""Random and mutated IPC handles against `devbuf.open_ipc`: each input opens a view of memory the
exporter shared, with exactly the bytes it holds there and the handle's read-only flag, or raises a
clean ValueError/TypeError (RuntimeError for a runtime fault, counted apart) — never a crash,
never another exception, never a view of anything devbuf did not export. Seeded, so a failure is
replayed by its seed and index.

The exporter is a child process (CUDA opens a handle only in another process than the
exporter's): it shares host memory (a writable allocation, and one exported read-only, which seals
it) and, where CUDA is usable, device memory, each filled with its own pattern; it also holds a
regular file and a memfd that is not devbuf's open, to be named by forged handles. It prints what
it made and waits until this process is done.

Classes of input (chosen uniformly):
- "random": random bytes, or random bytes behind the handle's marker; objects that are no handle;
- "bytes": a genuine handle with 1 to 8 of its bytes overwritten, or cut short;
- "fields": a genuine handle with one field changed: size, offset or len (around the truth and far
  past it), the read-only flag, device, kind, or the payload (its length, or one of its bytes);
- "forged": a host handle naming something else: another descriptor of the exporter (its regular
  file, its other memfd, a pipe), one of this process's files, the other allocation, another pid;
- "valid": a genuine handle, which must open with the exporter's bytes.

Usage: python fuzz_ipc.py COUNT [SEED]   (ci/soak runs 10^6; with the CUDA test driver on the
loader path, CUDA handles are fuzzed too)
"""

import functools
import json
import os
import random
import struct
import subprocess
import sys
import tempfile
import time

import devbuf
from ipc_craft import MAGIC, Fields, decode_host_payload, host_payload

CLEAN_ERRORS = (ValueError, TypeError)
HOST_BYTES = 1 << 16
READ_ONLY_BYTES = 4096
CUDA_BYTES = 1 << 16


@functools.cache
def pattern(name, size):
    step = {"host": 1, "read-only": 7, "cuda": 3}[name]
    return bytes((i * step + len(name)) % 251 for i in range(size))


@functools.cache
def contents(name, size):
    """The bytes of a `size`-byte shared allocation: its pattern, and for CUDA the zeros devbuf
    pads a shareable allocation with up to CUDA IPC's 2 MiB block."""
    if name == "cuda":
        return pattern(name, CUDA_BYTES) + bytes(size - CUDA_BYTES)
    return pattern(name, size)


def cuda_usable():
    return any(b.name == "cuda" and b.available for b in devbuf.backends())


def export():
    """The exporter's side: shares its memory, prints one JSON line, waits for stdin to close."""
    shared = {"host": devbuf.alloc(HOST_BYTES, "host", device="host", ipc=True)}
    shared["read-only"] = devbuf.alloc(READ_ONLY_BYTES, "host", device="host", ipc=True)
    if cuda_usable():
        shared["cuda"] = devbuf.alloc(CUDA_BYTES, "device", device="cuda", ipc=True)
    for name, buffer in shared.items():
        buffer.copy_from(pattern(name, buffer.nbytes))
    handles = []
    for name, buffer in shared.items():
        n = buffer.nbytes
        for start, stop in ((0, n), (4096 % n, min(n, 8192)), (n - 1, n), (17, 17)):
            readonly = name == "read-only" or (name == "cuda" and start == n - 1)
            handle = buffer[start:stop].ipc_handle(readonly=readonly)
            handles.append((name, bytes(handle).hex()))
    victim = tempfile.TemporaryFile()
    victim.write(b"V" * READ_ONLY_BYTES)
    victim.flush()
    other = os.memfd_create("devbuf-ipc", 0)
    os.ftruncate(other, READ_ONLY_BYTES)
    reading, writing = os.pipe()
    descriptors = [victim.fileno(), other, reading, writing, 0, 1, 2]
    identities = [(fd, os.fstat(fd).st_dev, os.fstat(fd).st_ino) for fd in descriptors]
    print(json.dumps({"pid": os.getpid(), "handles": handles, "descriptors": identities}), flush=True)
    sys.stdin.read()
    return victim


class Exporter:
    def __enter__(self):
        self.process = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "--export"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"the exporter exited with {self.process.wait()}")
        made = json.loads(line)
        self.pid = made["pid"]
        self.handles = [(name, bytes.fromhex(raw)) for name, raw in made["handles"]]
        self.descriptors = made["descriptors"]
        # The allocation each genuine payload names, and its whole size.
        self.allocations = {}
        for name, raw in self.handles:
            fields = Fields.parse(raw)
            self.allocations[fields.payload] = (name, fields.size)
        self.host_files = {
            decode_host_payload(payload)[2:]: found for payload, found in self.allocations.items() if found[0] != "cuda"
        }
        self.cuda_size = next((size for name, size in self.allocations.values() if name == "cuda"), 0)
        return self

    def __exit__(self, *_):
        self.process.stdin.close()
        self.process.wait(60)


def around(rng, truth):
    return rng.choice([0, 1, truth - 1, truth, truth + 1, 2 * truth, 1 << 30, 2**63 - 1, 2**64 - 1, rng.randrange(2**64)]) % 2**64


def random_case(rng, exporter):
    roll = rng.random()
    if roll < 0.1:
        return rng.choice([None, 42, "handle", bytearray(b"devbuf"), 3.5, [MAGIC]])
    body = bytes(rng.randrange(256) for _ in range(rng.randrange(0, 120)))
    return MAGIC + body if roll < 0.7 else body


def bytes_case(rng, exporter):
    _, raw = rng.choice(exporter.handles)
    raw = bytearray(raw)
    if rng.random() < 0.2:
        return bytes(raw[: rng.randrange(len(raw))])
    for _ in range(rng.randint(1, 8)):
        raw[rng.randrange(len(raw))] = rng.randrange(256)
    return bytes(raw)


def fields_case(rng, exporter):
    _, raw = rng.choice(exporter.handles)
    fields = Fields.parse(raw)
    which = rng.randrange(8)
    if which == 0:
        return fields.but(size=around(rng, fields.size)).encode()
    if which == 1:
        return fields.but(offset=around(rng, fields.offset)).encode()
    if which == 2:
        return fields.but(len=around(rng, fields.len)).encode()
    if which == 3:
        return fields.but(readonly=rng.choice([0, 1, 2, 255])).encode()
    if which == 4:
        devices = [b"host", b"cuda", b"cuda:0", b"cuda:1", b"cuda:9", b"sycl", b"opencl:0:0", b"", b"host:0", b"\xff"]
        return fields.but(device=rng.choice(devices)).encode()
    if which == 5:
        return fields.but(kind=rng.choice([b"host", b"device", b"shared", b"unknown", b"", b"pinned"])).encode()
    payload = bytearray(fields.payload)
    if which == 6:
        payload = payload[: rng.randrange(len(payload))] if rng.random() < 0.5 else payload + bytes(rng.randrange(1, 48))
    else:
        payload[rng.randrange(len(payload))] = rng.randrange(256)
    return fields.but(payload=bytes(payload)).encode()


def forged_case(rng, exporter):
    name, raw = rng.choice([(n, r) for n, r in exporter.handles if n != "cuda"])
    fields = Fields.parse(raw)
    pid, fd, dev, ino = decode_host_payload(fields.payload)
    roll = rng.randrange(4)
    if roll == 0:  # another descriptor of the exporter, named by its true identity
        fd, dev, ino = rng.choice(exporter.descriptors)
    elif roll == 1:  # the other allocation's file with this one's identity, or the reverse
        others = [decode_host_payload(p) for p in exporter.allocations if len(p) == 24 and p != fields.payload]
        _, fd, other_dev, other_ino = rng.choice(others)
        if rng.random() < 0.5:
            dev, ino = other_dev, other_ino
    elif roll == 2:  # one of this process's own descriptors (not devbuf memory it shares itself)
        fd = rng.choice([0, 1, 2, *range(3, 12)])
        pid = os.getpid()
        try:
            if not os.readlink(f"/proc/self/fd/{fd}").startswith("/memfd:devbuf-ipc"):
                st = os.fstat(fd)
                dev, ino = st.st_dev, st.st_ino
        except OSError:
            pass
    else:  # another pid: this one, our parent, pid 1, or any
        pid = rng.choice([os.getpid(), os.getppid(), 1, rng.randrange(2, 2**22)])
    fields = fields.but(payload=host_payload(pid, fd, dev, ino))
    if rng.random() < 0.3:
        fields = fields.but(readonly=1 - fields.readonly)
    return fields.encode()


def valid_case(rng, exporter):
    return rng.choice(exporter.handles)[1]


CASES = [random_case, bytes_case, fields_case, forged_case, valid_case]


def check_opened(view, handle, exporter, where):
    """An opened view must be memory the exporter shared, with its bytes and the handle's flag."""
    fields = Fields.parse(handle)
    found = exporter.allocations.get(fields.payload)
    if found is None and len(fields.payload) == 24:
        # Another pid or descriptor may name the same file (a thread of the exporter, a copy of
        # the descriptor): the file's identity says which allocation it is.
        found = exporter.host_files.get(decode_host_payload(fields.payload)[2:])
    if found is None and fields.device.startswith(b"cuda") and exporter.cuda_size:
        # The driver vouches for its own handle's bytes (the CUDA test driver ignores some of
        # them): whatever it opened must be the one allocation the exporter shared.
        found = ("cuda", exporter.cuda_size)
    assert found is not None, f"{where}: opened memory devbuf did not export: {fields}"
    name, size = found
    assert fields.size <= size and fields.offset + fields.len <= fields.size, f"{where}: {fields}"
    assert view.nbytes == fields.len, where
    assert view.readonly == bool(fields.readonly), f"{where}: read-only {view.readonly}, handle says {fields.readonly}"
    if name == "read-only":
        assert view.readonly, f"{where}: the sealed allocation opened writable"
    expected = contents(name, size)[fields.offset : fields.offset + fields.len]
    assert view.to_bytes() == expected, f"{where}: the view reads other bytes than the exporter's"


def open_one(handle, exporter, where, refusable):
    """True when `handle` opened (and read back right), False when cleanly refused,
    "RuntimeError" for a refusal by runtime fault."""
    try:
        view = devbuf.open_ipc(handle)
    except (*CLEAN_ERRORS, RuntimeError) as refused:
        assert refusable, f"{where}: a genuine handle was refused: {refused!r}"
        return "RuntimeError" if isinstance(refused, RuntimeError) else False
    except Exception as other:  # noqa: BLE001 - any other exception class is the failure
        raise AssertionError(f"{where}: unclean {other!r}") from other
    check_opened(view, handle, exporter, where)
    return True


def run(count, seed=0, report_every=0):
    """Feeds `count` inputs; returns {class: (opened, refused)}, with refusals by runtime fault
    under "RuntimeError". Raises AssertionError on a wrong open or an unclean exception, naming
    the seed and index to replay."""
    rng = random.Random(seed)
    tally = {case.__name__.removesuffix("_case"): [0, 0] for case in CASES}
    tally["RuntimeError"] = [0, 0]
    started = time.monotonic()
    with Exporter() as exporter:
        for index in range(count):
            case = rng.choice(CASES)
            name = case.__name__.removesuffix("_case")
            handle = case(rng, exporter)
            where = f"seed {seed} input {index} ({name})"
            opened = open_one(handle, exporter, where, refusable=name != "valid")
            if opened == "RuntimeError":
                tally["RuntimeError"][1] += 1
            else:
                tally[name][0 if opened else 1] += 1
            if report_every and (index + 1) % report_every == 0:
                rate = (index + 1) / (time.monotonic() - started)
                print(f"{index + 1} inputs, {rate:,.0f}/s, {tally}", flush=True)
    return {name: tuple(counts) for name, counts in tally.items()}


if __name__ == "__main__":
    if sys.argv[1:] == ["--export"]:
        export()
        sys.exit(0)
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
    seed = int(sys.argv[2]) if len(sys.argv) > 2 else 0
    result = run(count, seed, report_every=max(count // 10, 1))
    kinds = "host and CUDA" if cuda_usable() else "host"
    print(f"fuzz_ipc: {count} inputs ({kinds} handles), seed {seed}, no crash: {result}")
