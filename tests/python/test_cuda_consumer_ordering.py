"""The reverse direction of ordering on CUDA (issue 22): once devbuf has handed memory out, a
consumer's work on it on a stream devbuf can know of (devbuf's own stream, which it handed out, and
the legacy default stream, the ecosystem's default) comes before devbuf's next host view, command
and pickle.

Each scenario runs in a fresh process with the CUDA test driver's per-operation delay on (see
test_cuda_ordering.py), so that a read not ordered after the consumer's work sees the old bytes.
The consumers are Numba for real (its CAI consumer, its copies, its documented event recipe) and
ctypes calls on the libcuda.so.1 devbuf loaded (a DLPack consumer, the C exchange table's)."""

import pathlib
import textwrap

import pytest

from conftest import require_backend
from test_cuda_ordering import run

BUSY = """
def busy(stream):
    # What the consumer queues first, so that its write lands well after any read of devbuf's: on
    # a GPU too, where a few small memsets would be done before devbuf's read is even enqueued.
    hold(stream, 100_000)
"""

NUMBA = """
from numba import cuda as numba_cuda

numba_cuda.current_context()  # device 0's primary context, devbuf's too
"""

DLPACK_DATA = """
_get = ctypes.pythonapi.PyCapsule_GetPointer
_get.restype, _get.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]

def dlpack_data(capsule):
    # DLManagedTensorVersioned: version, manager_ctx, deleter, flags, then dl_tensor.data.
    return ctypes.c_void_p.from_address(_get(capsule, b"dltensor_versioned") + 32).value
"""

# How devbuf touches the memory next; each must see the consumer's bytes (7).
READERS = {
    "to_bytes": "set(memory.to_bytes())",
    "copy_from": "copied(memory)",
    "pickle": "set(pickle.loads(pickle.dumps(memory, protocol=5)).to_bytes())",
    "np.asarray": "set(np.asarray(memory).tolist())",
    "np.from_dlpack(cpu)": "set(np.from_dlpack(memory, device='cpu').tolist())",
    "get(stream=R)": "set(memory.view('uint8').get(stream=devbuf.Stream('cuda:0')).tolist())",
}
HOST_VIEWS = ["np.asarray", "np.from_dlpack(cpu)"]


@pytest.fixture(scope="module")
def cuda():
    return require_backend("cuda")


@pytest.fixture(scope="module")
def numba(cuda):
    pytest.importorskip("numba.cuda")


def scenario(*parts, reader):
    """The parts of a scenario (each dedented on its own), then `reader`'s check."""
    check = f"""
    import pickle

    def copied(memory):
        other = devbuf.alloc(N, "device", device="cuda:0")
        other.copy_from(memory)
        return set(other.to_bytes())

    seen = {READERS[reader]}
    assert seen == {{7}}, f"{reader} read {{seen}}, not the consumer's bytes"
    """
    run("\n".join(textwrap.dedent(part) for part in (BUSY, *parts, check)))


def cases(kinds, readers):
    return [
        pytest.param(kind, reader, id=f"{kind}-{reader}")
        for kind in kinds
        for reader in readers
        if reader not in HOST_VIEWS or kind != "device"
    ]


@pytest.mark.parametrize("copy", ["device-to-device", "pageable-to-device"])
@pytest.mark.parametrize("kind, reader", cases(["device", "shared"], READERS))
def test_numba_copies_on_the_legacy_stream_come_before_devbuf(numba, kind, reader, copy):
    source = "numba_cuda.to_device(sevens)" if copy == "device-to-device" else "sevens"
    scenario(
        NUMBA,
        f"""
        memory = devbuf.alloc(N, "{kind}", device="cuda:0")
        memory.fill(0)
        theirs = numba_cuda.as_cuda_array(memory)  # CAI stream None: Numba works on stream 0
        sevens = np.full(N, 7, np.uint8)
        busy(1)
        theirs.copy_to_device({source})  # returns before the copy ran (the driver's rules)
        """,
        reader=reader,
    )


@pytest.mark.parametrize("kind", ["host", "shared"])
def test_numba_async_copies_on_the_default_stream_come_before_host_views(numba, kind):
    scenario(
        NUMBA,
        f"""
        memory = devbuf.alloc(N, "{kind}", device="cuda:0")
        memory.fill(0)
        theirs = numba_cuda.as_cuda_array(memory)
        busy(1)
        theirs.copy_to_device(np.full(N, 7, np.uint8), stream=numba_cuda.default_stream())
        """,
        reader="np.asarray",
    )


@pytest.mark.parametrize("kind, reader", cases(["device", "host"], ["to_bytes", "np.asarray"]))
def test_numbas_documented_event_recipe_orders_its_stream_before_devbuf(numba, kind, reader):
    # The CUDA Array Interface's "Synchronization in Numba": work on another stream is followed by
    # an event the array's default stream waits for (stream 0, the legacy stream, here).
    scenario(
        NUMBA,
        f"""
        memory = devbuf.alloc(N, "{kind}", device="cuda:0")
        memory.fill(0)
        theirs = numba_cuda.as_cuda_array(memory)
        kernel_stream = numba_cuda.stream()
        busy(int(kernel_stream.handle))
        theirs.copy_to_device(numba_cuda.to_device(np.full(N, 7, np.uint8)), stream=kernel_stream)
        event = numba_cuda.event()
        event.record(stream=kernel_stream)
        event.wait(stream=theirs.stream)
        """,
        reader=reader,
    )


def test_devbuf_commands_come_after_numba_writes_on_the_legacy_stream(numba):
    scenario(
        NUMBA,
        """
        memory = devbuf.alloc(N, "device", device="cuda:0")
        memory.fill(0)
        theirs = numba_cuda.as_cuda_array(memory)
        busy(1)
        theirs.copy_to_device(numba_cuda.to_device(np.full(N, 5, np.uint8)))
        memory.fill(7)  # must land after Numba's copy, not under it
        synchronize(1)  # Numba's copy has run, whenever devbuf's fill did
        """,
        reader="to_bytes",
    )


@pytest.mark.parametrize("kind, reader", cases(["device", "shared"], READERS))
def test_a_dlpack_consumer_on_the_legacy_stream_comes_before_devbuf(cuda, kind, reader):
    # DLPack: stream=None means the legacy default stream for CUDA; the consumer works there.
    scenario(
        DLPACK_DATA,
        f"""
        memory = devbuf.alloc(N, "{kind}", device="cuda:0")
        memory.fill(0)
        capsule = memory.__dlpack__(stream=None, max_version=(1, 0))
        busy(1)
        memset(dlpack_data(capsule), 7, N, 1)
        """,
        reader=reader,
    )


@pytest.mark.parametrize("kind, reader", cases(["host", "shared"], HOST_VIEWS + ["to_bytes"]))
def test_a_cai_consumer_on_devbufs_own_stream_comes_before_host_views(cuda, kind, reader):
    scenario(
        f"""
        memory = devbuf.alloc(N, "{kind}", device="cuda:0")
        memory.fill(0)
        gate = Gate(memory.queue.stream)
        memory.fill(1, blocking=False)  # pending: the export names devbuf's stream
        interface = memory.__cuda_array_interface__
        assert interface["stream"] == memory.queue.stream
        busy(interface["stream"])
        gate.release()
        memset(interface["data"][0], 7, N, interface["stream"])
        """,
        reader=reader,
    )


@pytest.mark.parametrize("kind, reader", cases(["host", "shared"], HOST_VIEWS))
def test_an_exchange_table_consumer_on_its_work_stream_comes_before_host_views(cuda, kind, reader):
    scenario(
        f"""
        import sys
        sys.path.insert(0, {str(pathlib.Path(__file__).parent)!r})
        from consumer import load

        memory = devbuf.alloc(N, "{kind}", device="cuda:0")
        memory.fill(0)
        consumer = load()
        data = consumer.describe(memory)["data"]
        stream = consumer.current_stream(memory, *memory.__dlpack_device__())
        busy(stream)
        memset(data, 7, N, stream)
        """,
        reader=reader,
    )


@pytest.mark.parametrize("kind, reader", cases(["device", "host"], ["to_bytes", "np.asarray"]))
def test_work_on_a_private_stream_is_handed_over_through_the_legacy_stream(cuda, kind, reader):
    # A consumer's own non-blocking stream is out of devbuf's sight (the user's part,
    # docs/guide/ordering.md): an event the legacy stream waits for hands the ordering over,
    # without blocking the host.
    scenario(
        f"""
        memory = devbuf.alloc(N, "{kind}", device="cuda:0")
        memory.fill(0)
        data = memory.__cuda_array_interface__["data"][0]
        private = new_stream()  # CU_STREAM_NON_BLOCKING
        busy(private)
        memset(data, 7, N, private)
        event = ctypes.c_void_p()
        ok(cu.cuEventCreate(ctypes.byref(event), 2))
        ok(cu.cuEventRecord(event, ctypes.c_void_p(private)))
        ok(cu.cuStreamWaitEvent(ctypes.c_void_p(1), event, 0))  # the one line of the user's part
        """,
        reader=reader,
    )
