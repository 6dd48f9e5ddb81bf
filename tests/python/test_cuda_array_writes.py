"""test_array_writes.py's tests on CUDA: fills, assignments, dtype views, iteration and arrays of
Python values in device and managed memory (ci/test runs them on the CUDA test driver)."""

import pytest

import devbuf
from conftest import require_backend
from test_array_writes import *  # noqa: F403 (the same tests, on the device below)


@pytest.fixture
def device():
    require_backend("cuda")
    return devbuf.Device("cuda:0")
