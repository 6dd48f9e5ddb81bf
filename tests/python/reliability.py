"""Stress and soak runs over every usable device (`ci/test` runs short profiles through
test_reliability.py, `ci/soak` the long ones):

- stress: 8 threads share a set of buffers on one device and, until a deadline, allocate, fill
  (blocking or not), copy between shared buffers, export (DLPack to NumPy, SUAI/CAI/DLPack back into
  devbuf) and free, checking every byte they read; foreign producers are counted when they are
  released, each exactly once, none early (their bytes are checked while held).
- soak: alloc/export/import/free cycles with the process's resident memory sampled; the growth per
  cycle after warm-up is the result.

Usage: python reliability.py stress SECONDS | soak CYCLES [BACKEND]   (every usable device, or
those of BACKEND)
"""

import random
import sys
import threading
import time
import weakref

import numpy as np

import devbuf

THREADS = 8
SIZE = 4096
# What each backend's memory leaves zero-copy through (OpenCL memory leaves through none: DLPack's
# kDLOpenCL tensors hold a cl_mem, not a pointer).
PROTOCOLS = {
    "host": ["dlpack"],
    "sycl": ["dlpack", "__sycl_usm_array_interface__"],
    "cuda": ["dlpack", "__cuda_array_interface__"],
}


def usable_devices():
    return [d for d in devbuf.devices() if d.usable]


def kinds_of(device):
    return [k for k in ("host", "device", "shared") if k in device.kinds]


class Producer:
    """A foreign producer re-exporting a devbuf array through its backend's dict protocol (or
    DLPack), so that devbuf's imports hold it through an owner."""

    def __init__(self, array, protocol):
        self.array = array
        if protocol == "dlpack":
            self.__dlpack__ = array.__dlpack__
            self.__dlpack_device__ = array.__dlpack_device__
        else:
            setattr(self, protocol, getattr(array, protocol))


class Counter:
    def __init__(self):
        self.lock = threading.Lock()
        self.made = 0
        self.released = 0

    def track(self, obj):
        with self.lock:
            self.made += 1
        weakref.finalize(obj, self.release)
        return obj

    def release(self):
        with self.lock:
            self.released += 1


def stress(device, seconds, seed=0):
    """Runs the stress mix on `device` for `seconds`; returns the number of operations checked.
    Raises AssertionError naming the operation and bytes on any wrong read."""
    kinds = kinds_of(device)
    shared = [devbuf.alloc(SIZE, kind, device=device.selector) for kind in kinds for _ in range(2)]
    values = [0] * len(shared)
    locks = [threading.Lock() for _ in shared]
    for buffer in shared:
        buffer.fill(0)
    counter = Counter()
    protocols = PROTOCOLS.get(device.backend, [])
    deadline = time.monotonic() + seconds
    done = [0] * THREADS
    failures = []

    def expect(data, byte, what):
        data = bytes(data)
        if data != bytes([byte]) * len(data):
            wrong = next(i for i, b in enumerate(data) if b != byte)
            raise AssertionError(f"{device.selector} {what}: byte {wrong} is {data[wrong]}, expected {byte}")

    def one(rng, step):
        op = rng.randrange(6)
        kind = rng.choice(kinds)
        byte = rng.randrange(1, 256)
        if op == 0:  # allocate, fill, read, free
            buffer = devbuf.alloc(rng.randrange(1, SIZE), kind, device=device.selector)
            buffer.fill(byte)
            expect(buffer.to_bytes(), byte, f"{kind} alloc+fill")
        elif op == 1:  # a non-blocking fill, then read back through devbuf
            buffer = devbuf.alloc(SIZE, kind, device=device.selector)
            buffer.fill(byte, blocking=False)
            expect(buffer.to_bytes(), byte, f"{kind} fill(blocking=False)")
        elif op == 2:  # rewrite a shared buffer
            target = rng.randrange(len(shared))
            with locks[target]:
                shared[target].fill(byte)
                values[target] = byte
                expect(shared[target].to_bytes(), byte, "shared buffer after fill")
        elif op == 3:  # copy one shared buffer into another (locks taken in index order)
            source, target = rng.sample(range(len(shared)), 2)
            first, second = sorted((source, target))
            with locks[first], locks[second]:
                shared[target].copy_from(shared[source])
                values[target] = values[source]
                expect(shared[target].to_bytes(), values[target], "shared buffer after copy")
        elif op == 4 and protocols:  # export through a protocol and import back, counted
            target = rng.randrange(len(shared))
            with locks[target]:
                producer = counter.track(Producer(shared[target].view("uint8"), rng.choice(protocols)))
                imported = devbuf.asarray(producer)
                expect(imported.to_bytes(), values[target], "protocol round trip")
                del producer, imported
        elif op == 5:  # to NumPy (zero-copy where the host can read it, else a copy) and back
            buffer = devbuf.alloc(SIZE, kind, device=device.selector)
            buffer.fill(byte)
            seen = np.from_dlpack(buffer, device="cpu")
            expect(seen.tobytes(), byte, f"{kind} to NumPy")
            expect(devbuf.asarray(seen).to_bytes(), byte, f"{kind} NumPy back to devbuf")

    def worker(index):
        rng = random.Random(seed * 100 + index)
        try:
            while time.monotonic() < deadline and not failures:
                one(rng, done[index])
                done[index] += 1
        except BaseException as err:  # noqa: BLE001 - reported to the caller
            failures.append(err)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if failures:
        raise failures[0]
    import gc

    gc.collect()
    assert counter.released == counter.made, f"{device.selector}: {counter.made} producers, {counter.released} released"
    return sum(done)


def rss_bytes():
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * 4096


def soak(device, cycles):
    """Alloc/export/import/free cycles on `device`; returns the resident-memory growth per cycle
    (bytes) over `cycles` after a warm-up of a tenth of them."""
    kinds = kinds_of(device)
    protocols = PROTOCOLS.get(device.backend, [])

    def run(n):
        for i in range(n):
            buffer = devbuf.alloc(1024 + i % 13, kinds[i % len(kinds)], device=device.selector)
            if protocols:
                devbuf.asarray(Producer(buffer.view("uint8"), protocols[i % len(protocols)]))
                buffer.__dlpack__(max_version=(1, 3))  # an unconsumed capsule
            buffer.fill(i % 256)
            del buffer

    run(max(cycles // 10, 1))
    before = rss_bytes()
    run(cycles)
    return (rss_bytes() - before) / cycles


if __name__ == "__main__":
    mode, amount = sys.argv[1], float(sys.argv[2])
    backend = sys.argv[3] if len(sys.argv) > 3 else None
    for device in usable_devices():
        if backend and device.backend != backend:
            continue
        if mode == "stress":
            ops = stress(device, amount)
            print(f"stress {device.selector}: {ops} operations in {amount:g} s, every byte checked")
        else:
            growth = soak(device, int(amount))
            print(f"soak {device.selector}: {int(amount)} cycles, RSS {growth:+.1f} bytes/cycle")
