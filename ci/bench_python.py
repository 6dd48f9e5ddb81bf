"""Python-level benchmarks: devbuf's exchange getters, imports and allocations against dpctl and
NumPy doing the same, in the same run. Prints a Markdown table (median ns per call over rounds).
Run through ci/bench, after the package is installed."""

import statistics
import sys
import timeit

import numpy as np

import devbuf

sys.path.insert(0, "tests/python")
from consumer import load  # noqa: E402  (the C consumer of the DLPack exchange table)

ROUNDS = 15


def per_call_ns(statement, number=20000):
    timer = timeit.Timer(statement)
    timer.timeit(number // 10)  # warm-up
    return statistics.median(timer.timeit(number) / number * 1e9 for _ in range(ROUNDS))


rows = []


def compare(case, ours, theirs, reference, goal=None):
    ratio = ours / theirs
    verdict = "—" if goal is None else f"≤ {goal}× {'meets' if ratio <= goal else 'MISSES'}"
    rows.append(f"| {case} | {ours:.0f} ns | {theirs:.0f} ns ({reference}) | {ratio:.2f}× | {verdict} |")


host = devbuf.alloc(1024, "host", device="host").view("float32")
host_np = np.zeros(256, dtype=np.float32)
compare("`__dlpack__()` (host memory)", per_call_ns(lambda: host.__dlpack__(max_version=(1, 0))),
        per_call_ns(lambda: host_np.__dlpack__(max_version=(1, 0))), "NumPy's own", 1.5)
compare("`np.from_dlpack(x)`", per_call_ns(lambda: np.from_dlpack(host)),
        per_call_ns(lambda: np.from_dlpack(host_np)), "of a NumPy array", 1.5)
compare("`np.asarray(x)` (buffer protocol)", per_call_ns(lambda: np.asarray(host)),
        per_call_ns(lambda: np.asarray(memoryview(host_np))), "of a memoryview", 1.5)
compare("alloc+free 1 KiB (host backend)", per_call_ns(lambda: devbuf.alloc(1024, "host", device="host")),
        per_call_ns(lambda: np.empty(1024, dtype=np.uint8)), "`np.empty`")

consumer = load()
fill_ns = statistics.median(consumer.time_describe(host, 1_000_000) for _ in range(ROUNDS))
rows.append(f"| DLTensor from PyObject through the C exchange table | {fill_ns:.1f} ns | — | — | ≤ 50 ns {'meets' if fill_ns <= 50 else 'MISSES'} |")

sycl = next((b for b in devbuf.backends() if b.name == "sycl" and b.available), None)
if sycl is not None:
    import dpctl.memory as dm

    ours = devbuf.alloc(1024, "shared")
    theirs = dm.MemoryUSMShared(1024)
    compare("SUAI getter", per_call_ns(lambda: ours.__sycl_usm_array_interface__),
            per_call_ns(lambda: theirs.__sycl_usm_array_interface__), "dpctl.memory's own", 1.0)
    # Memory handed out (here through SUAI): a host view first waits for the work other libraries
    # may have queued on devbuf's queue (a barrier).
    compare("`np.asarray(x)` of SYCL shared USM handed to another library", per_call_ns(lambda: np.asarray(ours), 5000),
            per_call_ns(lambda: np.asarray(memoryview(host_np))), "of a memoryview")

    class ThirdParty:
        """A producer neither library owns (dpctl short-cuts its own memory objects): USM from
        dpctl, described by a SUAI dict whose syclobj is a dpctl.SyclQueue."""

        def __init__(self, memory):
            self.__sycl_usm_array_interface__ = dict(memory.__sycl_usm_array_interface__)

    foreign = ThirdParty(theirs)
    compare("import of a foreign SUAI object", per_call_ns(lambda: devbuf.asarray(foreign), 5000),
            per_call_ns(lambda: dm.as_usm_memory(foreign), 5000), "`dpctl.memory.as_usm_memory`", 0.3)
    # dpctl with an explicit queue: without one it looks the default queue up on every call.
    dpctl_queue = theirs.sycl_queue
    for kind, cls in (("host", dm.MemoryUSMHost), ("device", dm.MemoryUSMDevice), ("shared", dm.MemoryUSMShared)):
        compare(f"alloc+free 1 KiB SYCL {kind} USM", per_call_ns(lambda: devbuf.alloc(1024, kind), 5000),
                per_call_ns(lambda: cls(1024, queue=dpctl_queue), 5000), "dpctl.memory, explicit queue", 1.0)
    import devbuf.mr

    pool = devbuf.mr.PoolMemoryResource(devbuf.mr.QueueMemoryResource())
    compare("alloc+free 1 KiB SYCL shared USM, pooled (`devbuf.alloc(mr=pool)`)",
            per_call_ns(lambda: devbuf.alloc(1024, "shared", mr=pool), 5000),
            per_call_ns(lambda: dm.MemoryUSMShared(1024, queue=dpctl_queue), 5000),
            "`dpctl.memory.MemoryUSMShared(1024)`, explicit queue", 0.2)
    exporting_pool = devbuf.mr.PoolMemoryResource(devbuf.mr.QueueMemoryResource())
    compare("alloc+SUAI+free 1 KiB SYCL shared USM, pooled (a block another library was given: never reused)",
            per_call_ns(lambda: devbuf.alloc(1024, "shared", mr=exporting_pool).__sycl_usm_array_interface__, 5000),
            per_call_ns(lambda: dm.MemoryUSMShared(1024, queue=dpctl_queue), 5000),
            "`dpctl.memory.MemoryUSMShared(1024)`, explicit queue")
    try:
        import dpnp
    except ImportError:
        rows.append("| dpnp cases | — | — | — | skipped: dpnp is not installed |")
    else:
        # Same size, same queue object reused by both sides' memory; dpnp's own path for dpctl memory
        # is its short-cut (as_usm_memory keeps a dpctl memory's queue object).
        ours_device = devbuf.alloc(1024, "device")
        theirs_device = dm.MemoryUSMDevice(1024, queue=dpctl_queue)
        compare("`dpnp.asarray(x)` (1 KiB device USM)", per_call_ns(lambda: dpnp.asarray(ours_device), 5000),
                per_call_ns(lambda: dpnp.asarray(theirs_device), 5000), "of a dpctl `MemoryUSMDevice`", 1.0)
        dpnp_array = dpnp.empty(1024, dtype=dpnp.uint8, sycl_queue=dpctl_queue)
        compare("import of a dpnp array", per_call_ns(lambda: devbuf.asarray(dpnp_array), 5000),
                per_call_ns(lambda: dm.as_usm_memory(dpnp_array), 5000), "`dpctl.memory.as_usm_memory`", 1.0)
else:
    rows.append("| SYCL cases | — | — | — | skipped: SYCL backend unavailable |")

versions = f"Python {sys.version.split()[0]}, NumPy {np.__version__}, devbuf {devbuf.__version__}"
if "dpnp" in sys.modules:
    versions += f", dpnp {sys.modules['dpnp'].__version__}"
print(f"{versions}; median of {ROUNDS} rounds\n")
print("| case | devbuf | reference | ratio | goal |")
print("|---|---:|---:|---:|---|")
print("\n".join(rows))
