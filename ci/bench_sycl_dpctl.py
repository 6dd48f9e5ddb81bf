"""dpctl's side of ci/bench-sycl: the same cases as crates/devbuf-sycl/examples/bench_sycl.rs, through
dpctl.memory on the same device. Prints one JSON object per line."""

import json
import statistics
import sys
import time

import dpctl
import dpctl.memory as dpm

ALLOC_BYTES = 1024
ALLOCS_PER_RUN = 1000
ALLOC_RUNS = 51
COPY_BYTES = 64 << 20
COPY_RUNS = 31


def report(case, samples):
    print(json.dumps({"case": case, "median_ns": round(statistics.median(samples), 1),
                      "runs": len(samples)}))


def main():
    queue = dpctl.SyclQueue(sys.argv[1] if len(sys.argv) > 1 else "opencl:cpu:0")
    print(f"dpctl {dpctl.__version__}: {queue.sycl_device.filter_string} "
          f"({queue.sycl_device.name})", file=sys.stderr)
    kinds = {"host": dpm.MemoryUSMHost, "device": dpm.MemoryUSMDevice,
             "shared": dpm.MemoryUSMShared}
    for kind, memory in kinds.items():
        samples = []
        for _ in range(ALLOC_RUNS):
            start = time.perf_counter_ns()
            for _ in range(ALLOCS_PER_RUN):
                del_me = memory(ALLOC_BYTES, queue=queue)
                del del_me
            samples.append((time.perf_counter_ns() - start) / ALLOCS_PER_RUN)
        report(f"alloc+free 1 KiB {kind}", samples)

    shared = dpm.MemoryUSMShared(COPY_BYTES, queue=queue)
    device = dpm.MemoryUSMDevice(COPY_BYTES, queue=queue)
    host = dpm.MemoryUSMHost(COPY_BYTES, queue=queue)
    shared.memset(0x5A)
    to_device, to_host = [], []
    for _ in range(COPY_RUNS):
        start = time.perf_counter_ns()
        device.copy_from_device(shared)
        middle = time.perf_counter_ns()
        host.copy_from_device(device)
        to_device.append(middle - start)
        to_host.append(time.perf_counter_ns() - middle)
    if bytes(host.copy_to_host()[-64:]) != b"\x5a" * 64:
        sys.exit("the 64 MiB copies produced wrong bytes")
    report("copy 64 MiB shared->device", to_device)
    report("copy 64 MiB device->host", to_host)


if __name__ == "__main__":
    main()
