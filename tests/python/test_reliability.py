"""The CI profile of the stress and soak runs (reliability.py; ci/soak runs the long ones): on every
usable device, 8 threads sharing buffers for a bounded time with every byte checked and every
foreign producer released exactly once, and 20,000 alloc/export/import/free cycles whose resident
memory stays flat."""

import pytest

import devbuf
from reliability import soak, stress

DEVICES = [d.selector for d in devbuf.devices() if d.usable]
# Resident memory is counted in pages: 32 bytes a cycle is 640 KB over the run, well under one
# leaked export, buffer or capsule per cycle (each is hundreds of bytes at least).
RSS_BOUND = 32


@pytest.mark.parametrize("selector", DEVICES)
def test_eight_threads_share_buffers_and_read_what_they_expect(selector):
    assert stress(devbuf.Device(selector), seconds=1.5, seed=16) > 1000


@pytest.mark.parametrize("selector", DEVICES)
def test_alloc_export_import_free_cycles_keep_rss_flat(selector):
    growth = soak(devbuf.Device(selector), cycles=20_000)
    assert growth < RSS_BOUND, f"{selector}: RSS grew {growth:.1f} bytes a cycle"
