"""devbuf and dpnp working on one queue from several Python threads, on the real SYCL runtime:
no thread may hang. The SYCL scheduler's lock, dpnp's host tasks (which take the GIL) and the GIL
make a cycle when a thread waits inside the scheduler while another holds the GIL and submits;
devbuf never holds the GIL inside the runtime and never waits inside it (docs/architecture.md,
"Blocking calls and the GIL"). Each program runs in its own interpreter: a hang fails the test."""

import subprocess
import sys
import textwrap

import pytest

from conftest import require_backend

pytest.importorskip("dpnp")

# Before: hung in 5 of 5 runs (devbuf's wait for the fill held the scheduler's lock, waiting for a
# dpnp host task that waited for the GIL, held by a dpnp submission waiting for that lock).
DEVBUF_WAITS_BESIDE_DPNP_KERNELS = """
    import threading, time
    import dpnp, devbuf, numpy as np
    x = dpnp.ones(1 << 20, dtype=np.float32)
    a = devbuf.asarray(x)  # dpnp's memory, imported once: dpnp's own getter waits
    (x + 1).sum()  # dpnp's first call sets up its statics (not safe beside other threads)
    stop = time.monotonic() + 2
    def dpnp_kernels():  # each with a host task that takes the GIL
        while time.monotonic() < stop:
            z = x + 1
            del z
    def devbuf_fills():  # ordered after dpnp's work on the queue, then waited for
        while time.monotonic() < stop:
            a.fill(1.0)
    threads = [threading.Thread(target=f) for f in (dpnp_kernels, dpnp_kernels, devbuf_fills)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert float(a.get()[0]) == 1.0
    print("done", flush=True)
    """


def test_devbufs_blocking_fills_beside_dpnp_kernels_on_other_threads_never_hang():
    require_backend("sycl")
    try:
        result = subprocess.run(
            [sys.executable, "-c", textwrap.dedent(DEVBUF_WAITS_BESIDE_DPNP_KERNELS)],
            capture_output=True,
            text=True,
            timeout=60,
        )
    except subprocess.TimeoutExpired:
        pytest.fail("hung: devbuf's fills beside dpnp's kernels on other threads")
    assert result.returncode == 0 and "done" in result.stdout, result.stdout + result.stderr
