"""Beyond one process: pickle protocol 5, Dask scatter + gather, and IPC against their peers,
in alternating rounds of the same run (ci/benchlib.py). Prints a Markdown table. Run through
ci/bench, after the package is installed."""

import argparse
import gc
import importlib.util
import multiprocessing
import pickle
import sys
import time

import numpy as np

import devbuf
from benchlib import Report, Row, load_average

NBYTES = 64 << 20
# A/A runs (--aa: two identical sides) of 41 rounds read 0.93-1.08 on the loaded 2-core VM (the
# rounds of one run spread 0.2-4.4x; BENCHMARKS-archive.md, "The Dask row's harness"): too coarse
# for a 5% goal. The median of 81 rounds wanders about 1/sqrt(2) as far.
DASK_ROUNDS = 81


def pickle5_round_trip(x):
    def run():
        frames = []
        payload = pickle.dumps(x, protocol=5, buffer_callback=frames.append)
        pickle.loads(payload, buffers=frames)

    return run


def child(conn):
    """Receives objects and answers with the time they were ready to use, then, once it has let go
    of them (freeing 64 MiB takes milliseconds), with "idle"."""
    import devbuf  # noqa: F401  (imported before timing starts)

    while True:
        message = conn.recv()
        if message is None:
            return
        if isinstance(message, devbuf.IpcHandle):
            start = time.perf_counter()
            view = devbuf.open_ipc(message)
            opened = time.perf_counter()
            conn.send((opened, opened - start))
            del view
        else:
            conn.send((time.perf_counter(), 0.0))
        del message
        conn.send("idle")


def pickle_and_ipc(report, host, reference):
    report.compare_runs("pickle protocol 5 dumps + loads, 64 MiB host buffer (out-of-band)",
                        pickle5_round_trip(host), pickle5_round_trip(reference), "NumPy array", 1.1,
                        rounds=51)

    shared = devbuf.alloc(NBYTES, "host", device="host", ipc=True)
    shared.fill(1)
    parent, child_end = multiprocessing.get_context("spawn").Pipe()
    worker = multiprocessing.get_context("spawn").Process(target=child, args=(child_end,))
    worker.start()
    parent.send(b"warm-up")
    parent.recv()
    parent.recv()

    def sent_to_child(obj):
        def run():
            start = time.perf_counter()
            parent.send(obj)
            ready, _ = parent.recv()
            parent.recv()  # idle
            return ready - start

        return run

    ipc_times, copy_times, open_times = [], [], []
    for _ in range(9):
        handle = shared.ipc_handle()
        start = time.perf_counter()
        parent.send(handle)
        ready, open_time = parent.recv()
        parent.recv()  # idle
        ipc_times.append(ready - start)
        open_times.append(open_time)
        copy_times.append(sent_to_child(host)())
    parent.send(None)
    worker.join()
    # The goal, at least 100 times faster, as a ratio.
    report.add(Row(report.section, "64 MiB host buffer to a spawned child: IPC handle + `open_ipc` vs "
                   "the buffer pickled through a pipe", ipc_times, copy_times, "pickled copy", 0.01))
    report.add(Row(report.section, "`devbuf.open_ipc` alone, in the child", open_times, [], ""))


def dask_cases(report, host, reference, aa):
    """Scatter + gather of 64 MiB on a 2-worker LocalCluster, devbuf against a NumPy array; with
    `aa`, also each side against an identical copy of itself."""
    import distributed

    with distributed.LocalCluster(n_workers=2, processes=True, threads_per_worker=1,
                                  dashboard_address=None) as cluster, distributed.Client(cluster) as client:
        # Every scatter goes to the same worker, so that both sides of a round take the same path
        # (left to itself the scheduler sends them round-robin: the two sides of a round to
        # different workers).
        worker = [min(client.scheduler_info()["workers"])]

        def scatter_gather(x):
            def run():
                future = client.scatter(x, hash=False, workers=worker)
                client.gather(future)
                del future

            return run

        def settled():
            """Returns once no process of the cluster holds a key (the previous run's future
            released and its 64 MiB freed on the scheduler and the workers, which happens after
            `gather` returns) and the client's garbage is collected, so that no run shares the
            machine with the one before it."""
            deadline = time.monotonic() + 30
            while client.run_on_scheduler(scheduler_keys) or any(client.run(worker_keys).values()):
                if time.monotonic() > deadline:
                    raise RuntimeError("the Dask cluster still holds keys 30 s after the last run")
                time.sleep(0.001)
            gc.collect()

        case = "Dask `scatter` + `gather`, 64 MiB, 2-worker LocalCluster"
        sides = [(case, host, reference, "NumPy array", 1.05)]
        if aa:
            sides += [(f"A/A: {case}, NumPy", reference, np.ones_like(reference), "an identical NumPy array", None),
                      (f"A/A: {case}, devbuf", host, host_ones(), "an identical devbuf array", None)]
        for name, ours, theirs, what, goal in sides:
            scatter_gather(ours)()  # warm-up: connections, imports on the workers
            scatter_gather(theirs)()
            report.compare_runs(name, scatter_gather(ours), scatter_gather(theirs), what, goal, rounds=DASK_ROUNDS,
                                settle=settled)


def scheduler_keys(dask_scheduler):
    return len(dask_scheduler.tasks)


def worker_keys(dask_worker):
    return len(dask_worker.data) + len(dask_worker.state.tasks)


def host_ones():
    """64 MiB of devbuf host memory, every byte 1 (as the NumPy arrays are)."""
    x = devbuf.alloc(NBYTES, "host", device="host")
    x.fill(1)
    return x


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dask-only", action="store_true", help="skip the pickle and IPC rows")
    parser.add_argument("--aa", action="store_true",
                        help="add A/A rows to the Dask case (a NumPy array against an identical one, devbuf "
                             "against devbuf): how far apart two identical sides read in this harness")
    args = parser.parse_args()
    host = host_ones()
    reference = np.ones(NBYTES, dtype=np.uint8)

    report = Report("beyond one process")
    if not args.dask_only:
        pickle_and_ipc(report, host, reference)
    if importlib.util.find_spec("distributed") is None:
        report.skip("Dask cases", "distributed is not installed")
    else:
        dask_cases(report, host, reference, args.aa)
    report.print(f"Python {sys.version.split()[0]}, NumPy {np.__version__}, devbuf {devbuf.__version__}; "
                 f"alternating rounds (51 pickle, 9 IPC, {DASK_ROUNDS} Dask); {load_average()} at the end")


if __name__ == "__main__":
    main()
