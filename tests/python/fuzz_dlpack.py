"""Random DLPack producers against devbuf's importers: each input either imports correctly (the
bytes read back are the producer's) or raises a clean ValueError/TypeError/BufferError — never a
crash, never another exception. Seeded, so a failure is replayed by its seed and index.

Classes of input (chosen uniformly):
- "ndim": `ndim` anywhere in int32, mostly past 64, with shape/strides arrays of 0–3 values;
- "device": a `__dlpack_device__` that disagrees with the capsule, or a capsule alone on a device
  whose runtime does not know the (host) pointer or that devbuf cannot reach;
- "fields": bad dtypes (codes, bits, lanes), NULL data for non-empty shapes, negative extents,
  strides that overflow, versions devbuf does not read;
- "valid": well-formed CPU tensors over real host memory (random shape, strides and offset kept
  inside it), which must import zero-copy with the right bytes;
- "extent": tensors whose element 0 lies in a 4 KiB allocation devbuf made (host, and device
  memory of each usable CUDA, SYCL and OpenCL device), with shapes, strides and offsets that keep
  the whole span inside or reach past either end: inside, they must import; past the end of an
  allocation its runtime bounds (host, CUDA, OpenCL USM), they must be refused (SYCL bounds none:
  there only the first and last byte are checked, see docs/guide/protocols.md).

Usage: python fuzz_dlpack.py COUNT [SEED]   (ci/soak runs 10^6)
"""

import ctypes
import functools
import math
import random
import sys
import time

import devbuf
import numpy as np
from dlpack_craft import (
    KDL_CPU,
    KDL_CUDA,
    KDL_CUDA_HOST,
    KDL_CUDA_MANAGED,
    KDL_ONEAPI,
    KDL_OPENCL,
    CraftedTensor,
    Producer,
    exchange_producer_type,
)

CLEAN_ERRORS = (ValueError, TypeError, BufferError)
DEVICE_TYPES = [KDL_CPU, KDL_CUDA, KDL_CUDA_HOST, KDL_OPENCL, KDL_CUDA_MANAGED, KDL_ONEAPI, 9, 1000]
# 4 KiB of host memory every tensor points into; valid tensors stay inside it.
ARENA_BYTES = 4096
ARENA = (ctypes.c_uint8 * ARENA_BYTES)(*(i % 251 for i in range(ARENA_BYTES)))
ARENA_ADDRESS = ctypes.addressof(ARENA)
Exchange = exchange_producer_type()


def int32(rng):
    return rng.choice([rng.randint(-(2**31), 2**31 - 1), 2**31 - 1, -(2**31), rng.randint(65, 4096), -1])


def short_values(rng):
    return [rng.choice([rng.randint(-8, 8), rng.randint(-(2**63), 2**63 - 1)]) for _ in range(rng.randint(0, 3))]


def ndim_case(rng):
    values = short_values(rng) or [1]
    strides = None if rng.random() < 0.3 else short_values(rng)
    return CraftedTensor(data=ARENA_ADDRESS, ndim=int32(rng), shape=values, strides=strides), None, False


def device_case(rng):
    tensor = CraftedTensor(
        data=ARENA_ADDRESS,
        device=(rng.choice(DEVICE_TYPES), rng.choice([0, 1, 7, -1, 2**31 - 1])),
        shape=(rng.randint(0, 16),),
    )
    device = (tensor.managed.dl_tensor.device.device_type, tensor.managed.dl_tensor.device.device_id)
    announced = (rng.choice(DEVICE_TYPES), rng.choice([0, 1]))
    if announced == device or device[0] != KDL_CPU and rng.random() < 0.5:
        announced = None  # a capsule alone: its own device routes it
    elif device[0] == KDL_CPU and announced[0] == KDL_CPU:
        announced = (KDL_CUDA, 0)
    return tensor, announced, False


def fields_case(rng):
    bad = rng.randrange(5)
    fields = {"data": ARENA_ADDRESS, "shape": (4,), "strides": (1,)}
    if bad == 0:
        fields["dtype"] = (rng.randint(0, 255), rng.choice([0, 1, 3, 8, 12, 32, 255]), rng.choice([0, 1, 2, 4, 65535]))
        fields["shape"], fields["strides"] = (0,), (1,)  # a dtype devbuf accepts then reads nothing
    elif bad == 1:
        fields["data"] = 0
        fields["shape"] = (rng.randint(1, 8),)
    elif bad == 2:
        fields["shape"] = (rng.randint(-(2**63), -1), 2)
        fields["strides"] = (2, 1)
    elif bad == 3:
        fields["shape"] = (2, 3)
        fields["strides"] = (rng.choice([2**62, -(2**62), 2**63 - 1]), 1)
    else:
        fields["version"] = (rng.choice([0, 2, 99]), rng.randint(0, 9))
    return CraftedTensor(**fields), None, False


def valid_case(rng):
    itemsize = rng.choice([1, 2, 4, 8])
    dtype = {1: (1, 8, 1), 2: (0, 16, 1), 4: (2, 32, 1), 8: (0, 64, 1)}[itemsize]
    ndim = rng.randint(0, 3)
    shape = [rng.randint(0, 5) for _ in range(ndim)]
    strides = [rng.choice([-1, 1]) * rng.randint(1, 6) for _ in range(ndim)]
    # Element 0 sits where every negative stride still reaches inside the arena.
    low = sum((n - 1) * s for n, s in zip(shape, strides) if s < 0 and n > 0)
    high = sum((n - 1) * s for n, s in zip(shape, strides) if s > 0 and n > 0)
    first = rng.randint(-low, ARENA_BYTES // itemsize - 1 - high)
    tensor = CraftedTensor(
        data=ARENA_ADDRESS,
        dtype=dtype,
        shape=shape,
        strides=strides if rng.random() < 0.8 or ndim == 0 else None,
        byte_offset=first * itemsize,
        versioned=rng.random() < 0.7,
    )
    if tensor.managed.dl_tensor.strides is None or not tensor.managed.dl_tensor.strides:
        # NULL strides mean C order: check they still fit.
        count = 1
        for n in shape:
            count *= n
        if first + count > ARENA_BYTES // itemsize:
            return valid_case(rng)
    return tensor, None, True


EXTENT_BYTES = 4096


@functools.cache
def extent_allocations():
    """(buffer, DLPack device, whether its runtime bounds the allocation) for the host and one
    device of each usable backend that exports device memory through DLPack."""
    found = [devbuf.alloc(EXTENT_BYTES, "host", device="host")]
    for backend in devbuf.backends():
        if backend.name == "host" or not backend.available:
            continue
        device = next((d for d in backend.devices if d.usable and "device" in d.kinds), None)
        if device is not None:
            found.append(devbuf.alloc(EXTENT_BYTES, "device", device=device))
    return [(buffer, buffer.__dlpack_device__(), buffer.device.backend != "sycl") for buffer in found]


def extent_case(rng):
    buffer, device, bounded = rng.choice(extent_allocations())
    itemsize = rng.choice([1, 2, 4, 8])
    dtype = {1: (1, 8, 1), 2: (0, 16, 1), 4: (2, 32, 1), 8: (0, 64, 1)}[itemsize]
    ndim = rng.randint(1, 3)
    shape = [rng.choice([0, 1, 2, rng.randint(1, 64), rng.randint(1, EXTENT_BYTES)]) for _ in range(ndim)]
    if math.prod(shape) > 1 << 16:
        # Overlapping elements that many would make reading the bytes back the test's cost.
        return extent_case(rng)
    strides = [rng.choice([-1, 1]) * rng.choice([1, rng.randint(1, 16), rng.randint(1, 1024)]) for _ in range(ndim)]
    # Element 0 inside the allocation; the span may reach past either end.
    first = rng.randrange(EXTENT_BYTES // itemsize)
    low = sum((n - 1) * s for n, s in zip(shape, strides) if s < 0 and n > 0)
    high = sum((n - 1) * s for n, s in zip(shape, strides) if s > 0 and n > 0)
    empty = 0 in shape
    inside = empty or (first + low >= 0 and (first + high + 1) * itemsize <= EXTENT_BYTES)
    tensor = CraftedTensor(
        data=buffer.ptr, device=device, dtype=dtype, shape=shape, strides=strides, byte_offset=first * itemsize
    )
    tensor.keep.append(buffer)
    tensor.must_refuse = bounded and not inside
    return tensor, None, inside


CASES = [ndim_case, device_case, fields_case, valid_case, extent_case]


def expected_bytes(tensor):
    """The producer's elements in C order, as NumPy (the reference importer) reads them."""
    return np.from_dlpack(Producer(tensor)).tobytes()


def import_one(rng, tensor, announced):
    how = rng.choice(["producer", "capsule", "exchange"])
    if how == "exchange" and tensor.name != b"dltensor_versioned":
        how = "producer"
    if how == "producer" or announced is not None:
        obj = Producer(tensor, announced=announced)
    elif how == "capsule":
        obj = tensor.capsule()
    else:
        obj = Exchange(tensor)
    entry = rng.randrange(4)
    if entry == 0:
        return devbuf.asarray(obj)
    if entry == 1:
        return devbuf.asarray(obj, copy=True)
    if entry == 2:
        return devbuf.from_dlpack(obj)
    return devbuf.from_dlpack(obj, copy=True)


def run(count, seed=0, report_every=0):
    """Feeds `count` inputs; returns {class: (imported, refused)}. Raises AssertionError on a
    wrong import or an unclean exception, naming the seed and index to replay."""
    rng = random.Random(seed)
    tally = {case.__name__: [0, 0] for case in CASES}
    started = time.monotonic()
    for index in range(count):
        case = rng.choice(CASES)
        tensor, announced, valid = case(rng)
        try:
            array = import_one(rng, tensor, announced)
        except CLEAN_ERRORS as refused:
            assert not valid, f"seed {seed} input {index} ({case.__name__}): a valid tensor was refused: {refused!r}"
            tally[case.__name__][1] += 1
            continue
        except Exception as other:  # noqa: BLE001 - any other exception class is the failure
            raise AssertionError(f"seed {seed} input {index} ({case.__name__}): unclean {other!r}") from other
        dl = tensor.managed.dl_tensor
        imported_device = (dl.device.device_type, dl.device.device_id)
        # A malformed tensor may only be one devbuf cannot tell from a good one: host memory
        # described as host memory, or an empty array (no byte is read) on a reachable device.
        # (A span past an allocation whose runtime bounds none, SYCL's, is one of those.)
        unbounded = case is extent_case and not tensor.must_refuse
        assert valid or unbounded or imported_device[0] == KDL_CPU or array.buffer.nbytes == 0, (
            f"seed {seed} input {index} ({case.__name__}): accepted a malformed tensor on {imported_device}"
        )
        assert not tensor.must_refuse, (
            f"seed {seed} input {index} ({case.__name__}): accepted a span past its allocation on {imported_device}"
        )
        if valid and imported_device[0] == KDL_CPU:
            got, want = np.asarray(array).tobytes(), expected_bytes(tensor)
            assert got == want, f"seed {seed} input {index}: read {got[:16]!r}… expected {want[:16]!r}…"
        tally[case.__name__][0] += 1
        del array
        if report_every and (index + 1) % report_every == 0:
            rate = (index + 1) / (time.monotonic() - started)
            print(f"{index + 1} inputs, {rate:,.0f}/s, {tally}", flush=True)
    return {name: tuple(counts) for name, counts in tally.items()}


if __name__ == "__main__":
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
    seed = int(sys.argv[2]) if len(sys.argv) > 2 else 0
    result = run(count, seed, report_every=max(count // 10, 1))
    print(f"fuzz_dlpack: {count} inputs, seed {seed}, no crash: {result}")
