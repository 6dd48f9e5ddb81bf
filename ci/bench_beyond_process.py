"""Beyond one process: pickle protocol 5, Dask scatter + gather, and IPC against their peers,
measured in the same run (medians over alternating rounds). Prints a Markdown table. Run through
ci/bench, after the package is installed."""

import multiprocessing
import pickle
import statistics
import sys
import time

import numpy as np

import devbuf

NBYTES = 64 << 20
rows = []


def compare(case, ours, theirs, reference, goal, meets):
    verdict = f"{goal}: {'meets' if meets else 'MISSES'}"
    ratio = ours / theirs
    rows.append(f"| {case} | {fmt(ours)} | {fmt(theirs)} ({reference}) | {ratio:.3g}× | {verdict} |")


def fmt(seconds):
    return f"{seconds * 1e3:.2f} ms" if seconds >= 1e-3 else f"{seconds * 1e6:.1f} µs"


def alternate(ours, theirs, rounds):
    """Median seconds of each callable, run in alternating rounds so both see the same load."""
    times = ([], [])
    for _ in range(rounds):
        for side, run in enumerate((ours, theirs)):
            start = time.perf_counter()
            run()
            times[side].append(time.perf_counter() - start)
    return statistics.median(times[0]), statistics.median(times[1])


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


def main():
    host = devbuf.alloc(NBYTES, "host", device="host")
    host.fill(1)
    reference = np.ones(NBYTES, dtype=np.uint8)

    ours, theirs = alternate(pickle5_round_trip(host), pickle5_round_trip(reference), 51)
    compare("pickle protocol 5 dumps + loads, 64 MiB host buffer (out-of-band)", ours, theirs,
            "NumPy array", "≤ 1.1×", ours <= 1.1 * theirs)

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
    ipc, copy = statistics.median(ipc_times), statistics.median(copy_times)
    compare("64 MiB host buffer to a spawned child: IPC handle + `open_ipc` vs the buffer pickled "
            "through a pipe", ipc, copy, "pickled copy", "≥ 100× faster", copy >= 100 * ipc)
    rows.append(f"| `devbuf.open_ipc` alone, in the child | {fmt(statistics.median(open_times))} | — | — | — |")

    try:
        import distributed
    except ImportError:
        rows.append("| Dask cases | — | — | — | skipped: distributed is not installed |")
    else:
        with distributed.LocalCluster(n_workers=2, processes=True, threads_per_worker=1,
                                      dashboard_address=None) as cluster, distributed.Client(cluster) as client:

            def scatter_gather(x):
                def run():
                    future = client.scatter(x, hash=False)
                    client.gather(future)
                    del future

                return run

            scatter_gather(host)()  # warm-up: connections, imports on the workers
            scatter_gather(reference)()
            ours, theirs = alternate(scatter_gather(host), scatter_gather(reference), 15)
            compare("Dask `scatter` + `gather`, 64 MiB, 2-worker LocalCluster", ours, theirs,
                    "NumPy array", "≤ 1.1×", ours <= 1.1 * theirs)

    print(f"Python {sys.version.split()[0]}, NumPy {np.__version__}, devbuf {devbuf.__version__}; "
          "medians of alternating rounds (51 pickle, 9 IPC, 15 Dask)\n")
    print("| case | devbuf | reference | ratio | goal |")
    print("|---|---:|---:|---:|---|")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
