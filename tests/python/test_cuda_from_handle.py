"""test_from_handle.py's tests on CUDA (ci/test runs them on the CUDA test driver)."""

import pytest

import devbuf
from conftest import require_backend
from test_from_handle import *  # noqa: F403 (the same tests, on the device below)


@pytest.fixture
def device():
    require_backend("cuda")
    return devbuf.Device("cuda:0")
