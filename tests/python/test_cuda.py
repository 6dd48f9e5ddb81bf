"""The CUDA backend from Python: CAI v3 with its stream rules, DLPack devices and streams, and
zero-copy hand-off with Numba, CuPy, PyTorch and cuda.core, in both directions.

Every test needs the CUDA backend and skips with its own reason where there is none
(DEVBUF_REQUIRE=cuda turns that skip into a failure). ci/test runs them against the devbuf CUDA
test driver; those that launch kernels (the `kernels` fixture) need a real GPU (ci/gpu)."""

import importlib

import numpy as np
import pytest

import devbuf
from conftest import require_backend, require_numba_kernels

N = 1 << 20
ROOT = __import__("pathlib").Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def cuda():
    info = require_backend("cuda")
    return info.devices[0]


@pytest.fixture(scope="module")
def kernels(cuda):
    """Tests that launch kernels need a GPU: the devbuf CUDA test driver loads no modules."""
    if "test driver" in cuda.name:
        pytest.skip(f"kernels need a GPU; {cuda.name!r} runs no kernels")
    return cuda


def library(name):
    try:
        return importlib.import_module(name)
    except ImportError as err:
        pytest.skip(f"{name} is not installed: {err}")


def test_cuda_is_listed_with_its_kinds(cuda):
    assert cuda.usable and cuda.selector == "cuda:0"
    assert set(cuda.kinds) == {"host", "device", "shared"}
    assert devbuf.Device("cuda").queue.stream not in (None, 0)


@pytest.mark.parametrize("kind,dlpack", [("device", (2, 0)), ("host", (3, 0)), ("shared", (13, 0))])
def test_each_kind_exports_cai_v3_and_its_dlpack_device(cuda, kind, dlpack):
    buffer = devbuf.alloc(4096, kind, device="cuda")
    view = buffer.view("float32", shape=(32, 32))
    cai = view.__cuda_array_interface__
    assert cai["version"] == 3 and cai["typestr"] == "<f4" and cai["shape"] == (32, 32)
    assert cai["data"] == (buffer.ptr, False) and cai["strides"] is None
    # A stream-ordered allocation is pending work on its stream until the stream reaches it.
    assert cai["stream"] in (None, buffer.queue.stream)
    assert view.__dlpack_device__() == dlpack
    assert not hasattr(view, "__sycl_usm_array_interface__")
    strided = buffer.view("float32", shape=(16,), strides=(-8,), offset=128)
    assert strided.__cuda_array_interface__["strides"] == (-8,)
    assert buffer.view("uint8", shape=(0,)).__cuda_array_interface__["data"][0] == 0


def test_pinned_and_managed_memory_reach_numpy_zero_copy(cuda):
    for kind in ("host", "shared"):
        buffer = devbuf.alloc(64, kind, device="cuda")
        buffer.copy_from(bytes(range(64)))
        view = np.from_dlpack(buffer)
        assert view.ctypes.data == buffer.ptr and view.tobytes() == bytes(range(64))
    device = devbuf.alloc(64, "device", device="cuda")
    with pytest.raises(BufferError):
        memoryview(device)
    # NumPy reads no kDLCUDA tensor: RuntimeError before NumPy 2.5, BufferError since.
    with pytest.raises((RuntimeError, BufferError), match="Unsupported device"):
        np.from_dlpack(device.view("uint8"))
    device.fill(7)
    copy = np.from_dlpack(device.view("uint8"), device="cpu")  # dl_device=(1, 0): a host copy
    assert copy.ctypes.data != device.ptr and copy.tobytes() == bytes([7] * 64)


def test_pending_work_names_its_stream_and_consumers_see_completed_data(kernels):
    cupy = library("cupy")
    buffer = devbuf.alloc(N * 4, "device", device="cuda")
    buffer.fill(0)
    buffer.fill(1, blocking=False)
    stream = buffer.__cuda_array_interface__["stream"]
    assert stream in (None, buffer.queue.stream)  # None only once the fill has finished
    theirs = cupy.asarray(buffer.view("uint8"))
    assert int(theirs.sum()) == N * 4  # CuPy synchronized on our stream before reading
    buffer.synchronize()
    # Handed out to CuPy now, which may still work on it on the legacy stream: a re-export names
    # devbuf's stream, which follows that work (docs/guide/ordering.md), even with ours done.
    assert buffer.__cuda_array_interface__["stream"] == buffer.queue.stream
    untouched = devbuf.alloc(64, "device", device="cuda")
    untouched.fill(0)
    assert untouched.__cuda_array_interface__["stream"] is None  # a first export, nothing pending
    devbuf.set_cai_export_stream(False)
    try:
        buffer.fill(2, blocking=False)
        assert buffer.__cuda_array_interface__["stream"] is None
    finally:
        devbuf.set_cai_export_stream(True)
        buffer.synchronize()


def test_a_test_double_says_so_everywhere(cuda):
    import subprocess
    import sys

    if not cuda.test_double:
        assert cuda.vendor == "NVIDIA"
        return
    assert "not a GPU" in cuda.test_double and "test driver" in cuda.name
    assert cuda.vendor != "NVIDIA"
    info = subprocess.run([sys.executable, "-m", "devbuf", "info"], capture_output=True, text=True, check=True)
    assert f"NOT HARDWARE: {cuda.test_double}" in info.stdout
    bench = subprocess.run([sys.executable, "ci/bench_cuda.py"], capture_output=True, text=True, check=True, cwd=ROOT)
    assert bench.stdout.startswith("no GPU:") and "|" not in bench.stdout  # no table from a double
    # Nor is it ever the device devbuf picks by itself: only a selector naming it opens it.
    env = {k: v for k, v in __import__("os").environ.items() if k != "DEVBUF_DEVICE"}
    probe = "import devbuf; print(devbuf.default_device().selector); print(devbuf._devbuf._default_device_reason())"
    chosen = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, env=env)
    selector, reason = chosen.stdout.splitlines()
    assert not selector.startswith("cuda"), chosen.stdout
    assert "cuda:0 is not hardware" in reason, reason


def test_dlpack_stream_argument_rules(cuda):
    buffer = devbuf.alloc(1024, "device", device="cuda")
    for stream in (None, -1, 1, 2, devbuf.Device("cuda").queue.stream):
        buffer.__dlpack__(stream=stream, max_version=(1, 0))
    with pytest.raises(ValueError, match="stream"):
        buffer.__dlpack__(stream=0, max_version=(1, 0))


def test_numba_takes_devbuf_arrays_and_launches_kernels_on_them(kernels):
    numba_cuda = library("numba.cuda")
    require_numba_kernels()

    @numba_cuda.jit
    def add(a, b, out):
        i = numba_cuda.grid(1)
        if i < out.size:
            out[i] = a[i] + b[i]

    a, b, out = (devbuf.alloc(N * 4, "device", device="cuda").view("float32") for _ in range(3))
    a.copy_from(np.arange(N, dtype=np.float32))
    b.copy_from(np.full(N, 2.0, dtype=np.float32))
    add[(N + 255) // 256, 256](a, b, out)
    numba_cuda.synchronize()
    result = np.frombuffer(out.to_bytes(), dtype=np.float32)
    np.testing.assert_array_equal(result, np.arange(N, dtype=np.float32) + 2)
    view = numba_cuda.as_cuda_array(out)
    assert view.__cuda_array_interface__["data"][0] == out.ptr
    theirs = numba_cuda.to_device(np.arange(10, dtype=np.int64))
    imported = devbuf.asarray(theirs)
    assert imported.ptr == theirs.__cuda_array_interface__["data"][0] and imported.kind == "device"
    assert imported.to_bytes() == np.arange(10, dtype=np.int64).tobytes()


def test_cupy_both_ways_including_a_pending_cupy_stream(kernels):
    cupy = library("cupy")
    a = devbuf.alloc(N * 8, "device", device="cuda").view("float64")
    a.copy_from(np.arange(N, dtype=np.float64))
    theirs = cupy.asarray(a)
    assert theirs.data.ptr == a.ptr and float(theirs.sum()) == float(np.arange(N).sum())
    theirs *= 2  # CuPy writes devbuf memory
    assert np.frombuffer(a.to_bytes(), dtype=np.float64)[-1] == 2 * (N - 1)
    with cupy.cuda.Stream(non_blocking=True) as stream:
        pending = cupy.ones(N * 16, dtype=cupy.float32) * 3
        assert pending.__cuda_array_interface__["stream"] == stream.ptr
        imported = devbuf.asarray(pending)  # our queue now waits for CuPy's stream
        assert imported.ptr == pending.data.ptr
    assert np.frombuffer(imported.to_bytes(), dtype=np.float32).min() == 3


def test_torch_both_ways(kernels):
    torch = library("torch")
    a = devbuf.alloc(1024 * 4, "device", device="cuda").view("int32")
    a.copy_from(np.arange(1024, dtype=np.int32))
    theirs = torch.from_dlpack(a)
    assert theirs.is_cuda and theirs.data_ptr() == a.ptr and int(theirs.sum()) == 1024 * 1023 // 2
    theirs += 1
    assert np.frombuffer(a.to_bytes(), dtype=np.int32)[0] == 1
    mine = torch.arange(100, dtype=torch.float16, device="cuda")
    imported = devbuf.asarray(mine)
    assert imported.ptr == mine.data_ptr() and imported.dtype == "float16"
    assert imported.to_bytes() == mine.cpu().numpy().tobytes()
    bf16 = torch.ones(8, dtype=torch.bfloat16, device="cuda")
    assert devbuf.asarray(bf16).dtype == "bfloat16"
    with pytest.raises(BufferError):
        torch.from_dlpack(devbuf.alloc(16, "host", device="cuda"))  # torch refuses kDLCUDAHost


def test_cuda_core_strided_memory_view(cuda):
    utils = None
    for name in ("cuda.core.utils", "cuda.core.experimental.utils"):
        try:
            utils = importlib.import_module(name)
            break
        except ImportError:
            continue
    if utils is None or not hasattr(utils, "StridedMemoryView"):
        pytest.skip("cuda.core with StridedMemoryView is not installed")
    a = devbuf.alloc(4096, "device", device="cuda").view("float32", shape=(32, 32))
    stream = devbuf.Device("cuda").queue.stream
    if hasattr(utils.StridedMemoryView, "from_dlpack"):
        view = utils.StridedMemoryView.from_dlpack(a, stream_ptr=stream)
    else:
        view = utils.StridedMemoryView(a, stream_ptr=stream)
    assert view.ptr == a.ptr and tuple(view.shape) == (32, 32)


def test_exchange_table_reports_our_stream(cuda):
    from consumer import load

    stream = load().current_stream(devbuf.alloc(1, device="cuda"), 2, 0)
    assert stream == devbuf.Device("cuda:0").queue.stream


def test_malformed_cai_names_the_key(cuda):
    buffer = devbuf.alloc(64, "device", device="cuda")

    class Producer:
        def __init__(self, **changes):
            self.__cuda_array_interface__ = {**buffer.__cuda_array_interface__, **changes}

    with pytest.raises(ValueError, match="stream"):
        devbuf.asarray(Producer(stream=0))
    with pytest.raises(ValueError, match="data"):
        devbuf.asarray(Producer(data=(np.zeros(8).ctypes.data, False)))
    assert devbuf.asarray(Producer()).ptr == buffer.ptr


def child_claims_past_allocations(done):
    """Each kind's 4 KiB allocation, described by CAI and by DLPack as more than it holds; a fill
    past 4 KiB of such an import wrote from the host at a device address (a segfault)."""
    import devbuf
    from dlpack_craft import KDL_CUDA, KDL_CUDA_HOST, KDL_CUDA_MANAGED, CraftedTensor, Producer

    outcomes = []
    for kind, device_type in (("device", KDL_CUDA), ("host", KDL_CUDA_HOST), ("shared", KDL_CUDA_MANAGED)):
        buffer = devbuf.alloc(4096, kind, device="cuda")

        class Claim:
            def __init__(self, shape, strides=None):
                self.__cuda_array_interface__ = {
                    "version": 3,
                    "shape": shape,
                    "typestr": "|u1",
                    "data": (buffer.ptr, False),
                    "strides": strides,
                    "stream": None,
                }

        claims = [
            Claim((1 << 20,)),
            Claim((2,), (8192,)),
            Producer(CraftedTensor(data=buffer.ptr, device=(device_type, 0), dtype=(1, 8, 1), shape=(8192,), strides=(1,))),
        ]
        for claim in claims:
            try:
                imported = devbuf.asarray(claim)
                imported.buffer[8192:8200].fill(1)
                outcomes.append(f"{kind}: imported")
            except ValueError as refused:
                outcomes.append(str(refused).split(":")[0])
        assert devbuf.asarray(Claim((4096,))).buffer.nbytes == 4096
    done.put(outcomes)


def test_a_claim_past_its_allocation_is_refused_naming_the_key(cuda):
    import multiprocessing

    spawn = multiprocessing.get_context("spawn")
    done = spawn.Queue()
    child = spawn.Process(target=child_claims_past_allocations, args=(done,))
    child.start()
    child.join(120)
    assert child.exitcode == 0, f"the importer died: exit code {child.exitcode}"
    assert done.get(timeout=10) == ["shape", "strides", "shape"] * 3


def test_copies_between_two_cuda_devices():
    # Between peer devices the copy runs device to device (cuMemcpyPeerAsync); the Rust suite
    # (crates/devbuf-cuda/tests/ordering.rs) shows its ordering and the non-peer answer.
    info = require_backend("cuda")
    if len(info.devices) < 2:
        pytest.skip("needs two CUDA devices")
    on_one = devbuf.alloc(1 << 16, "device", device="cuda:1")
    on_one.fill(3)
    on_zero = devbuf.alloc(1 << 16, "device", device="cuda:0")
    on_zero.copy_from(on_one)
    assert on_zero.to_bytes() == b"\x03" * (1 << 16)
    on_zero.fill(4)
    on_one.copy_from(on_zero)
    assert on_one.to_bytes() == b"\x04" * (1 << 16)
