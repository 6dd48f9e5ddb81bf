"""Instructions per call (callgrind) of each side of the benchmarks' rows, and of the floors they
are measured against: counts, unlike wall time, repeat on a loaded machine. Each figure is
(Ir of N2 calls - Ir of N1 calls) / (N2 - N1) in two runs of one process each, so that start-up
and set-up cancel. Needs valgrind, the release build of bench_host and the package installed
(ci/bench does both).
  python ci/bench_counts.py [CASE...]          a Markdown table (all cases by default)
  python ci/bench_counts.py --atomics [CASE...]  the Rust cases with their atomic read-modify-writes
                                               per call too (lock-prefixed instructions and xchg
                                               with memory, matched by address in objdump -d)
  python ci/bench_counts.py --run CASE SIDE N  (what runs under callgrind) N calls of one side"""

import array
import collections
import functools
import os
import re
import subprocess
import sys
import tempfile

HOST_BENCH = "target/release/examples/bench_host"

# case → (what it is, {side: statement}, setup); each side's statement is one call.
PYTHON_CASES = {
    "dlpack": ("`__dlpack__(max_version=(1, 0))`, host memory", {
        "devbuf": "host.__dlpack__(max_version=(1, 0))",
        "numpy": "host_np.__dlpack__(max_version=(1, 0))",
    }, "host"),
    "from_dlpack": ("`np.from_dlpack(x)`", {
        "devbuf": "np.from_dlpack(host)",
        "numpy": "np.from_dlpack(host_np)",
    }, "host"),
    "asarray": ("`np.asarray(x)` through the buffer protocol", {
        "devbuf": "np.asarray(host)",
        "memoryview": "np.asarray(host_memoryview)",
        # The floor: the cheapest exporter CPython has, asked for its buffer once per call.
        "bytearray": "np.asarray(host_bytearray)",
        # The floor for devbuf's float32 view: CPython's exporter of the same format ('f').
        "array.array('f')": "np.asarray(host_float_array)",
    }, "host"),
    "alloc": ("alloc+free 1 KiB host, default resource", {
        "devbuf": "devbuf.alloc(1024, 'host', device='host')",
        "numpy": "np.empty(1024, dtype=np.uint8)",
        # The floor of a Python object over 1 KiB: a bytearray of that size.
        "bytearray": "bytearray(1024)",
    }, "host"),
    "suai": ("`__sycl_usm_array_interface__` getter", {
        "devbuf": "ours.__sycl_usm_array_interface__",
        "dpctl": "theirs.__sycl_usm_array_interface__",
        # The floor of a fresh dict per access: copying a prepared one.
        "dict.copy": "prepared.copy()",
    }, "sycl"),
    "suai_import": ("import of a foreign SUAI object", {
        "devbuf": "devbuf.asarray(foreign)",
        "dpctl": "dm.as_usm_memory(foreign)",
    }, "sycl"),
    # On the CUDA test driver (its directory on LD_LIBRARY_PATH): a pool hit stays on the host, so
    # it costs what the host pool's does; the test driver is not a GPU (ci/bench_cuda_driver.py).
    "cuda_pool": ("alloc+free 1 KiB CUDA device memory, pooled, on the CUDA test driver", {
        "devbuf": "devbuf.alloc(1024, 'device', mr=cuda_pool)",
        "host pool": "devbuf.alloc(1024, 'host', mr=host_pool)",
    }, "cuda"),
    "dpnp_import": ("import of a dpnp array", {
        "devbuf": "devbuf.asarray(dpnp_array)",
        "dpctl": "dm.as_usm_memory(dpnp_array)",
        # What devbuf's DLPack import asks of dpnp, with devbuf's queue as stream and without.
        "dpnp.__dlpack__(stream=q)": "dpnp_array.__dlpack__(stream=dpctl_queue, max_version=(1, 0))",
        "dpnp.__dlpack__()": "dpnp_array.__dlpack__(max_version=(1, 0))",
        "dpnp SUAI getter": "dpnp_array.__sycl_usm_array_interface__",
        "devbuf.asarray(SUAI of dpnp)": "devbuf.asarray(dpnp_suai)",
    }, "dpnp"),
}

RUST_CASES = {
    "buffer_alloc": ("`Buffer::alloc`+drop 1 KiB host (default resource)", "alloc"),
    "pool": ("pool `allocate`+`deallocate` 1 KiB", "pool"),
    "pooled_buffer": ("pooled `Buffer::alloc_from`+drop 1 KiB", "pooled-buffer"),
}


def setup(kind):
    """The objects the statements use."""
    import numpy as np

    import devbuf

    names = {"np": np, "devbuf": devbuf}
    host = devbuf.alloc(1024, "host", device="host").view("float32")
    host_np = np.zeros(256, dtype=np.float32)
    names.update(host=host, host_np=host_np, host_memoryview=memoryview(host_np),
                 host_bytearray=bytearray(1024), host_float_array=array.array("f", bytes(1024)))
    if kind in ("sycl", "dpnp"):
        import dpctl.memory as dm

        theirs = dm.MemoryUSMShared(1024)

        class ThirdParty:
            def __init__(self, interface):
                self.__sycl_usm_array_interface__ = interface

        ours = devbuf.alloc(1024, "shared")
        names.update(dm=dm, ours=ours, theirs=theirs,
                     prepared=dict(ours.__sycl_usm_array_interface__),
                     foreign=ThirdParty(dict(theirs.__sycl_usm_array_interface__)),
                     dpctl_queue=theirs.sycl_queue, ThirdParty=ThirdParty)
    if kind == "cuda":
        import devbuf.mr

        pools = {}
        for selector in ("cuda:0", "host"):
            with devbuf.Device(selector):
                pools[selector] = devbuf.mr.PoolMemoryResource(devbuf.mr.QueueMemoryResource())
        names.update(cuda_pool=pools["cuda:0"], host_pool=pools["host"])
    if kind == "dpnp":
        import dpnp

        dpnp_array = dpnp.empty(1024, dtype=dpnp.uint8, sycl_queue=names["dpctl_queue"])
        names.update(dpnp=dpnp, dpnp_array=dpnp_array,
                     dpnp_suai=names["ThirdParty"](dpnp_array.__sycl_usm_array_interface__))
    return names


def run(case, side, calls):
    _, statements, kind = PYTHON_CASES[case]
    names = setup(kind)
    code = compile(f"for _ in range({calls}):\n    {statements[side]}\n", case, "exec")
    exec(compile(statements[side], case, "exec"), names)  # warm the caches, whatever N is
    exec(code, names)


def instructions(command):
    # A fixed hash seed, so that start-up's dict probes count the same in both runs, and one
    # thread for the math libraries, whose idle threads spin for an unrepeatable while.
    env = dict(os.environ, PYTHONHASHSEED="0", OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1",
               MKL_NUM_THREADS="1")
    out = subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", *command],
                         capture_output=True, text=True, env=env)
    found = re.search(r"Collected : (\d+)", out.stderr)
    if out.returncode != 0 or not found:
        raise RuntimeError(f"{' '.join(command)}: {out.stderr[-2000:]}")
    return int(found.group(1))


@functools.lru_cache(None)
def locked_addresses(binary):
    """The addresses of the instructions of `binary` that are atomic read-modify-writes."""
    listing = subprocess.run(["objdump", "-d", "--no-show-raw-insn", binary], capture_output=True,
                             text=True, check=True).stdout
    found = set()
    for line in listing.splitlines():
        m = re.match(r"^\s*([0-9a-f]+):\s+(lock |xchg\s+\S*\(|xchg\s+%\w+,\S*\()", line)
        if m:
            found.add(int(m.group(1), 16))
    return found


def atomics(command):
    """Atomic read-modify-writes executed by `command`, from callgrind's per-instruction counts
    (addresses relative to each object, as objdump numbers them)."""
    with tempfile.NamedTemporaryFile(suffix=".callgrind") as out:
        subprocess.run(["valgrind", "--tool=callgrind", "--dump-instr=yes", "--compress-pos=no",
                        "--compress-strings=no", f"--callgrind-out-file={out.name}", *command],
                       capture_output=True, check=True)
        executed = collections.Counter()
        obj, after_call = None, False
        with open(out.name) as lines:
            for line in lines:
                if line.startswith("ob="):
                    obj = line[3:].strip()
                elif line.startswith("calls="):
                    after_call = True  # the next cost line is the callee's inclusive cost
                elif line.startswith("0x"):
                    if not after_call:
                        address, _, cost = line.split()
                        executed[(obj, int(address, 16))] += int(cost)
                    after_call = False
    return sum(cost for (obj, address), cost in executed.items()
               if obj and obj.startswith("/") and address in locked_addresses(obj))


def per_call(command, n1, n2, count=instructions):
    return (count([*command, str(n2)]) - count([*command, str(n1)])) / (n2 - n1)


def main(argv):
    if argv[:1] == ["--run"]:
        return run(argv[1], argv[2], int(argv[3]))
    with_atomics = argv[:1] == ["--atomics"]
    if with_atomics:
        argv = argv[1:]
    wanted = argv or ([*RUST_CASES] if with_atomics else [*RUST_CASES, *PYTHON_CASES])
    print("| case | side | instructions per call |" + (" atomics per call |" if with_atomics else ""))
    print("|---|---|---:|" + ("---:|" if with_atomics else ""))
    for case in wanted:
        if case in RUST_CASES:
            what, name = RUST_CASES[case]
            for side in ("devbuf", "std"):
                command = [HOST_BENCH, "--count", name, side]
                count = per_call(command, 2000, 12000)
                extra = f" {per_call(command, 1000, 6000, atomics):.1f} |" if with_atomics else ""
                print(f"| {what} | {side if side == 'devbuf' else '`std::alloc`'} | {count:.0f} |{extra}")
        else:
            what, statements, _ = PYTHON_CASES[case]
            n1, n2 = (200, 1200) if case == "dpnp_import" else (2000, 22000)
            for side in statements:
                count = per_call([sys.executable, __file__, "--run", case, side], n1, n2)
                print(f"| {what} | {side} | {count:.0f} |" + (" — |" if with_atomics else ""))
        sys.stdout.flush()


if __name__ == "__main__":
    os.chdir(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    main(sys.argv[1:])
