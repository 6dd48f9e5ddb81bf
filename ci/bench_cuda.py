"""CUDA benchmarks for a GPU machine, devbuf against CuPy and Numba in the same run:
256 MiB device-to-device and pinned host-to-device copies (goal: >= 0.95x CuPy's bandwidth),
alloc+free from the driver's stream-ordered pool and from devbuf's own pool against CuPy's memory
pool, devbuf's pool against its host pool (goal: <= 1.5x: a pool hit stays on the host), a strided
column written and read back against CuPy's (goal: <= 1x), and a Numba kernel launched with three devbuf arrays against three Numba DeviceNDArrays (goal: <= 1.2x
the launch time). Prints a Markdown table. Exits with the reason where there is no GPU; with
`--smoke` on the CUDA test driver every case runs once and no figure is printed (a check that the
script runs, before it goes to a GPU machine). Each peer's rows stand alone: where CuPy cannot be
imported, or numba-cuda cannot compile a kernel with no devbuf in it (an environment's fault, e.g.
numba-cuda 0.30 on NumPy 2.5), its rows are missing and the output says why; a failure of devbuf's
side is an error."""

import statistics
import sys
import time

import devbuf
import devbuf.mr

cuda = next((b for b in devbuf.backends() if b.name == "cuda"), None)
if cuda is None or not cuda.available:
    print(f"no CUDA: {cuda.reason if cuda else 'backend not compiled in'}; nothing to benchmark")
    sys.exit(0)
SMOKE = "--smoke" in sys.argv[1:]
if cuda.devices[0].test_double and not SMOKE:
    # Figures from a test double would read as GPU figures in any table they reach.
    print(f"no GPU: {cuda.devices[0].selector} is {cuda.devices[0].test_double}; nothing to benchmark")
    sys.exit(0)
if SMOKE and not cuda.devices[0].test_double:
    sys.exit("--smoke is for the CUDA test driver; on a GPU, run without it")

import numpy as np  # noqa: E402

LEN = 256 << 20
ROUNDS = 1 if SMOKE else 15
rows = []
missing = []


def median(samples):
    return statistics.median(samples)


def timed(op, sync, number):
    number = 1 if SMOKE else number
    op()
    sync()
    samples = []
    for _ in range(ROUNDS):
        start = time.perf_counter()
        for _ in range(number):
            op()
        sync()
        samples.append((time.perf_counter() - start) / number)
    return median(samples)


def peer(name, load):
    """The peer library `load` gives, or None with why it is missing noted."""
    try:
        return load()
    except Exception as err:  # whatever keeps the peer from working here; the output says what
        missing.append(f"{name}: {type(err).__name__}: {err}")
        return None


device = cuda.devices[0]
queue = devbuf.Device("cuda:0").queue
sync_ours = queue.wait
pools = {}
for selector in ("cuda:0", "host"):
    with devbuf.Device(selector):
        pools[selector] = devbuf.mr.PoolMemoryResource(devbuf.mr.QueueMemoryResource())
device_pool = pools["cuda:0"]


def host_pool_row():
    """A pool hit of devbuf's CUDA pool against one of its host pool: the same work on the host,
    with no driver call (tests/python/test_cuda_driver_calls.py holds that)."""
    for size, label in ((1024, "1 KiB"),):
        theirs = timed(lambda: devbuf.alloc(size, "host", mr=pools["host"]), lambda: None, 20000)
        ours = timed(lambda: devbuf.alloc(size, "device", mr=device_pool), lambda: None, 20000)
        rows.append((f"alloc+free {label} device, devbuf's pool, a hit", f"{ours * 1e9:.0f} ns",
                     f"{theirs * 1e9:.0f} ns (devbuf's host pool)", ours / theirs, "≤ 1.5×"))


def cupy_rows(cupy):
    sync_cupy = cupy.cuda.Device(0).synchronize
    # Copies: the same work on both sides, copies enqueued back to back and one wait for them
    # (CuPy's copy_from_device does not wait; a blocking copy_from would add a host round trip
    # per copy, as the first GPU run's 0.93x did).
    src, dst = devbuf.alloc(LEN, "device", device="cuda"), devbuf.alloc(LEN, "device", device="cuda")
    src.fill(1)
    ours = timed(lambda: dst.copy_from(src, blocking=False), sync_ours, 5)
    c_src, c_dst = cupy.ones(LEN, dtype=cupy.uint8), cupy.empty(LEN, dtype=cupy.uint8)
    theirs = timed(lambda: c_dst.data.copy_from_device(c_src.data, LEN), sync_cupy, 5)
    gbps = lambda seconds: 2 * LEN / seconds / 1e9  # noqa: E731  bytes read + written
    rows.append(("copy 256 MiB device to device", f"{gbps(ours):.0f} GB/s", f"{gbps(theirs):.0f} GB/s", theirs / ours, "≥ 0.95×"))

    pinned = devbuf.alloc(LEN, "host", device="cuda")
    ours = timed(lambda: dst.copy_from(pinned, blocking=False), sync_ours, 5)
    c_pinned = cupy.cuda.alloc_pinned_memory(LEN)
    theirs = timed(lambda: c_dst.data.copy_from_host(c_pinned.ptr, LEN), sync_cupy, 5)
    gbps = lambda seconds: LEN / seconds / 1e9  # noqa: E731
    rows.append(("copy 256 MiB pinned host to device", f"{gbps(ours):.1f} GB/s", f"{gbps(theirs):.1f} GB/s", theirs / ours, "≥ 0.95×"))

    # A strided column (1000 runs of 4 bytes) written and read back, each waited for: devbuf's one
    # cuMemcpy2DAsync (from a host pattern, into NumPy's array) against CuPy's kernel and copy.
    ours_matrix = devbuf.zeros((1000, 1000), "float32", device="cuda")
    theirs_matrix = cupy.zeros((1000, 1000), dtype=cupy.float32)

    def ours_fill():
        ours_matrix[:, 0] = 5

    def theirs_fill():
        theirs_matrix[:, 0] = 5

    ours, theirs = timed(ours_fill, sync_ours, 200), timed(theirs_fill, sync_cupy, 200)
    rows.append(("`x[:, 0] = 5` of a 1000x1000 float32 device array", f"{ours * 1e6:.1f} µs",
                 f"{theirs * 1e6:.1f} µs", ours / theirs, "≤ 1×"))
    ours = timed(lambda: ours_matrix[:, 0].get(), empty, 200)
    theirs = timed(lambda: theirs_matrix[:, 0].get(), empty, 200)
    rows.append(("`x[:, 0].get()` of a 1000x1000 float32 device array", f"{ours * 1e6:.1f} µs",
                 f"{theirs * 1e6:.1f} µs", ours / theirs, "≤ 1×"))

    # Allocation: the driver's stream-ordered pool (devbuf's default) and devbuf's own pool,
    # against CuPy's memory pool.
    for size, label in ((1024, "1 KiB"), (1 << 20, "1 MiB")):
        theirs = timed(lambda: cupy.empty(size, dtype=cupy.uint8), sync_cupy, 2000)
        ours = timed(lambda: devbuf.alloc(size, "device", device="cuda"), sync_ours, 2000)
        rows.append((f"alloc+free {label} device, the driver's pool (`devbuf.alloc`)", f"{ours * 1e9:.0f} ns",
                     f"{theirs * 1e9:.0f} ns", ours / theirs, "report"))
        ours = timed(lambda: devbuf.alloc(size, "device", mr=device_pool), sync_ours, 2000)
        rows.append((f"alloc+free {label} device, devbuf's pool (`devbuf.alloc(mr=pool)`)", f"{ours * 1e9:.0f} ns",
                     f"{theirs * 1e9:.0f} ns", ours / theirs, "report"))


def empty():
    pass


def numba_with_kernels():
    from numba import cuda as numba_cuda

    numba_cuda.jit("void()")(empty)  # an empty kernel, no devbuf in it: numba-cuda works here
    return numba_cuda


def numba_rows(numba_cuda):
    # A Numba kernel launched with devbuf arrays against Numba's own arrays.
    @numba_cuda.jit
    def axpy(a, x, y, out):
        i = numba_cuda.grid(1)
        if i < out.size:
            out[i] = a * x[i] + y[i]

    n = 1 << 10
    ours_args = [devbuf.alloc(n * 4, "device", device="cuda").view("float32") for _ in range(3)]
    numba_args = [numba_cuda.device_array(n, dtype=np.float32) for _ in range(3)]
    launch = lambda x, y, out: axpy[4, 256](2.0, x, y, out)  # noqa: E731
    ours = timed(lambda: launch(*ours_args), numba_cuda.synchronize, 500)
    theirs = timed(lambda: launch(*numba_args), numba_cuda.synchronize, 500)
    rows.append(("Numba kernel launch, 3 arrays", f"{ours * 1e6:.1f} µs", f"{theirs * 1e6:.1f} µs", ours / theirs, "≤ 1.2×"))


host_pool_row()
cupy = peer("CuPy", lambda: __import__("cupy"))
if cupy is not None:
    cupy_rows(cupy)
numba_cuda = peer("Numba (numba-cuda cannot compile a kernel)", numba_with_kernels)
if numba_cuda is not None:
    numba_rows(numba_cuda)

versions = f"; CuPy {cupy.__version__}" if cupy is not None else ""
versions += f"; NumPy {np.__version__}"
if SMOKE:
    print(f"smoke run on {device.test_double}: every case ran once, no figures\n")
else:
    print(f"{device.name}, driver {device.driver}{versions}; median of {ROUNDS} rounds\n")
print("| case | devbuf | reference (CuPy / Numba) | ratio | goal |")
print("|---|---:|---:|---:|---|")
for case, ours, theirs, ratio, goal in rows:
    if SMOKE:
        print(f"| {case} | — | — | — | smoke run: not measured |")
        continue
    verdict = goal
    if goal.startswith("≤ "):
        verdict += ": meets" if ratio <= float(goal[2:-1]) else ": MISSES"
    elif goal.startswith("≥ "):
        verdict += ": meets" if ratio >= float(goal[2:-1]) else ": MISSES"
    print(f"| {case} | {ours} | {theirs} | {ratio:.2f}× | {verdict} |")
for why in missing:
    print(f"\nMISSING the rows of {why}")
