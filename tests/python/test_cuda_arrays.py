"""test_array_views.py's tests on CUDA: typed allocation, views, reshapes and strided copies of
device and managed memory (ci/test runs them on the CUDA test driver)."""

import pytest

import devbuf
from conftest import require_backend
from test_array_views import *  # noqa: F403 (the same tests, on the device below)


@pytest.fixture
def device():
    require_backend("cuda")
    return devbuf.Device("cuda:0")
