"""The ordering invariant on every stream devbuf hands out (issue 33), on CUDA: memory handed to a
consumer together with a devbuf user stream (a CAI export naming it, `__dlpack__(stream=S.stream)`,
the exchange table's work stream), the consumer writes there, and devbuf's next touch of the bytes
(host view, `to_bytes`, `get` on another stream, `copy_from`, pickle, an IPC export read by another
process, a re-export to a second consumer) sees the consumer's bytes. A stream named in an export
lives as long as the memory.

Each scenario runs in a fresh process with the CUDA test driver's per-operation delay on (see
test_cuda_ordering.py), so that a read not ordered after the consumer's work sees the old bytes.
The consumers are ctypes calls on the libcuda.so.1 devbuf loaded, and the C exchange-table
consumer (dlpack_consumer.c)."""

import pathlib
import textwrap

import pytest

from test_cuda_consumer_ordering import BUSY, scenario
from test_cuda_ordering import run


@pytest.fixture(scope="module")
def cuda():
    from conftest import require_backend

    return require_backend("cuda")


# How the memory comes to be named with a devbuf user stream S in its CAI export.
ON_USER_STREAM = {
    "work-on-S": """
        S = devbuf.Stream("cuda:0")
        memory = devbuf.alloc(N, "{kind}", device="cuda:0")
        memory.fill(0)
        gate = Gate(S.stream)
        memory.fill(1, stream=S, blocking=False)  # pending on S: the export names S
        """,
    "alloc-on-S": """
        S = devbuf.Stream("cuda:0")
        memory = S.alloc(N, "{kind}")
        gate = Gate(S.stream)
        memory.fill(0, stream=S, blocking=False)
        """,
}

READERS = ["to_bytes", "copy_from", "pickle", "np.asarray", "get(stream=R)"]


def cases():
    return [
        pytest.param(how, kind, reader, id=f"{how}-{kind}-{reader}")
        for how in ON_USER_STREAM
        for kind in ("device", "host")
        for reader in READERS
        if reader != "np.asarray" or kind != "device"
    ]


@pytest.mark.parametrize("how, kind, reader", cases())
def test_a_cai_consumer_on_a_user_stream_comes_before_devbuf(cuda, how, kind, reader):
    scenario(
        ON_USER_STREAM[how].format(kind=kind),
        """
        interface = memory.__cuda_array_interface__
        assert interface["stream"] == S.stream, "the export names the stream with pending work"
        busy(interface["stream"])
        gate.release()
        memset(interface["data"][0], 7, N, interface["stream"])  # the consumer, as CAI v3 says
        """,
        reader=reader,
    )


def test_an_ipc_export_after_a_cai_consumer_on_a_user_stream_carries_its_bytes(cuda):
    # CUDA IPC shares device memory only.
    run(
        BUSY
        + textwrap.dedent(
            """
        import subprocess, sys
        S = devbuf.Stream("cuda:0")
        memory = devbuf.alloc(N, "device", device="cuda:0", ipc=True)
        memory.fill(0)
        gate = Gate(S.stream)
        memory.fill(1, stream=S, blocking=False)
        interface = memory.__cuda_array_interface__
        assert interface["stream"] == S.stream, "the export names the stream with pending work"
        busy(interface["stream"])
        gate.release()
        memset(interface["data"][0], 7, N, interface["stream"])
        handle = bytes(memory.ipc_handle())
        child = subprocess.run(
            [sys.executable, "-c",
             "import sys, devbuf; print(sorted(set(devbuf.open_ipc(sys.stdin.buffer.read()).to_bytes())))"],
            input=handle, capture_output=True,
        )
        assert child.returncode == 0, child.stderr.decode()
        assert child.stdout.decode().strip() == "[7]", child.stdout.decode()
        """
        )
    )


@pytest.mark.parametrize("reader", ["to_bytes", "copy_from", "pickle"])
def test_a_dlpack_consumer_on_a_devbuf_stream_comes_before_devbuf(cuda, reader):
    scenario(
        """
        _get = ctypes.pythonapi.PyCapsule_GetPointer
        _get.restype, _get.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
        S = devbuf.Stream("cuda:0")
        memory = devbuf.alloc(N, "device", device="cuda:0")
        memory.fill(0)
        capsule = memory.__dlpack__(stream=S.stream, max_version=(1, 0))
        data = ctypes.c_void_p.from_address(_get(capsule, b"dltensor_versioned") + 32).value
        busy(S.stream)
        memset(data, 7, N, S.stream)  # the consumer writes back on the stream it passed
        """,
        reader=reader,
    )


def test_an_exchange_table_consumer_of_memory_on_a_user_stream_comes_before_devbuf(cuda):
    scenario(
        f"""
        import sys
        sys.path.insert(0, {str(pathlib.Path(__file__).parent)!r})
        from consumer import load

        S = devbuf.Stream("cuda:0")
        memory = S.alloc(N, "device")
        memory.fill(0, stream=S)
        consumer = load()
        data = consumer.describe(memory)["data"]
        stream = consumer.current_stream(memory, *memory.__dlpack_device__())
        assert stream != S.stream, "the table reports the device's work stream, not S"
        busy(stream)
        memset(data, 7, N, stream)
        """,
        reader="to_bytes",
    )


def test_a_stream_named_in_an_export_outlives_its_stream_object(cuda):
    run(
        """
        S = devbuf.Stream("cuda:0")
        memory = devbuf.alloc(N, "device", device="cuda:0")
        memory.fill(0)  # the allocation's own work done: the fill on S is all that is pending
        gate = Gate(S.stream)
        memory.fill(1, stream=S, blocking=False)
        interface = memory.__cuda_array_interface__
        stream = interface["stream"]
        assert stream == S.stream, "the export names the stream with pending work"
        gate.release()
        memory.to_bytes()  # devbuf's own work is done: nothing pending keeps S alive
        del S
        import gc
        gc.collect()
        memset(interface["data"][0], 7, N, stream)  # the consumer's next operation on it
        synchronize(stream)
        assert set(memory.to_bytes()) == {7}
        """
    )


def test_a_re_export_is_ordered_after_the_first_consumers_work(cuda):
    # The first consumer writes on the legacy stream (CAI said None); the second takes the
    # memory through CAI again and reads on its own non-blocking stream, waiting for the stream
    # the export names, as CAI v3 tells it to.
    run(
        """
        memory = devbuf.alloc(N, "device", device="cuda:0")
        memory.fill(0)
        first = memory.__cuda_array_interface__
        assert first["stream"] is None
        scratch = ctypes.c_uint64()
        ok(cu.cuMemAlloc_v2(ctypes.byref(scratch), 64))
        for _ in range(4):
            memset(scratch.value, 0, 64, 1)
        memset(first["data"][0], 7, N, 1)  # the first consumer, on the legacy stream
        second = memory.__cuda_array_interface__
        assert second["stream"] is not None, "a re-export must name a stream to wait for"
        private = new_stream()
        event = ctypes.c_void_p()
        ok(cu.cuEventCreate(ctypes.byref(event), 2))
        ok(cu.cuEventRecord(event, ctypes.c_void_p(second["stream"])))
        ok(cu.cuStreamWaitEvent(ctypes.c_void_p(private), event, 0))
        host = ctypes.create_string_buffer(N)
        ok(cu.cuMemcpyDtoHAsync_v2(host, ctypes.c_uint64(second["data"][0]), ctypes.c_size_t(N),
                                   ctypes.c_void_p(private)))
        synchronize(private)
        assert set(host.raw) == {7}, set(host.raw)
        """
    )
