"""Python-level benchmarks: devbuf's exchange getters, imports and allocations against NumPy and
dpctl doing the same work, in alternating rounds of the same run (ci/benchlib.py). Prints a
Markdown table: median ns per call of each side, the median of the per-round ratios and its
spread, and each row's goal. Run through ci/bench, after the package is installed."""

import array
import sys

import numpy as np

import devbuf
from benchlib import ROUNDS, Report, Row, load_average

sys.path.insert(0, "tests/python")
from consumer import load  # noqa: E402  (the C consumer of the DLPack exchange table)


def main():
    report = Report("Python layer")
    host = devbuf.alloc(1024, "host", device="host").view("float32")
    host_np = np.zeros(256, dtype=np.float32)
    # Each reference does the same work and nothing more: an existing memoryview, not one built
    # per call (building it is the buffer-protocol export devbuf's side does).
    host_memoryview = memoryview(host_np)
    report.compare_calls("`__dlpack__(max_version=(1, 0))` (host memory)",
                         lambda: host.__dlpack__(max_version=(1, 0)),
                         lambda: host_np.__dlpack__(max_version=(1, 0)), "NumPy's own", 1.0)
    report.compare_calls("`np.from_dlpack(x)`", lambda: np.from_dlpack(host),
                         lambda: np.from_dlpack(host_np), "of a NumPy array", 1.0)
    report.compare_calls("`np.asarray(x)` (buffer protocol)", lambda: np.asarray(host),
                         lambda: np.asarray(host_memoryview), "of an existing memoryview", 1.0)
    report.compare_calls("alloc+free 1 KiB host, default resource",
                         lambda: devbuf.alloc(1024, "host", device="host"),
                         lambda: np.empty(1024, dtype=np.uint8), "`np.empty`", 1.0)

    consumer = load()
    fill = [consumer.time_describe(host, 1_000_000) for _ in range(ROUNDS)]
    report.add(Row(report.section, "DLTensor from PyObject through the C exchange table", fill, [],
                   "", 50, unit="ns"))

    # The floors: the cheapest way to do the same work, against the same reference (no goal).
    floors = Report("Python layer: floors", side="floor")
    host_bytearray = bytearray(1024)
    floors.compare_calls("`np.asarray` of a bytearray (CPython's cheapest buffer exporter)",
                         lambda: np.asarray(host_bytearray), lambda: np.asarray(host_memoryview),
                         "of an existing memoryview")
    # The same floor in devbuf's format: NumPy parses 'f' and checks float32 alignment.
    host_float_array = array.array("f", bytes(1024))
    floors.compare_calls("`np.asarray` of an `array.array('f')` (CPython's float32 exporter)",
                         lambda: np.asarray(host_float_array), lambda: np.asarray(host_memoryview),
                         "of an existing memoryview")

    sycl = next((b for b in devbuf.backends() if b.name == "sycl" and b.available), None)
    if sycl is None:
        report.skip("SYCL cases", "the SYCL backend is unavailable")
    else:
        sycl_cases(report, floors)
    versions = f"Python {sys.version.split()[0]}, NumPy {np.__version__}, devbuf {devbuf.__version__}"
    if "dpnp" in sys.modules:
        versions += f", dpnp {sys.modules['dpnp'].__version__}"
    report.print(f"{versions}; {ROUNDS} alternating rounds per case; {load_average()} at the end")
    print()
    floors.print("Floors: the least any exporter or importer does for the same result")


def sycl_cases(report, floors):
    import dpctl.memory as dm

    import devbuf.mr

    ours = devbuf.alloc(1024, "shared")
    theirs = dm.MemoryUSMShared(1024)
    host_np = np.zeros(256, dtype=np.float32)
    report.compare_calls("`__sycl_usm_array_interface__` getter",
                         lambda: ours.__sycl_usm_array_interface__,
                         lambda: theirs.__sycl_usm_array_interface__, "dpctl.memory's own", 0.3)
    # Memory handed out (here through SUAI): a host view first waits for the work other libraries
    # may have queued on devbuf's queue (a barrier). No goal: the peer has no such wait.
    report.compare_calls("`np.asarray(x)` of SYCL shared USM handed to another library",
                         lambda: np.asarray(ours), lambda: np.asarray(memoryview(host_np)),
                         "of a memoryview", None, number=5000)
    # The floor of that wait: the queue the memory was handed out on, waited for by its own
    # library (dpctl's `wait()`, which lets the runtime's exceptions escape its C API, so devbuf
    # waits for a barrier's event instead), then the same view.
    handed_out_queue = ours.sycl_queue
    report.compare_calls("`np.asarray(x)` of SYCL shared USM handed to another library",
                         lambda: np.asarray(ours),
                         lambda: (handed_out_queue.wait(), np.asarray(memoryview(host_np))),
                         "dpctl's `wait()` of the queue handed out, then a memoryview's", number=5000)
    report.compare_calls("`np.asarray(x)` of SYCL shared USM handed to another library",
                         lambda: np.asarray(ours),
                         lambda: (handed_out_queue.submit_barrier().wait(),
                                  np.asarray(memoryview(host_np))),
                         "a barrier's event on that queue waited for, then a memoryview's",
                         number=5000)

    class ThirdParty:
        """A producer neither library owns (dpctl short-cuts its own memory objects): USM from
        dpctl, described by a SUAI dict whose syclobj is a dpctl.SyclQueue."""

        def __init__(self, memory):
            self.__sycl_usm_array_interface__ = dict(memory.__sycl_usm_array_interface__)

    prepared = dict(ours.__sycl_usm_array_interface__)
    # Called through a lambda, as both sides of every row are: a bound method handed to timeit
    # directly skips the Python frame (~14 ns here) and read 0.26× where the same copy costs 0.34×.
    floors.compare_calls("a copy of a prepared SUAI dict (a fresh dict per access)",
                         lambda: prepared.copy(),
                         lambda: theirs.__sycl_usm_array_interface__, "dpctl.memory's getter")
    foreign = ThirdParty(theirs)
    report.compare_calls("import of a foreign SUAI object", lambda: devbuf.asarray(foreign),
                         lambda: dm.as_usm_memory(foreign), "`dpctl.memory.as_usm_memory`", 0.15,
                         number=5000)
    # dpctl with an explicit queue: without one it looks the default queue up on every call.
    dpctl_queue = theirs.sycl_queue
    for kind, cls in (("host", dm.MemoryUSMHost), ("device", dm.MemoryUSMDevice),
                      ("shared", dm.MemoryUSMShared)):
        report.compare_calls(f"alloc+free 1 KiB SYCL {kind} USM", lambda: devbuf.alloc(1024, kind),
                             lambda: cls(1024, queue=dpctl_queue), "dpctl.memory, explicit queue",
                             1.0, number=5000)
    pool = devbuf.mr.PoolMemoryResource(devbuf.mr.QueueMemoryResource())
    report.compare_calls("alloc+free 1 KiB SYCL shared USM, pooled (`devbuf.alloc(mr=pool)`)",
                         lambda: devbuf.alloc(1024, "shared", mr=pool),
                         lambda: dm.MemoryUSMShared(1024, queue=dpctl_queue),
                         "`dpctl.memory.MemoryUSMShared(1024)`, explicit queue", 0.2, number=5000)
    exporting_pool = devbuf.mr.PoolMemoryResource(devbuf.mr.QueueMemoryResource())
    report.compare_calls("alloc+SUAI+free 1 KiB SYCL shared USM, pooled (a block another library was given: never reused)",
                         lambda: devbuf.alloc(1024, "shared", mr=exporting_pool).__sycl_usm_array_interface__,
                         lambda: dm.MemoryUSMShared(1024, queue=dpctl_queue),
                         "`dpctl.memory.MemoryUSMShared(1024)`, explicit queue", None, number=5000)
    try:
        import dpnp
    except ImportError:
        report.skip("dpnp cases", "dpnp is not installed")
        return
    # Same size, same queue object reused by both sides' memory; dpnp's own path for dpctl memory
    # is its short-cut (as_usm_memory keeps a dpctl memory's queue object).
    ours_device = devbuf.alloc(1024, "device")
    theirs_device = dm.MemoryUSMDevice(1024, queue=dpctl_queue)
    report.compare_calls("`dpnp.asarray(x)` (1 KiB device USM)", lambda: dpnp.asarray(ours_device),
                         lambda: dpnp.asarray(theirs_device), "of a dpctl `MemoryUSMDevice`", 1.0,
                         number=2000)
    dpnp_array = dpnp.empty(1024, dtype=dpnp.uint8, sycl_queue=dpctl_queue)
    report.compare_calls("import of a dpnp array (`devbuf.asarray`)", lambda: devbuf.asarray(dpnp_array),
                         lambda: dm.as_usm_memory(dpnp_array), "`dpctl.memory.as_usm_memory`", 1.0,
                         number=2000)
    # What an import through SUAI rather than DLPack costs: dpnp's getter and devbuf's import of
    # (a copy of) what it returns (no DLPack stream, so no barriers on dpnp's queue).
    floors.compare_calls("dpnp's SUAI getter + `devbuf.asarray` of that dict",
                         lambda: devbuf.asarray(ThirdParty(dpnp_array)),
                         lambda: dm.as_usm_memory(dpnp_array), "`dpctl.memory.as_usm_memory`",
                         number=2000)
    # The queue devbuf hands a device's memory out on is dpnp's default (dpctl's cached queue):
    # both sides export to it, as dpnp.from_dlpack asks them to.
    dpnp_default = dpnp.empty(1024, dtype=dpnp.uint8)
    default_queue = dpnp_default.sycl_queue
    report.compare_calls("`__dlpack__(stream=q)`, q dpnp's default queue (1 KiB device USM)",
                         lambda: ours_device.__dlpack__(stream=default_queue, max_version=(1, 3)),
                         lambda: dpnp_default.__dlpack__(stream=default_queue, max_version=(1, 3)),
                         "dpnp's own export to q", 1.0, number=2000)
    devbuf_queue = ours_device.sycl_queue  # a dpctl.SyclQueue of the queue devbuf hands out
    floors.compare_calls("dpnp's `__dlpack__(stream=devbuf's queue)` alone",
                         lambda: dpnp_array.__dlpack__(stream=devbuf_queue, max_version=(1, 3)),
                         lambda: dm.as_usm_memory(dpnp_array), "`dpctl.memory.as_usm_memory`",
                         number=2000)
    handed_out_queue_cases(report)
    strided_write_cases(report, dpnp)


def strided_write_cases(report, dpnp):
    """One column of a 1000x1000 float32 array set to one value (`x[:, 0] = 5`: 1000 runs of 4
    bytes), waited for, against dpnp's kernel doing the same on the same kind of memory, then
    read back (`get()`). Shared USM of the CPU device is the host's own memory, which devbuf
    writes on the host; device USM is not host-accessible (SYCL's rule), so devbuf copies its
    runs as rows through its row kernel (a runtime copy per run until the kernel's build has paid
    for itself: the first rounds' spread shows it)."""
    for kind, goal, number in (("shared", 1.0, 200), ("device", 1.0, 10)):
        ours = devbuf.zeros((1000, 1000), dtype="float32", kind=kind)
        theirs = dpnp.zeros((1000, 1000), dtype="float32", usm_type=kind)
        queue = theirs.sycl_queue

        def ours_fill(ours=ours):
            ours[:, 0] = 5

        def theirs_fill(theirs=theirs, queue=queue):
            theirs[:, 0] = 5
            queue.wait()

        report.compare_calls(f"`x[:, 0] = 5` of a 1000x1000 float32 array, SYCL {kind} USM",
                             ours_fill, theirs_fill, "dpnp's, waited for", goal, number=number)
    # The same inside `with stream:` (a devbuf stream of the device): waited for, so it runs on
    # the host too.
    stream = devbuf.Stream("sycl")
    ours = devbuf.zeros((1000, 1000), dtype="float32", kind="shared")
    theirs = dpnp.zeros((1000, 1000), dtype="float32", usm_type="shared")

    def ours_on_stream():
        with stream:
            ours[:, 0] = 5

    def theirs_fill():
        theirs[:, 0] = 5
        theirs.sycl_queue.wait()

    report.compare_calls("`with stream: x[:, 0] = 5` of a 1000x1000 float32 array, SYCL shared USM",
                         ours_on_stream, theirs_fill, "dpnp's, waited for", 1.0, number=200)
    # Reading a column back: devbuf's runs straight into NumPy's array (memcpys on the host for
    # shared USM, a runtime copy per run for device USM) against dpnp's `asnumpy` of the view.
    for kind, goal, number in (("shared", 1.0, 200), ("device", 1.0, 5)):
        ours = devbuf.zeros((1000, 1000), dtype="float32", kind=kind)
        theirs = dpnp.zeros((1000, 1000), dtype="float32", usm_type=kind)
        report.compare_calls(f"`x[:, 0].get()` of a 1000x1000 float32 array, SYCL {kind} USM",
                             lambda ours=ours: ours[:, 0].get(),
                             lambda theirs=theirs: dpnp.asnumpy(theirs[:, 0]),
                             "`dpnp.asnumpy(x[:, 0])`", goal, number=number)


def handed_out_queue_cases(report):
    """What handing a device's memory out on dpnp's out-of-order default queue costs against a
    devbuf stream's own in-order queue (the same device and context), for the same work: an
    allocation, a fill devbuf does not wait for, a copy, and an export (SUAI) of memory with that
    work pending, which the consumer's next operation must follow."""
    own = devbuf.Stream("sycl")
    source = devbuf.alloc(1 << 16, "device")

    def work(stream):
        x = devbuf.alloc(1 << 16, "device", stream=stream)
        x.fill(1, blocking=False)
        x.copy_from(source, blocking=False)
        x.__sycl_usm_array_interface__
        x.synchronize()

    report.compare_calls("alloc + fill + copy + SUAI export of 64 KiB device USM, handed out on dpnp's queue",
                         lambda: work(None), lambda: work(own),
                         "the same on a devbuf stream's own in-order queue", None, number=500)


if __name__ == "__main__":
    main()
