"""The driver calls devbuf's CUDA hot paths make, counted by the CUDA test driver
(`DEVBUF_CUDA_TEST_COUNT_CALLS=1`, docs/guide/test-driver.md). Run as a script in a process of its
own with the knob on, it prints one JSON object: each path's name and the entry points one call of
it made, by name (the mean over several calls, which must come out whole).
`test_cuda_driver_calls.py` holds each path to its budget; `python tests/python/driver_calls.py`
prints them (on the test driver, with the knob on)."""

import collections
import ctypes
import json

import devbuf
import devbuf.mr

REPEATS = 8


class Driver:
    """The loaded libcuda.so.1 (the test driver): its call counts, and the few entry points the
    scenarios call themselves to make a context current as another library would."""

    def __init__(self):
        self.lib = ctypes.CDLL("libcuda.so.1")
        self.lib.devbufTestDriverCallCounts.restype = ctypes.c_int64
        self.lib.devbufTestDriverCallCounts.argtypes = [ctypes.c_char_p, ctypes.c_size_t]

    def counts(self):
        size = self.lib.devbufTestDriverCallCounts(None, 0)
        if size < 0:
            raise RuntimeError("the CUDA test driver does not count calls: set DEVBUF_CUDA_TEST_COUNT_CALLS=1")
        text = ctypes.create_string_buffer(size + 1)
        self.lib.devbufTestDriverCallCounts(text, size + 1)
        lines = (line.split() for line in text.value.decode().splitlines())
        return collections.Counter({name: int(count) for name, count in lines})

    def check(self, operation, result):
        if result != 0:
            raise RuntimeError(f"{operation} failed: CUresult {result}")

    def push_primary_context(self):
        """Makes device 0's primary context current, as CuPy, PyTorch or Numba leave it."""
        device, context = ctypes.c_int(), ctypes.c_void_p()
        self.check("cuDeviceGet", self.lib.cuDeviceGet(ctypes.byref(device), 0))
        self.check("cuDevicePrimaryCtxRetain", self.lib.cuDevicePrimaryCtxRetain(ctypes.byref(context), device))
        self.check("cuCtxPushCurrent", self.lib.cuCtxPushCurrent_v2(context))

    def push_own_context(self):
        """Makes a context of device 0 other than its primary one current (PyCUDA's kind)."""
        device, context = ctypes.c_int(), ctypes.c_void_p()
        self.check("cuDeviceGet", self.lib.cuDeviceGet(ctypes.byref(device), 0))
        self.check("cuCtxCreate", self.lib.cuCtxCreate_v2(ctypes.byref(context), 0, device))

    def pop_context(self):
        context = ctypes.c_void_p()
        self.check("cuCtxPopCurrent", self.lib.cuCtxPopCurrent_v2(ctypes.byref(context)))


def per_call(driver, operation, prepare=lambda: None):
    """The entry points one call of `operation(prepare())` makes, counted around the call alone:
    `prepare` runs outside the count, before each call, and what the call returns is kept until
    all have run (an import is counted without its release). Warmed up first, with as many calls
    alive at once as the count keeps, so that reused driver objects are at hand."""
    warm = [operation(prepare()) for _ in range(REPEATS)]
    del warm
    made = collections.Counter()
    kept = []
    for _ in range(REPEATS):
        argument = prepare()
        before = driver.counts()
        kept.append(operation(argument))
        made += driver.counts() - before
    del kept
    return {name: count / REPEATS for name, count in sorted(made.items())}


def alloc_free(**arguments):
    """An allocation of 1 KiB of device memory, dropped at once."""

    def operation(_):
        devbuf.alloc(1024, "device", **arguments)

    return operation


def settled(size=1024):
    """Device memory whose allocation has completed, never handed out: nothing is pending."""
    buffer = devbuf.alloc(size, "device", device="cuda:0")
    buffer.synchronize()
    return buffer


class CaiProducer:
    """Another library's array, described by a CAI dict naming `stream`, the stream its work is
    on (None: no key)."""

    def __init__(self, buffer, stream):
        self.buffer = buffer
        self.__cuda_array_interface__ = dict(buffer.__cuda_array_interface__)
        self.__cuda_array_interface__.pop("stream", None)
        if stream is not None:
            self.__cuda_array_interface__["stream"] = stream


class DlpackProducer:
    """Another library's array that needs no ordering (its work is done): a DLPack capsule."""

    def __init__(self, buffer):
        self.buffer = buffer

    def __dlpack__(self, stream=None, max_version=None, dl_device=None, copy=None):
        return self.buffer.__dlpack__(stream=-1, max_version=max_version)

    def __dlpack_device__(self):
        return self.buffer.__dlpack_device__()


def measure():
    driver = Driver()
    paths = {}
    with devbuf.Device("cuda:0"):
        pool = devbuf.mr.PoolMemoryResource(devbuf.mr.QueueMemoryResource())
    paths["pooled alloc+free 1 KiB device, a pool hit"] = per_call(driver, alloc_free(mr=pool))

    def used_on_the_stream(_):
        block = devbuf.alloc(1024, "device", mr=pool)
        block.fill(1, blocking=False)
        # Waited for here, so that what the free does is the same in every run (a free while the
        # fill may still run asks whether it is done, and the answer depends on timing).
        block.synchronize()

    paths["pooled alloc+fill+free 1 KiB device, the fill enqueued and waited for"] = per_call(
        driver, used_on_the_stream)
    unpooled = alloc_free(device="cuda:0")
    paths["device alloc+free 1 KiB, no context current"] = per_call(driver, unpooled)
    driver.push_primary_context()
    paths["device alloc+free 1 KiB, the primary context current"] = per_call(driver, unpooled)
    driver.pop_context()
    driver.push_own_context()
    paths["device alloc+free 1 KiB, another context current"] = per_call(driver, unpooled)
    driver.pop_context()

    paths["CAI export, nothing pending"] = per_call(
        driver, lambda buffer: buffer.__cuda_array_interface__, settled)
    paths["DLPack export (stream=-1), nothing pending"] = per_call(
        driver, lambda buffer: buffer.__dlpack__(stream=-1), settled)

    def handed_out():
        buffer = settled()
        buffer.__cuda_array_interface__
        return buffer

    driver.push_primary_context()
    paths["CAI export again, once handed out (the primary context current)"] = per_call(
        driver, lambda buffer: buffer.__cuda_array_interface__, handed_out)
    driver.pop_context()

    paths["DLPack import"] = per_call(driver, devbuf.from_dlpack, lambda: DlpackProducer(settled()))
    paths["CAI import, sync=False"] = per_call(
        driver, lambda producer: devbuf.asarray(producer, sync=False), lambda: CaiProducer(settled(), None))
    producer_stream = devbuf.Stream(devbuf.Device("cuda:0"))
    paths["CAI import naming the producer's stream"] = per_call(
        driver, devbuf.asarray, lambda: CaiProducer(settled(), producer_stream.stream))
    driver.push_primary_context()
    paths["CAI import naming no stream (the primary context current)"] = per_call(
        driver, devbuf.asarray, lambda: CaiProducer(settled(), None))
    driver.pop_context()

    def copy(pair):
        destination, source = pair
        destination.copy_from(source, blocking=False)
        return pair

    paths["copy 1 KiB device to device, enqueued"] = per_call(driver, copy, lambda: (settled(), settled()))

    def matrix():
        """A settled 100x100 float32 device array (row-major: a column is 100 runs 400 bytes apart)."""
        array = devbuf.zeros((100, 100), "float32", device="cuda:0")
        array.buffer.synchronize()
        return array

    def fill_column(array):
        array[:, 0] = 5
        return array

    def enqueue_fill_column(array):
        array[:, 0].fill(5, blocking=False)
        return array

    paths["x[:, 0] = 5 of a 100x100 float32 device array, waited for"] = per_call(driver, fill_column, matrix)
    paths["x[:, 0].fill(5, blocking=False) of a 100x100 float32 device array"] = per_call(
        driver, enqueue_fill_column, matrix)
    paths["x[:, 0].get() of a 100x100 float32 device array"] = per_call(
        driver, lambda array: array[:, 0].get(), matrix)

    def empty(_):
        buffer = devbuf.alloc(0, "device", device="cuda:0")
        buffer.fill(1)
        buffer.copy_from(devbuf.alloc(0, "device", device="cuda:0"))
        buffer.to_bytes()
        buffer.__cuda_array_interface__
        buffer.__dlpack__(stream=-1)

    paths["an empty device buffer: alloc, fill, copy, to_bytes, CAI and DLPack exports, free"] = per_call(
        driver, empty)
    return paths


if __name__ == "__main__":
    print(json.dumps(measure(), indent=1))
