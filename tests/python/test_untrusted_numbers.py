"""Untrusted numbers, strings and callbacks on the newer surfaces (issue 45): every case below
crashed the process, panicked, wrote outside its memory or named the wrong argument before. Sizes
that cannot be laid out are refused naming the argument; resource graphs stay acyclic and shallow
(RecursionError); selectors are any Unicode; a host span past the process's address space is
refused at import; prefetch takes only a stream of the buffer's own device; daemon threads inside
devbuf's calls into Python let the program exit 0; bfloat16 moves by its bytes; paths are taken
as the OS takes them. Scenarios that crashed run in a child process. CUDA runs on the CUDA test
driver (not a GPU) when it is loaded."""

import ctypes
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import devbuf
import devbuf.mr as mr
from conftest import backend_names, require_backend
from dlpack_craft import KDL_CPU, CraftedTensor, Producer

HERE = os.path.dirname(os.path.abspath(__file__))
UINT8 = (1, 8, 1)


def run_child(script, *, env=None):
    """Runs `script` in a fresh interpreter: a crash there fails the test, not the run."""
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        cwd=HERE,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **(env or {})},
    )
    return result.returncode, result.stdout + result.stderr


def host_upstream():
    return mr.QueueMemoryResource("host")


# -- Sizes a resource cannot lay out.


def test_a_fixed_size_chunk_that_overflows_is_refused_naming_the_argument():
    # Before: 4 blocks of 2**62 + 256 bytes asked upstream for a 1024-byte chunk, and the blocks
    # after the first lay ~4 EiB past it: the second write was a SIGSEGV.
    with pytest.raises(ValueError, match=r"^blocks_to_preallocate: 4 blocks of \d+ bytes exceed"):
        mr.FixedSizeMemoryResource(host_upstream(), 2**62 + 256, 4)
    # Before: rounded up to a multiple of 256, 2**64 - 1 wrapped to a block size of 0.
    with pytest.raises(ValueError, match=r"^block_size: blocks of 18446744073709551615 bytes"):
        mr.FixedSizeMemoryResource(host_upstream(), 2**64 - 1, 4)
    fixed = mr.FixedSizeMemoryResource(host_upstream(), 2**62, 1)
    with pytest.raises(MemoryError):
        devbuf.alloc(3000, "host", mr=fixed)


def test_a_bin_too_large_to_lay_out_names_its_size():
    # Before: a bin of 2**62 bytes made a 3000-byte request report "cannot allocate 0 bytes".
    binning = mr.BinningMemoryResource(host_upstream())
    with pytest.raises(ValueError, match=r"^allocation_size: 128 blocks of 4611686018427387904 bytes"):
        binning.add_bin(2**62)
    with pytest.raises(ValueError, match=r"^max_size_exponent: "):
        mr.BinningMemoryResource(host_upstream(), 8, 62)
    buffer = devbuf.alloc(3000, "host", mr=binning)
    assert buffer.nbytes == 3000


@pytest.mark.parametrize(
    "make, key",
    [
        (lambda up: mr.FixedSizeMemoryResource(up, -1), "block_size"),
        (lambda up: mr.FixedSizeMemoryResource(up, 2**64), "block_size"),
        (lambda up: mr.FixedSizeMemoryResource(up, 1024, -4), "blocks_to_preallocate"),
        (lambda up: mr.BinningMemoryResource(up, 2**40, 2**41), "min_size_exponent"),
        (lambda up: mr.BinningMemoryResource(up).add_bin(-1), "allocation_size"),
        (lambda up: mr.LimitingResourceAdaptor(up, -1), "allocation_limit"),
        (lambda up: up.allocate(-64, "host"), "nbytes"),
        (lambda up: up.deallocate(-1, 64, "host"), "ptr"),
        (lambda up: devbuf.Buffer.from_handle(2**64, 8, "host"), "ptr"),
        (lambda up: devbuf.Buffer.from_handle(4096, -8, "host"), "nbytes"),
        (lambda up: devbuf.Stream.from_handle(-1), "handle"),
        (lambda up: devbuf.Stream("host").alloc(-1), "nbytes"),
    ],
)
def test_int_arguments_out_of_range_are_value_errors_naming_the_argument(make, key):
    # Before: pyo3's "OverflowError: can't convert negative int to unsigned", naming nothing.
    with pytest.raises(ValueError, match=rf"^{key}: -?\d+ is (negative|more than|not an exponent)"):
        make(host_upstream())


def test_int_arguments_of_the_wrong_type_are_type_errors_naming_the_argument():
    with pytest.raises(TypeError, match=r"^block_size: expected an int, got float"):
        mr.FixedSizeMemoryResource(host_upstream(), 1.5)
    with pytest.raises(TypeError, match=r"^nbytes: expected an int, got str"):
        devbuf.Buffer.from_handle(4096, "8", "host")


# -- Resource graphs: acyclic and shallow by construction.


def test_a_bin_that_reaches_its_binning_resource_is_a_recursion_error():
    # Before: each was accepted, and the next allocation overflowed the stack (SIGSEGV).
    binning = mr.BinningMemoryResource(host_upstream())
    with pytest.raises(RecursionError, match=r"^bin_resource: it allocates from the resource"):
        binning.add_bin(1024, binning)
    a, b = mr.BinningMemoryResource(host_upstream()), mr.BinningMemoryResource(host_upstream())
    a.add_bin(1024, b)
    with pytest.raises(RecursionError, match=r"^bin_resource: "):
        b.add_bin(1024, a)
    over = mr.PoolMemoryResource(mr.StatisticsResourceAdaptor(binning))
    with pytest.raises(RecursionError, match=r"^bin_resource: "):
        binning.add_bin(2048, over)
    for resource in (binning, a, b, over):
        assert devbuf.alloc(100, "host", mr=resource).nbytes == 100


def test_a_stack_deeper_than_devbuf_allows_is_a_recursion_error_naming_upstream_mr():
    # Before: 100,000 adaptors built fine, and allocating through them or dropping them
    # overflowed the stack.
    resource = host_upstream()
    with pytest.raises(RecursionError, match=r"^upstream_mr: it stacks 256 resources"):
        for _ in range(100_000):
            resource = mr.StatisticsResourceAdaptor(resource)
    assert devbuf.alloc(64, "host", mr=resource).nbytes == 64
    del resource


def test_deep_and_cyclic_stacks_end_cleanly_in_a_fresh_process():
    code, output = run_child(
        """
        import devbuf, devbuf.mr as mr
        resource = mr.QueueMemoryResource("host")
        try:
            for _ in range(100_000):
                resource = mr.LoggingResourceAdaptor(resource, open("/dev/null", "w"))
        except RecursionError:
            pass
        devbuf.alloc(64, "host", mr=resource)
        binning = mr.BinningMemoryResource(mr.QueueMemoryResource("host"))
        try:
            binning.add_bin(64, mr.TrackingResourceAdaptor(binning))
        except RecursionError:
            pass
        devbuf.alloc(10, "host", mr=binning)
        del resource, binning
        print("ended")
        """
    )
    assert code == 0 and "ended" in output, f"exit {code}\n{output}"


# -- Selectors are any Unicode.


UNICODE_SELECTORS = ["cuda:GP€x", "cuda:GPU€", "cuda:G€", "cuda:€", "cuda:GPU-€€€€", "cuda:０", "cuda:\u0301"]


@pytest.mark.parametrize("selector", UNICODE_SELECTORS)
def test_a_cuda_selector_in_any_unicode_is_a_value_error(selector):
    # Before: a Rust PanicException (a str sliced at byte 4), which `except Exception` misses.
    require_backend("cuda")
    calls = [
        lambda: devbuf.Device(selector),
        lambda: devbuf.alloc(64, "device", device=selector),
        lambda: devbuf.zeros((4,), "float32", device="host").to_device(selector),
        lambda: devbuf.Buffer.from_handle(0, 0, selector),
        lambda: devbuf.Stream.from_handle(1, device=selector),
    ]
    for call in calls:
        with pytest.raises(ValueError, match="no device matches|device: "):
            call()


def test_an_ipc_handle_naming_a_unicode_device_is_refused_cleanly():
    require_backend("cuda")
    from ipc_craft import Fields

    genuine = Fields.parse(bytes(devbuf.alloc(64, "host", device="host", ipc=True).ipc_handle()))
    for selector in UNICODE_SELECTORS:
        forged = genuine.but(device=selector.encode()).encode()
        with pytest.raises(ValueError):
            devbuf.open_ipc(forged)


@pytest.mark.parametrize("backend", backend_names())
def test_selectors_of_every_backend_take_any_unicode(backend):
    for tail in ["€", "GP€x", "0€", "\udc80", "\x00", "a" * 10_000, "９", ":" * 40]:
        try:
            devbuf.Device(f"{backend}:{tail}")
        except (ValueError, TypeError, RuntimeError) as refused:
            assert "panicked" not in str(refused)


# -- Host spans past the process's address space.


def strided_capsule(stride):
    backing = np.zeros(4096, np.uint8)
    tensor = CraftedTensor(data=backing.ctypes.data, device=(KDL_CPU, 0), shape=(4,), strides=(stride,), dtype=UINT8)
    tensor.keep.append(backing)
    return Producer(tensor)


@pytest.mark.parametrize("stride", [2**61, 2**47, 2**46 * 3])
def test_a_dlpack_span_past_the_address_space_is_refused_naming_strides(stride):
    # Before: a 4 KiB NumPy array viewed with a stride of 2**61 (a span of ~6.9 EB) was accepted,
    # and asarray(x, copy=True) read through the stride: SIGSEGV.
    with pytest.raises(ValueError, match=r"^strides: .* where this process's address space ends"):
        devbuf.asarray(strided_capsule(stride))


def test_every_protocol_refuses_a_host_span_past_the_address_space():
    backing = np.zeros(4096, np.uint8)
    # The buffer protocol: NumPy makes such a view itself.
    wild = np.lib.stride_tricks.as_strided(backing, shape=(4,), strides=(2**61,))
    with pytest.raises(ValueError, match=r"^strides: "):
        devbuf.asarray(wild)
    # A raw handle: past the end names nbytes, a pointer past it names ptr.
    with pytest.raises(ValueError, match=r"^nbytes: .* address space ends"):
        devbuf.Buffer.from_handle(backing.ctypes.data, 2**62, "host")
    with pytest.raises(ValueError, match=r"^ptr: .* address space ends"):
        devbuf.Buffer.from_handle(2**62, 16, "host")


def test_from_handle_at_the_top_of_the_address_space_names_nbytes():
    # Before: "strides: [1] reach outside the address space".
    with pytest.raises(ValueError, match=r"^nbytes: "):
        devbuf.Buffer.from_handle(2**64 - 16, 32, "host")
    with pytest.raises(ValueError, match=r"^ptr: "):
        devbuf.Buffer.from_handle(2**64 - 16, 8, "host")


def test_a_copy_of_a_refused_span_never_reads_it_in_a_fresh_process():
    code, output = run_child(
        """
        import numpy as np, devbuf
        from dlpack_craft import KDL_CPU, CraftedTensor, Producer
        backing = np.zeros(4096, np.uint8)
        for stride in (2**61, 2**47):
            tensor = CraftedTensor(data=backing.ctypes.data, device=(KDL_CPU, 1), shape=(4,),
                                   strides=(stride,), dtype=(1, 8, 1))
            try:
                devbuf.asarray(Producer(tensor), copy=True)
            except ValueError:
                pass
        print("refused")
        """
    )
    assert code == 0 and "refused" in output, f"exit {code}\n{output}"


def test_spans_inside_the_address_space_still_import():
    backing = np.arange(4096, dtype=np.uint8)
    view = devbuf.asarray(np.lib.stride_tricks.as_strided(backing, shape=(4,), strides=(1024,)))
    assert list(view.get()) == [0, 0, 0, 0]
    buffer = devbuf.Buffer.from_handle(backing.ctypes.data, 4096, "host", owner=backing)
    assert buffer.to_bytes() == backing.tobytes()


# -- prefetch takes a stream of the buffer's own device.


def other_backend_streams(backend):
    return [devbuf.Stream(name) for name in backend_names(makes_streams=True) if name != backend and _available(name)]


def _available(name):
    return any(b.name == name and b.available and any(d.usable for d in b.devices) for b in devbuf.backends())


@pytest.mark.parametrize("backend", backend_names())
def test_prefetch_refuses_a_stream_of_another_backend_naming_stream(backend):
    # Before: a stream that merely reached the memory as host memory ran the prefetch, handing
    # one runtime's pointer to another's prefetch (cuMemPrefetchAsync on SYCL memory).
    require_backend(backend)
    try:
        buffer = devbuf.alloc(4096, "shared", device=backend)
    except ValueError as no_shared:
        pytest.skip(f"{backend} has no shared memory here: {no_shared}")
    others = other_backend_streams(backend)
    if not others:
        pytest.skip("one backend with streams here")
    for stream in others:
        with pytest.raises(ValueError, match=r"^stream: a stream of .* for a prefetch; pass a stream of"):
            buffer.prefetch(stream=stream)


# -- Interpreter shutdown with daemon threads inside devbuf's calls into Python.


def failure_callback_loop(callback_body):
    """A thread allocating past a limit forever, each failure calling a callback that runs
    `callback_body` (one line) and asks for a retry."""
    return f"""
        limited = mr.LimitingResourceAdaptor(mr.QueueMemoryResource("host"), 1024)
        def callback(nbytes):
            {callback_body}
            return True
        resource = mr.FailureCallbackResourceAdaptor(limited, callback)
        def work():
            while True:
                try:
                    devbuf.alloc(4096, "host", mr=resource)
                except MemoryError:
                    pass
        """


SHUTDOWN = {
    "a failure callback": failure_callback_loop("time.sleep(0.02)"),
    "a log stream's write": """
        class Slow(io.StringIO):
            def write(self, text):
                time.sleep(0.02)
                return len(text)
        resource = mr.LoggingResourceAdaptor(mr.QueueMemoryResource("host"), Slow())
        def work():
            while True:
                devbuf.alloc(64, "host", mr=resource)
        """,
    "a Python resource": """
        class Slow(mr.MemoryResource):
            def allocate(self, nbytes, kind="host"):
                time.sleep(0.02)
                return self.upstream_mr.allocate(nbytes, kind)
            def deallocate(self, ptr, nbytes, kind="host"):
                time.sleep(0.02)
                self.upstream_mr.deallocate(ptr, nbytes, kind)
        resource = Slow(upstream_mr=mr.QueueMemoryResource("host"))
        def work():
            while True:
                devbuf.alloc(64, "host", mr=resource)
        """,
    "busy Python code in a callback": failure_callback_loop("for i in range(200_000): i += 1"),
    "a DLPack producer": """
        class Slow:
            def __init__(self):
                self.array = np.zeros(16, np.uint8)
            def __dlpack__(self, **kwargs):
                time.sleep(0.02)
                return self.array.__dlpack__()
            def __dlpack_device__(self):
                return (1, 0)
        def work():
            producer = Slow()
            while True:
                devbuf.asarray(producer)
        """,
    # devbuf releases the GIL while it submits to the SYCL runtime and while it waits there
    # (docs/architecture.md, "Blocking calls and the GIL"); before the threads that take it back
    # once finalization began waited: SIGABRT in 2 of 3 runs.
    "a SYCL submission or wait": """
        def work():
            while True:
                memory = devbuf.alloc(1 << 22, "device", device="sycl")
                memory.fill(1)
                del memory
        """,
}
# The cases that need a backend, and which.
SHUTDOWN_BACKEND = {"a SYCL submission or wait": "sycl"}


@pytest.mark.parametrize("inside", list(SHUTDOWN))
def test_the_program_exits_0_with_daemon_threads_inside_calls_into_python(inside):
    # Before: SIGABRT in 6 of 6 runs: CPython 3.11's pthread_exit unwound through devbuf's frames.
    if inside in SHUTDOWN_BACKEND:
        require_backend(SHUTDOWN_BACKEND[inside])
    script = (
        "import io, threading, time\nimport numpy as np\nimport devbuf, devbuf.mr as mr\n"
        + textwrap.dedent(SHUTDOWN[inside])
        + textwrap.dedent(
            """
            for _ in range(4):
                threading.Thread(target=work, daemon=True).start()
            time.sleep(0.3)
            print("main done", flush=True)
            """
        )
    )
    for attempt in range(3):
        code, output = run_child(script)
        assert code == 0 and "main done" in output, f"attempt {attempt}: exit {code}\n{output}"


# -- bfloat16 by its bytes; paths as the OS takes them.


def test_bfloat16_moves_by_its_bytes_through_get_copy_to_host_asarray_and_copy_from():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    # Before: each raised "cannot include dtype 'E' in a buffer".
    full = devbuf.full((4,), 1.5, "bfloat16", device="host")
    assert full.get().dtype == ml_dtypes.bfloat16
    assert list(full.get().astype(np.float32)) == [1.5] * 4
    assert list(full.copy_to_host().astype(np.float32)) == [1.5] * 4
    theirs = np.arange(6, dtype=np.float32).reshape(2, 3).astype(ml_dtypes.bfloat16)
    imported = devbuf.asarray(theirs)
    assert imported.dtype == ml_dtypes.bfloat16 and imported.shape == (2, 3)
    assert imported.ptr == theirs.ctypes.data
    assert np.array_equal(imported.get(), theirs)
    strided = devbuf.asarray(theirs[:, ::2])
    assert np.array_equal(strided.get(), theirs[:, ::2])
    target = devbuf.empty((2, 3), "bfloat16", device="host")
    target.copy_from(theirs)
    assert np.array_equal(target.get(), theirs)
    out = np.zeros((2, 3), ml_dtypes.bfloat16)
    assert target.get(out=out) is out and np.array_equal(out, theirs)
    with pytest.raises(ValueError, match=r"^out: "):
        target.get(out=np.zeros((3, 2), ml_dtypes.bfloat16).T)


def test_a_0_d_buffer_imports_as_0_d_and_bfloat16_leaves_numpys_route_alone():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    # Before: a 0-d exporter's buffer (shape NULL, ndim 0) imported as shape (1,).
    assert devbuf.asarray(memoryview(np.array(7, np.uint8))).shape == ()
    # The bfloat16 import's fallback is not the route NumPy's other arrays take afterwards.
    devbuf.asarray(np.zeros(3, ml_dtypes.bfloat16))
    scalar = devbuf.asarray(np.array(9, np.int16))
    assert scalar.shape == () and scalar.get() == 9


def test_a_log_path_with_an_undecodable_byte_is_taken_as_open_takes_it(tmp_path):
    # Before: "log_file_name: expected a path or a text stream, got str".
    name = os.path.join(os.fsdecode(bytes(tmp_path)), "log\udcff.csv")
    with open(name, "w"):
        pass
    logged = mr.LoggingResourceAdaptor(host_upstream(), name, auto_flush=True)
    assert logged.get_file_name() == name
    devbuf.alloc(64, "host", mr=logged).close()
    logged.flush()
    assert os.fsencode(name) in [os.fsencode(os.path.join(tmp_path, e)) for e in os.listdir(tmp_path)]
    report = mr.replay(name, host_upstream(), "host")
    assert report["allocations"] == 1 and report["frees"] == 1
    assert mr.replay(os.fsencode(name), host_upstream(), "host")["allocations"] == 1
    with pytest.raises(TypeError, match=r"^log_file_name: expected a path"):
        mr.replay(3.5, host_upstream(), "host")


def test_the_user_address_limit_holds_this_process_memory():
    # The limit devbuf asks the kernel for: every mapping of this process lies below it.
    limit = None
    try:
        devbuf.Buffer.from_handle(2**64 - 4096, 16, "host")
    except ValueError as refused:
        limit = int(str(refused).split("reaches past ")[1].split(",")[0], 16)
    assert limit is not None and limit & (limit - 1) == 0
    with open("/proc/self/maps") as maps:
        ends = [int(line.split()[0].split("-")[1], 16) for line in maps if "[vsyscall]" not in line]
    assert max(ends) <= limit
    assert ctypes.sizeof(ctypes.c_void_p) == 8


def test_the_argument_fuzzer_short_profile():
    # ci/soak runs 10^6 inputs (RELIABILITY.md).
    from fuzz_arguments import run

    tally = run(int(os.environ.get("DEVBUF_ARGUMENT_FUZZ_INPUTS", "2000")), seed=45)
    assert sum(served for served, _ in tally.values()) > 0 and sum(refused for _, refused in tally.values()) > 0
