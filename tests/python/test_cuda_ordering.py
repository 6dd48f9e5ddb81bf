"""CUDA ordering and lifetime rules at the protocol boundary (issue 15): CAI and DLPack imports
are recorded as pending work, CAI v3's consumer rule, producers before CAI v3, zero-size arrays,
and releasing exported memory without holding the GIL.

Each scenario runs in a fresh Python process with the CUDA test driver's per-operation delay on
(DEVBUF_CUDA_TEST_DELAY_US; a real driver ignores it), so that a missing wait reads wrong bytes.
Where a scenario needs work to be pending on a GPU too, it holds the stream first (`hold`).
Other libraries' streams and work are made with ctypes on the same libcuda.so.1 devbuf loaded."""

import os
import subprocess
import sys
import textwrap

import pytest

from conftest import require_backend

PRELUDE = textwrap.dedent(
    """
    import atexit
    import ctypes
    import numpy as np
    import devbuf

    N = 1 << 20
    cu = ctypes.CDLL("libcuda.so.1")

    def ok(result):
        assert result == 0, f"CUresult {result}"

    ok(cu.cuInit(0))
    _device = ctypes.c_int()
    ok(cu.cuDeviceGet(ctypes.byref(_device), 0))
    _context = ctypes.c_void_p()
    ok(cu.cuDevicePrimaryCtxRetain(ctypes.byref(_context), _device))
    ok(cu.cuCtxPushCurrent_v2(_context))

    def new_stream():
        stream = ctypes.c_void_p()
        ok(cu.cuStreamCreate(ctypes.byref(stream), 1))  # CU_STREAM_NON_BLOCKING
        return stream.value

    def memset(ptr, byte, n, stream):
        ok(cu.cuMemsetD8Async(ctypes.c_uint64(ptr), ctypes.c_ubyte(byte), ctypes.c_size_t(n),
                              ctypes.c_void_p(stream)))

    def synchronize(stream):
        ok(cu.cuStreamSynchronize(ctypes.c_void_p(stream)))

    _libc = ctypes.CDLL(None)
    _usleep = ctypes.cast(_libc.usleep, ctypes.c_void_p)
    _sem_wait = ctypes.cast(_libc.sem_wait, ctypes.c_void_p)

    def hold(stream, microseconds=300_000):
        # Work enqueued on `stream` after this stays pending for a while on any device, a GPU's
        # included (which finishes a 1 MiB fill before the next line runs; the test driver's delay
        # is no GPU's): a host function that sleeps. It is libc's usleep itself, which takes the
        # host function's one argument (passed in the first integer register) as its microseconds,
        # so no Python and no GIL run on the driver's host-function thread.
        ok(cu.cuLaunchHostFunc(ctypes.c_void_p(stream), _usleep, ctypes.c_void_p(microseconds)))

    class Gate:
        # Work enqueued on `stream` after this waits until `release()`, however long the script
        # takes to get there (a hold's time may run out on a loaded machine before the script
        # checks what pending work makes an export say): a host function that is libc's sem_wait
        # on a semaphore of the script's. Release it before devbuf waits for the stream.

        def __init__(self, stream):
            self.semaphore = ctypes.create_string_buffer(64)  # a sem_t (32 bytes on x86-64 and aarch64)
            self.released = False
            assert _libc.sem_init(self.semaphore, 0, 0) == 0
            ok(cu.cuLaunchHostFunc(ctypes.c_void_p(stream), _sem_wait,
                                   ctypes.cast(self.semaphore, ctypes.c_void_p)))
            # A script that fails before its release must still end.
            atexit.register(self.release)

        def release(self):
            if not self.released:
                self.released = True
                assert _libc.sem_post(self.semaphore) == 0

    class Cai:
        \"\"\"A CAI producer of `n` bytes at `ptr`; `stream=...` leaves the key out.\"\"\"

        def __init__(self, ptr, n, stream=..., version=3):
            self.__cuda_array_interface__ = {
                "shape": (n,), "typestr": "|u1", "data": (ptr, False), "version": version,
            }
            if stream is not ...:
                self.__cuda_array_interface__["stream"] = stream
    """
)


@pytest.fixture(scope="module")
def cuda():
    return require_backend("cuda")


def run(script, timeout=120, **env):
    """Runs `script` after PRELUDE in a fresh process with the driver's delay on."""
    variables = {**os.environ, "DEVBUF_CUDA_TEST_DELAY_US": "20000", **env}
    result = subprocess.run(
        [sys.executable, "-c", PRELUDE + textwrap.dedent(script)],
        env=variables,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("kind", ["host", "shared"])
def test_a_cai_import_is_pending_work_for_host_views_and_re_exports(cuda, kind):
    run(
        f"""
        memory = devbuf.alloc(N, "{kind}", device="cuda:0")
        memory.fill(0)
        producer = new_stream()
        hold(producer)  # the producer's work is still pending at the import
        memset(memory.ptr, 7, N, producer)
        imported = devbuf.asarray(Cai(memory.ptr, N, producer))
        assert imported.__cuda_array_interface__["stream"] == devbuf.Device("cuda:0").queue.stream, \\
            "a re-export must name the stream that waits for the producer"
        assert (np.asarray(imported) == 7).all(), "the host view read before the producer's work"
        """
    )


def test_a_dlpack_import_is_pending_work_for_host_views(cuda):
    run(
        """
        memory = devbuf.alloc(N, "host", device="cuda:0")
        memory.fill(0)

        class Producer:
            # Orders the consumer's stream after its own pending work, as DLPack asks.
            def __init__(self):
                self.stream = new_stream()
                memset(memory.ptr, 7, N, self.stream)

            def __dlpack_device__(self):
                return memory.__dlpack_device__()

            def __dlpack__(self, stream=None, max_version=None, **kwargs):
                event = ctypes.c_void_p()
                ok(cu.cuEventCreate(ctypes.byref(event), 2))
                ok(cu.cuEventRecord(event, ctypes.c_void_p(self.stream)))
                ok(cu.cuStreamWaitEvent(ctypes.c_void_p(stream), event, 0))
                return memory.__dlpack__(stream=-1, max_version=max_version)

        imported = devbuf.from_dlpack(Producer())
        assert (np.asarray(imported) == 7).all(), "the host view read before the producer's work"
        """
    )


def test_work_enqueued_on_cai_imports_holds_back_the_producers_stream(cuda):
    run(
        """
        memory = devbuf.alloc(N, "device", device="cuda:0")
        memory.fill(0)
        producer = new_stream()
        imported = devbuf.asarray(Cai(memory.ptr, N, producer))
        for _ in range(5):  # ours end well after the producer's next operation would
            imported.buffer.fill(9, blocking=False)
        # The producer's later work on its stream must come after ours (CAI v3's consumer rule).
        memset(memory.ptr, 5, N, producer)
        synchronize(producer)
        memory.synchronize()
        assert set(memory.to_bytes()) == {5}, "the producer's stream did not wait for our fill"
        """
    )


def test_a_cai_producer_before_v3_is_ordered_on_the_legacy_stream(cuda):
    run(
        """
        memory = devbuf.alloc(N, "device", device="cuda:0")
        memory.fill(0)
        memset(memory.ptr, 7, N, 1)  # the legacy default stream
        imported = devbuf.asarray(Cai(memory.ptr, N, version=2))
        assert set(imported.buffer.to_bytes()) == {7}, "read before the legacy stream's work"
        """
    )


@pytest.mark.parametrize("stream", [..., None, 1])
def test_zero_size_cai_arrays_with_data_0_import(cuda, stream):
    run(
        f"""
        imported = devbuf.asarray(Cai(0, 0, stream={stream!r}))
        assert imported.shape == (0,) and imported.buffer.nbytes == 0
        assert imported.buffer.to_bytes() == b""
        """
    )


def test_releasing_exported_memory_lets_a_host_function_take_the_gil(cuda):
    # A stream's host function that needs the GIL (as CuPy's and Numba's callbacks do) must be
    # able to run while devbuf waits for the device before releasing exported memory.
    run(
        """
        ran = []
        callback = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(lambda _: ran.append(True))
        memory = devbuf.alloc(N, "host", device="cuda:0")
        memory.__cuda_array_interface__
        stream = new_stream()
        memset(memory.ptr, 1, N, stream)
        ok(cu.cuLaunchHostFunc(ctypes.c_void_p(stream), callback, None))
        del memory
        synchronize(stream)
        assert ran
        """,
        timeout=60,
    )
