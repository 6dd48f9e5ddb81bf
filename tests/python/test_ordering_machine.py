"""The ordering invariant's stateful property test (ordering_machine.py), short profile: random
sequences over devbuf's memory API (allocations from every resource and creation function, views,
exports and consumers' writes, devbuf's reads and writes, frees on streams and later owners, the
allocator entry points), every read checked against a model, on the real SYCL runtime and on the
CUDA test driver with its delay on. ci/soak runs the long profile; test_ordering_coverage.py checks
that the machine's rules make every public call that touches memory."""

import os
import pathlib
import subprocess
import sys

import pytest

from conftest import require_backend

MACHINE = pathlib.Path(__file__).with_name("ordering_machine.py")
# About 40 s for SYCL and 30 s on the CUDA test driver on a 2-core machine at load 4.
EXAMPLES = os.environ.get("DEVBUF_ORDERING_EXAMPLES", "100")
STEPS = os.environ.get("DEVBUF_ORDERING_STEPS", "30")


def run_machine(backend, **env):
    result = subprocess.run(
        [sys.executable, str(MACHINE), backend, EXAMPLES, STEPS],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]


def test_random_sequences_on_sycl_read_what_the_last_writer_wrote():
    require_backend("sycl")
    pytest.importorskip("dpctl")
    run_machine("sycl")


def test_random_sequences_on_the_cuda_test_driver_read_what_the_last_writer_wrote():
    require_backend("cuda")
    run_machine("cuda", DEVBUF_CUDA_TEST_DELAY_US="2000")
