"""Numba's CUDA Array Interface consumer, for real, against the devbuf CUDA test driver.

Run with the double on the library path and numba-cuda installed (no GPU, no CUDA toolkit):

    LD_LIBRARY_PATH=$(ci/cuda-test-driver) DEVBUF_CUDA_TEST_DELAY_US=20000 \
        python tests/cuda-driver/numba_probe.py

Each check prints one line and raises on failure. Kernels are out of reach (the double loads no
modules); everything here is memory, copies, streams and the CAI v3 stream rule.
"""

import ctypes
import os

import numpy as np
from numba import cuda

# The same library Numba's cuda-bindings loaded (same soname, so the same instance and state).
driver = ctypes.CDLL("libcuda.so.1")
CU_STREAM_NON_BLOCKING = 1


def check(result, what):
    if result != 0:
        raise RuntimeError(f"{what} failed with CUresult {result}")


def device_name():
    name = ctypes.create_string_buffer(256)
    check(driver.cuDeviceGetName(name, 256, 0), "cuDeviceGetName")
    return name.value.decode()


class Producer:
    """A foreign CAI v3 producer: device memory from cuMemAlloc, filled asynchronously on its own
    non-blocking stream, exported with that stream (the consumer must synchronize it)."""

    def __init__(self, values):
        self.values = np.ascontiguousarray(values)
        self.stream = ctypes.c_void_p()
        check(
            driver.cuStreamCreate(ctypes.byref(self.stream), CU_STREAM_NON_BLOCKING),
            "cuStreamCreate",
        )
        self.ptr = ctypes.c_uint64()
        check(driver.cuMemAlloc_v2(ctypes.byref(self.ptr), self.values.nbytes), "cuMemAlloc")
        # Zero first, then the real bytes, both still pending on the producer's stream when the
        # consumer imports (with DEVBUF_CUDA_TEST_DELAY_US set).
        check(
            driver.cuMemsetD8Async(
                ctypes.c_uint64(self.ptr.value),
                ctypes.c_ubyte(0),
                ctypes.c_size_t(self.values.nbytes),
                self.stream,
            ),
            "cuMemsetD8Async",
        )
        check(
            driver.cuMemcpyHtoDAsync_v2(
                ctypes.c_uint64(self.ptr.value),
                self.values.ctypes.data_as(ctypes.c_void_p),
                ctypes.c_size_t(self.values.nbytes),
                self.stream,
            ),
            "cuMemcpyHtoDAsync",
        )

    @property
    def __cuda_array_interface__(self):
        return {
            "shape": self.values.shape,
            "typestr": self.values.dtype.str,
            "data": (self.ptr.value, False),
            "strides": None,
            "version": 3,
            "stream": self.stream.value,
        }


def main():
    cuda.current_context()  # initialise Numba's driver and make the primary context current
    name = device_name()
    assert name.startswith("devbuf CUDA test driver"), name
    print(f"device 0: {name}")

    host = np.arange(10, dtype=np.int64)
    on_device = cuda.to_device(host)
    cai = on_device.__cuda_array_interface__
    assert cai["version"] == 3 and cai["data"][0] != 0, cai
    np.testing.assert_array_equal(on_device.copy_to_host(), host)
    print("cuda.to_device + copy_to_host: ok")

    empty = cuda.device_array(1000, dtype=np.float32)
    assert empty.__cuda_array_interface__["data"][0] != 0
    empty.copy_to_device(np.full(1000, 2.5, dtype=np.float32))
    np.testing.assert_array_equal(empty.copy_to_host(), np.full(1000, 2.5, dtype=np.float32))
    print("cuda.device_array + copy_to_device: ok")

    view = cuda.as_cuda_array(on_device)
    np.testing.assert_array_equal(view.copy_to_host(), host)
    print("as_cuda_array of a Numba array: ok")

    values = np.arange(1 << 16, dtype=np.float64) * 3.0
    producer = Producer(values)
    imported = cuda.as_cuda_array(producer)
    # On the legacy default stream, which does not wait for a non-blocking stream: only Numba's
    # synchronization on import makes the producer's bytes be there. (The imported array's own
    # default stream is the producer's, which would order the copy by itself.)
    seen = imported.copy_to_host(stream=cuda.legacy_default_stream())
    sync = os.environ.get("NUMBA_CUDA_ARRAY_INTERFACE_SYNC", "1") != "0"
    if sync:
        np.testing.assert_array_equal(seen, values)
        print("as_cuda_array of a CAI v3 producer on a non-blocking stream: Numba synchronized it, ok")
    else:
        # The negative control: without Numba's sync, the copy on the legacy stream does not wait
        # for the producer's non-blocking stream, so with a delay it reads the bytes too early.
        assert not np.array_equal(seen, values), "the producer's stream was not asynchronous"
        print("NUMBA_CUDA_ARRAY_INTERFACE_SYNC=0: the copy read too early, as it must, ok")
    check(driver.cuStreamSynchronize(producer.stream), "cuStreamSynchronize")


if __name__ == "__main__":
    main()
