"""Numba's real CUDA Array Interface consumer and producer, both ways, with devbuf: no kernels, so
these run on a GPU and on the devbuf CUDA test driver alike (ci/test runs them against the driver,
also with a delay on every stream operation so that a missing wait reads wrong bytes).

Numba synchronizes on a CAI `stream` when it imports (NUMBA_CUDA_ARRAY_INTERFACE_SYNC), and
exports its arrays' own stream; devbuf must name its stream while work is pending, and order its
reads after Numba's stream."""

import numpy as np
import pytest

import devbuf
from conftest import require_backend

N = 1 << 16


@pytest.fixture(scope="module")
def numba_cuda():
    require_backend("cuda")
    try:
        from numba import cuda
    except ImportError as err:
        pytest.skip(f"numba-cuda is not installed: {err}")
    cuda.current_context()  # Numba's driver, on device 0's primary context (devbuf's too)
    return cuda


def test_numba_reads_what_devbuf_wrote(numba_cuda):
    for kind in ("device", "host", "shared"):
        array = devbuf.alloc(N * 4, kind, device="cuda:0").view("float32")
        array.copy_from(np.arange(N, dtype=np.float32))
        theirs = numba_cuda.as_cuda_array(array)
        assert theirs.__cuda_array_interface__["data"][0] == array.ptr
        np.testing.assert_array_equal(theirs.copy_to_host(), np.arange(N, dtype=np.float32))


def test_numba_waits_for_devbuf_work_still_pending_on_devbuf_stream(numba_cuda):
    buffer = devbuf.alloc(N, "device", device="cuda:0")
    buffer.fill(1)
    # Work still pending on devbuf's stream (with the test driver's delay on, 50 of them last
    # long enough for any consumer that does not wait to read too early).
    for value in range(50):
        buffer.fill(value % 8 + 2, blocking=False)
    buffer.fill(10, blocking=False)
    stream = buffer.__cuda_array_interface__["stream"]
    assert stream in (None, buffer.queue.stream)  # None only once the fill finished
    theirs = numba_cuda.as_cuda_array(buffer)  # Numba synchronizes the named stream
    # On a stream of Numba's own, which does not wait for devbuf's by itself.
    seen = theirs.copy_to_host(stream=numba_cuda.stream())
    assert seen.tobytes() == bytes([10]) * N


def test_devbuf_imports_a_numba_array_zero_copy(numba_cuda):
    host = np.arange(1000, dtype=np.int64)
    theirs = numba_cuda.to_device(host)
    mine = devbuf.asarray(theirs)
    assert mine.ptr == theirs.__cuda_array_interface__["data"][0] and mine.kind == "device"
    assert mine.dtype == "int64" and mine.shape == (1000,)
    assert mine.to_bytes() == host.tobytes()
    mine.buffer.fill(0)  # devbuf writes the memory Numba sees
    assert not theirs.copy_to_host().any()


def test_devbuf_orders_its_reads_after_a_numba_stream(numba_cuda):
    stream = numba_cuda.stream()
    values = np.arange(N, dtype=np.float64) * 3
    theirs = numba_cuda.device_array(N, dtype=np.float64, stream=stream)
    theirs.copy_to_device(np.zeros(N), stream=stream)
    theirs.copy_to_device(values, stream=stream)  # both still pending on Numba's stream
    assert theirs.__cuda_array_interface__["stream"] == int(stream.handle)
    mine = devbuf.asarray(theirs)
    assert np.frombuffer(mine.to_bytes(), dtype=np.float64).tolist() == values.tolist()


def test_the_device_is_named_for_what_it_is(numba_cuda):
    name = numba_cuda.get_current_device().name
    name = name.decode() if isinstance(name, bytes) else name
    assert name == devbuf.Device("cuda:0").name
