"""The host side of devbuf's CUDA hot paths, on the CUDA test driver (tests/cuda-driver; ci/bench
puts it on the loader path). The test driver is no GPU: its driver calls are Rust functions, not
NVIDIA's, so no figure here is a GPU's. What it can show is devbuf's own work on the host, where a
path makes no driver call at all: a pool hit. Its goal is the host pool's row, the same work on
host memory (devbuf.alloc(mr=pool)), within 1.5x. The driver calls each path makes are held by
tests/python/test_cuda_driver_calls.py; GPU figures come from ci/gpu (BENCHMARKS.md)."""

import sys

import devbuf
import devbuf.mr
from benchlib import ROUNDS, Report, load_average


def main():
    cuda = next((b for b in devbuf.backends() if b.name == "cuda"), None)
    if cuda is None or not cuda.available or not cuda.devices[0].test_double:
        why = "no CUDA" if cuda is None or not cuda.available else "a real GPU (ci/bench_cuda.py measures it)"
        print(f"the CUDA test driver is not loaded ({why}): nothing to measure")
        return
    pools = {}
    for selector in ("cuda:0", "host"):
        with devbuf.Device(selector):
            pools[selector] = devbuf.mr.PoolMemoryResource(devbuf.mr.QueueMemoryResource())
    report = Report("CUDA test driver")
    report.compare_calls("alloc+free 1 KiB CUDA device memory, pooled (`devbuf.alloc(mr=pool)`), a pool hit",
                         lambda: devbuf.alloc(1024, "device", mr=pools["cuda:0"]),
                         lambda: devbuf.alloc(1024, "host", mr=pools["host"]),
                         "the same through devbuf's host pool", 1.5)
    report.print(f"{cuda.devices[0].name} (not a GPU), Python {sys.version.split()[0]}; "
                 f"{ROUNDS} alternating rounds per case; {load_average()} at the end")


if __name__ == "__main__":
    main()
