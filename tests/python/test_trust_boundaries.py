"""Trust boundaries past the descriptors (issue 39): what a memory resource written in Python
returns is untrusted input, checked by the runtime as import descriptors are; nothing allocated is
lost when a call fails after allocating; import owners take part in garbage collection; what a
Python resource raises reaches the caller as raised; stream and device arguments are refused in
devbuf's words, naming the argument. Scenarios that crashed the process before run in a child
process. SYCL runs for real; CUDA runs on the CUDA test driver (not a GPU) when it is loaded."""

import gc
import os
import pickle
import subprocess
import sys
import textwrap
import weakref

import numpy as np
import pytest

import devbuf
import devbuf.mr as mr
from conftest import backend_names, require_backend
from test_cuda_ordering import PRELUDE as CUDA_PRELUDE

HERE = os.path.dirname(os.path.abspath(__file__))

RESOURCE = textwrap.dedent(
    """
    import numpy as np
    import devbuf, devbuf.mr as mr

    class Liar(mr.MemoryResource):
        \"\"\"Returns what `value(nbytes, kind)` says, and counts what it is given back.\"\"\"

        def __init__(self, device, value):
            super().__init__(device)
            self.value = value
            self.back = []

        def allocate(self, nbytes, kind="shared"):
            return self.value(nbytes, kind)

        def deallocate(self, ptr, nbytes, kind="shared"):
            self.back.append(ptr)

    HOST_MEMORY = np.zeros(1 << 16, np.uint8)
    HOST_ADDRESS = (HOST_MEMORY.ctypes.data + 255) // 256 * 256
    """
)


def in_child(script, device="host"):
    """Runs `script` after RESOURCE (and the CUDA prelude, for CUDA) in a fresh process: a crash
    there fails the test instead of ending the run."""
    prelude = (CUDA_PRELUDE if device.startswith("cuda") else "") + RESOURCE
    result = subprocess.run(
        [sys.executable, "-c", prelude + textwrap.dedent(script)],
        cwd=HERE,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, f"exit {result.returncode}\n{result.stdout}{result.stderr}"
    return result.stdout


# Every backend whose runtime classifies addresses: all but the host's, which takes any address as
# host memory (nothing can tell it from garbage).
@pytest.fixture(params=[name for name in backend_names() if name != "host"])
def device(request):
    require_backend(request.param)
    return request.param


# -- Addresses from Python resources, classified by the runtime.


def test_an_address_the_runtime_does_not_know_is_refused_naming_the_resource(device):
    # Before: SYCL segfaulted inside Intel's runtime on fill(), CUDA on to_bytes().
    in_child(
        f"""
        liar = Liar("{device}", lambda nbytes, kind: HOST_ADDRESS)
        try:
            buffer = devbuf.alloc(8192, "device", mr=liar)
            buffer.fill(1)
            buffer.to_bytes()
            raise SystemExit("an address the runtime does not know was taken as device memory")
        except ValueError as refused:
            message = str(refused)
        assert message.startswith(f"Liar.allocate returned {{HOST_ADDRESS:#x}} for 8192 bytes of device memory"), message
        assert "the runtime does not know the address" in message, message
        assert liar.back == [HOST_ADDRESS], "what was handed out goes back"
        """,
        device,
    )


def test_memory_of_another_kind_is_refused_naming_the_resource(device):
    # Before: CUDA device memory returned for kind "host" segfaulted on np.asarray(b)[0].
    in_child(
        f"""
        upstream = mr.QueueMemoryResource("{device}")
        liar = Liar("{device}", lambda nbytes, kind: upstream.allocate(nbytes, "device"))
        try:
            buffer = devbuf.alloc(4096, "host", mr=liar)
            np.asarray(buffer)[0]
            raise SystemExit("device memory was taken as host memory")
        except ValueError as refused:
            message = str(refused)
        assert message.startswith("Liar.allocate returned 0x"), message
        assert "the runtime classifies it as device memory" in message, message
        assert len(liar.back) == 1
        upstream.deallocate(liar.back[0], 4096, "device")
        """,
        device,
    )


def test_a_span_that_wraps_past_the_end_of_the_address_space_is_refused():
    # Before: accepted, and its slices started at 0x0.
    out = in_child(
        """
        liar = Liar("host", lambda nbytes, kind: 2**64 - 4096)
        try:
            devbuf.alloc(8192, "host", mr=liar)
        except ValueError as refused:
            print(refused)
        assert liar.back == [2**64 - 4096]
        """
    )
    assert "Liar.allocate returned 0xfffffffffffff000 for 8192 bytes of host memory" in out
    assert "wraps past the end of the address space" in out


@pytest.mark.parametrize("selector", ["host", "cuda"])
def test_a_span_past_the_allocation_that_holds_it_is_refused(selector):
    # Host and CUDA bound their allocations; SYCL's runtime does not (docs/guide/memory-resources.md).
    if selector != "host":
        require_backend(selector)
    upstream = mr.QueueMemoryResource(selector)
    handed = []

    class Short(mr.MemoryResource):
        def allocate(self, nbytes, kind="shared"):
            handed.append(upstream.allocate(nbytes // 2, kind))
            return handed[-1]

        def deallocate(self, ptr, nbytes, kind="shared"):
            upstream.deallocate(ptr, nbytes // 2, kind)
            handed.remove(ptr)

    with pytest.raises(ValueError, match=r"^Short.allocate returned 0x[0-9a-f]+ for 8192 bytes of device memory .*: it reaches past the end of the 4096-byte allocation"):
        devbuf.alloc(8192, "device", mr=Short(selector))
    assert handed == [], "what was handed out goes back"


class Passing(mr.MemoryResource):
    """Hands out its upstream's memory, as a well-behaved resource does."""

    def __init__(self, upstream):
        super().__init__(upstream_mr=upstream)

    def allocate(self, nbytes, kind="shared"):
        return self.upstream_mr.allocate(nbytes, kind)

    def deallocate(self, ptr, nbytes, kind="shared"):
        self.upstream_mr.deallocate(ptr, nbytes, kind)


def test_memory_the_runtime_vouches_for_is_served():
    for device in [d for d in devbuf.devices() if d.usable]:
        for kind in device.kinds:
            buffer = devbuf.alloc(4096, kind, mr=Passing(mr.QueueMemoryResource(device)))
            buffer.fill(7)
            assert buffer.to_bytes() == b"\7" * 4096


# -- No allocation without an owner.


def test_allocate_with_a_stream_it_cannot_order_on_gives_the_memory_back():
    # Before: 200 failed calls kept 200 MiB until the resource died.
    require_backend("cuda")
    in_child(
        """
        tracking = mr.TrackingResourceAdaptor(mr.QueueMemoryResource("cuda"))
        handle = new_stream()
        stream = devbuf.Stream.from_handle(handle)
        ok(cu.cuStreamDestroy_v2(ctypes.c_void_p(handle)))  # its owner destroyed it
        for _ in range(200):
            try:
                tracking.allocate(1 << 20, "device", stream=stream)
                raise SystemExit("ordered on a destroyed stream")
            except RuntimeError:
                pass
        assert tracking.get_allocated_bytes() == 0, tracking.get_allocated_bytes()
        """,
        "cuda",
    )


# -- Import owners in garbage collection.


class Keeping(bytearray):
    """Bytes (buffer protocol only) that keep what was imported from them: an exporter in a cycle."""


class SuaiKeeping:
    def __init__(self, memory):
        self.memory = memory
        self.__sycl_usm_array_interface__ = memory.__sycl_usm_array_interface__


class CaiKeeping:
    def __init__(self, memory):
        self.memory = memory
        self.__cuda_array_interface__ = memory.__cuda_array_interface__


class PickleKeeping(bytearray):
    """Out-of-band pickle data that keeps what was rebuilt from it."""


def buffer_protocol_cycle():
    exporter = Keeping(range(64))
    exporter.imported = devbuf.asarray(exporter)
    return exporter


def suai_cycle():
    exporter = SuaiKeeping(devbuf.alloc(64, "shared", device="sycl"))
    exporter.imported = devbuf.asarray(exporter)
    return exporter


def cai_cycle():
    exporter = CaiKeeping(devbuf.alloc(64, "device", device="cuda"))
    exporter.imported = devbuf.asarray(exporter)
    return exporter


def pickle_cycle():
    buffers = []
    data = pickle.dumps(devbuf.alloc(64, "host", device="host"), protocol=5, buffer_callback=buffers.append)
    exporter = PickleKeeping(buffers[0].raw())
    exporter.rebuilt = pickle.loads(data, buffers=[exporter])
    return exporter


@pytest.mark.parametrize(
    ("make", "backend"),
    [(buffer_protocol_cycle, "host"), (suai_cycle, "sycl"), (cai_cycle, "cuda"), (pickle_cycle, "host")],
    ids=["buffer-protocol", "suai", "cai", "pickle-rebuilder"],
)
def test_a_cycle_through_an_import_owner_is_collected(make, backend, collect):
    require_backend(backend)
    alive = [weakref.ref(make()) for _ in range(100)]
    collect()
    assert sum(ref() is not None for ref in alive) == 0, "cycles through an import's owner survived gc.collect()"


def test_an_import_whose_memory_other_views_share_is_not_counted_twice(collect):
    # The owner is reported only by the sole holder of the allocation: a view keeps it alive.
    exporter = Keeping(range(64))
    exporter.imported = devbuf.asarray(exporter)
    view = exporter.imported.buffer  # another object viewing the same allocation
    gone = weakref.ref(exporter)
    del exporter
    collect()
    assert gone() is not None and bytes(np.asarray(view)) == bytes(range(64))
    del view
    collect()
    assert gone() is None


# -- What a Python resource raises reaches the caller as raised.


class Unlucky(Exception):
    pass


def test_what_python_allocate_raises_reaches_the_caller_as_raised_through_any_chain():
    raised = []

    class Refusing(mr.MemoryResource):
        def allocate(self, nbytes, kind="shared"):
            raised.append(Unlucky(f"no room for {nbytes}"))
            raise raised[-1]

        def deallocate(self, ptr, nbytes, kind="shared"):
            raise AssertionError("never handed out")

    refusing = Refusing("host")
    chains = [
        mr.PoolMemoryResource(refusing),
        mr.PoolMemoryResource(mr.StatisticsResourceAdaptor(refusing), maximum_pool_size=1 << 30),
        mr.TrackingResourceAdaptor(mr.PoolMemoryResource(refusing)),
        mr.LimitingResourceAdaptor(mr.StatisticsResourceAdaptor(mr.PoolMemoryResource(refusing)), 1 << 30),
    ]
    for chain in chains:
        raised.clear()
        with pytest.raises(Unlucky) as caught:
            devbuf.alloc(8, "host", mr=chain)
        # A pool that retries raises what the first call raised.
        assert caught.value is raised[0], "the very exception the resource raised"


def test_a_resource_that_allocates_through_its_own_pool_gets_a_recursion_error():
    # Before: the pool turned the documented RecursionError into MemoryError.
    class Itself(mr.MemoryResource):
        def allocate(self, nbytes, kind="shared"):
            return devbuf.alloc(nbytes, kind, device="host").ptr  # through the current resource

        def deallocate(self, ptr, nbytes, kind="shared"):
            pass

    pool = mr.PoolMemoryResource(Itself("host"))
    mr.set_current_device_resource(pool, kind="host")
    try:
        with pytest.raises(RecursionError, match="Itself.allocate allocated from itself"):
            devbuf.alloc(8, "host", device="host")
    finally:
        mr.set_current_device_resource(mr.QueueMemoryResource("host"), kind="host")


# -- Stream and device arguments, in devbuf's words.


@pytest.mark.parametrize("selector", ["host", "sycl", "nope", "opencl:0:0", ""])
def test_stream_from_handle_refuses_a_device_that_cannot_own_the_handle(selector):
    # Before: "host", "sycl" and "nope" adopted the handle on cuda:0; "opencl:0:0" named a
    # selector "cuda:0:0" the user never wrote.
    if not any(b.name == "cuda" for b in devbuf.backends()):
        pytest.skip("the cuda backend is not compiled in")
    with pytest.raises(ValueError, match=rf'^device: "{selector}" cannot own a cuda stream handle: name a cuda device'):
        devbuf.Stream.from_handle(1, device=selector)


def test_a_stream_handle_the_protocol_refuses_names_the_argument_it_came_in():
    # Before: "stream: 0 is ambiguous ..." for an argument the caller passed as `handle`.
    require_backend("cuda")
    with pytest.raises(ValueError, match=r"^handle: 0 is ambiguous"):
        devbuf.Stream.from_handle(0)


def test_the_stream_protocols_zero_is_the_legacy_default_stream():
    # Numba's default_stream() says (0, 0); cuda.core and RMM adopt it as the legacy default
    # stream. Before: "__cuda_stream__: 0 is ambiguous", CAI's rule, which CAI keeps.
    require_backend("cuda")

    class NumbaDefault:
        def __cuda_stream__(self):
            return (0, 0)

    adopted = devbuf.Stream(NumbaDefault())
    assert adopted.__cuda_stream__() == (0, 1) == devbuf.Stream.from_handle(1).__cuda_stream__()
    assert devbuf.alloc(8, "device", adopted).nbytes == 8

    class Later:
        def __cuda_stream__(self):
            return (1, 0)

    with pytest.raises(NotImplementedError, match=r"^__cuda_stream__: unsupported protocol version: '1'"):
        devbuf.Stream(Later())


def test_an_existing_stream_keeps_its_flags():
    # Before: the flags were silently ignored for a stream that exists already.
    stream = devbuf.Stream("host")
    assert devbuf.Stream(stream) is stream
    for flags in [{"non_blocking": True}, {"non_blocking": False}, {"priority": 0}, {"timing": True}]:
        with pytest.raises(ValueError, match="flags may only be specified when making a new one"):
            devbuf.Stream(stream, **flags)


CALLS = {
    "fill": lambda memory, stream: memory.fill(1, stream=stream),
    "copy_from": lambda memory, stream: memory.copy_from(bytes(64), stream=stream),
    "get": lambda memory, stream: memory.get(stream=stream),
    "to_bytes": lambda memory, stream: memory.to_bytes(stream=stream),
    "copy_to_host": lambda memory, stream: memory.copy_to_host(stream=stream),
}


@pytest.mark.parametrize("call", CALLS)
def test_a_stream_of_another_device_is_a_value_error_naming_stream(device, call):
    # Before: "the queue cannot reach Buffer { ptr: …, len: … }", naming no argument.
    memory = devbuf.alloc(64, "device", device=device)
    # (A stream of another CUDA device may reach the memory peer to peer: not another device here.)
    for stream in [devbuf.Stream("host")]:
        with pytest.raises(ValueError) as refused:
            CALLS[call](memory, stream)
        message = str(refused.value)
        selector = memory.device.selector
        assert message.startswith(f'stream: a stream of "{stream.device.selector}" cannot reach the 64 bytes of device memory on "{selector}"'), message
        assert f'pass a stream of "{selector}", or none' in message
        assert "Buffer {" not in message and "Some(" not in message


def test_the_resource_and_stream_fuzzer_short_profile():
    # ci/soak runs 10^6 inputs (RELIABILITY.md).
    from fuzz_surfaces import run

    tally = run(int(os.environ.get("DEVBUF_SURFACE_FUZZ_INPUTS", "2000")), seed=39)
    assert sum(accepted for accepted, _ in tally.values()) > 0 and sum(refused for _, refused in tally.values()) > 0


# -- A CUDA primary context reset by another library.

RESETS = {
    # Numba's cuda.close() calls cuDevicePrimaryCtxReset; the driver call itself, for when Numba
    # is not installed.
    "numba": "from numba import cuda\ncuda.current_context()\ncuda.close()",
    "driver": "ok(cu.cuDevicePrimaryCtxReset_v2(_device))",
}


@pytest.mark.parametrize("reset", RESETS)
def test_no_new_host_view_of_memory_that_died_with_a_reset_context(reset):
    # Before: np.asarray, memoryview and pickle-5 handed out the freed pages and segfaulted.
    require_backend("cuda")
    if reset == "numba":
        pytest.importorskip("numba.cuda")
    in_child(
        f"""
        import pickle
        pinned = devbuf.alloc(1 << 22, "host", device="cuda:0")
        np.asarray(pinned)[:] = 3
        kept = np.asarray(pinned)  # a view handed out before: the reset is its library's doing
        exec({RESETS[reset]!r})
        views = {{
            "np.asarray": lambda: np.asarray(pinned),
            "memoryview": lambda: memoryview(pinned),
            "pickle-5": lambda: pickle.dumps(pinned, protocol=5, buffer_callback=lambda b: None),
        }}
        for name, view in views.items():
            try:
                view()
                raise SystemExit(f"{{name}} handed out memory that died with the context")
            except RuntimeError as refused:
                assert "primary context of cuda:0 was reset" in str(refused), str(refused)
        # A stream made after the reset lives in the new context: its memory is served.
        fresh = devbuf.alloc(64, "host", device="cuda:0", stream=devbuf.Stream("cuda:0"))
        np.asarray(fresh)[:] = 1
        assert fresh.to_bytes() == b"\\1" * 64
        """,
        "cuda",
    )


def test_a_memory_error_a_python_resource_raises_is_running_out_of_memory_to_a_failure_callback():
    # As RMM's failure callback adaptor acts on its upstream's out_of_memory; other exceptions
    # reach the caller without asking the callback.
    raised, asked = [], []

    class Exhausted(mr.MemoryResource):
        def allocate(self, nbytes, kind="shared"):
            raised.append(self.error(f"no room for {nbytes}"))
            raise raised[-1]

        def deallocate(self, ptr, nbytes, kind="shared"):
            raise AssertionError("never handed out")

    def callback(nbytes):
        asked.append(nbytes)
        return len(asked) < 3  # retry twice, then give up

    resource = Exhausted("host")
    resource.error = MemoryError
    with pytest.raises(MemoryError) as caught:
        devbuf.alloc(64, "host", mr=mr.FailureCallbackResourceAdaptor(resource, callback))
    assert asked == [64, 64, 64] and caught.value is raised[-1] and len(raised) == 3
    raised.clear(), asked.clear()
    resource.error = Unlucky
    with pytest.raises(Unlucky) as caught:
        devbuf.alloc(64, "host", mr=mr.FailureCallbackResourceAdaptor(resource, callback))
    assert asked == [] and caught.value is raised[0]
