"""`PoolMemoryResource` keeps RMM's contract, written as RMM users write it: the initial pool is
taken at construction (a size the device cannot give is a MemoryError there, not at some later
allocation), an initial size over the maximum is refused naming both, the limits and the bytes in
use are attributes, and there is a way back to the default resource; on every backend compiled
in. test_cuda_pool_contract.py runs the same tests on CUDA, for ci/test's runs on the CUDA test
driver."""

import pytest

import devbuf
import devbuf.mr as mr
from conftest import backend_names, require_backend

MiB = 1 << 20


@pytest.fixture(params=backend_names())
def device(request):
    require_backend(request.param)
    return devbuf.Device(request.param)


def test_the_initial_pool_is_taken_at_construction(device):
    pool = mr.PoolMemoryResource(mr.QueueMemoryResource(device), initial_pool_size=4 * MiB, maximum_pool_size=64 * MiB)
    assert pool.pool_size() == 4 * MiB
    assert (pool.initial_pool_size, pool.maximum_pool_size) == (4 * MiB, 64 * MiB)
    assert (pool.used_bytes, pool.free_bytes) == (0, 4 * MiB)
    kept = devbuf.alloc(MiB, "device", mr=pool)
    assert pool.pool_size() == 4 * MiB, "served from the reserved block"
    assert (pool.used_bytes, pool.free_bytes) == (MiB, 3 * MiB)
    kept.synchronize()
    del kept  # its block counts as used until the work that may touch it is done
    assert pool.used_bytes == 0
    unlimited = mr.PoolMemoryResource(mr.QueueMemoryResource(device))
    assert (unlimited.pool_size(), unlimited.initial_pool_size, unlimited.maximum_pool_size) == (0, 0, None)


def test_an_initial_pool_the_device_cannot_give_fails_at_construction(device):
    with pytest.raises(MemoryError):
        mr.PoolMemoryResource(mr.QueueMemoryResource(device), initial_pool_size=1 << 39)  # 512 GiB: more than this machine has


def test_an_initial_size_over_the_maximum_is_refused_naming_both(device):
    with pytest.raises(ValueError, match=r"^initial_pool_size: 2097152 bytes is more than maximum_pool_size, 1048576 bytes$"):
        mr.PoolMemoryResource(mr.QueueMemoryResource(device), initial_pool_size=2 * MiB, maximum_pool_size=MiB)


def test_reserved_kind_is_named_or_the_devices_first(device):
    pool = mr.PoolMemoryResource(mr.QueueMemoryResource(device), initial_pool_size=MiB, kind="shared")
    assert pool.pool_size() == MiB
    devbuf.alloc(4096, "shared", mr=pool)
    assert pool.pool_size() == MiB
    devbuf.alloc(4096, "device", mr=pool)  # another kind takes its own block on first use
    assert pool.pool_size() == 2 * MiB
    with pytest.raises(ValueError, match=r"^kind: "):
        mr.PoolMemoryResource(mr.QueueMemoryResource(device), initial_pool_size=MiB, kind="pinned")


def test_back_to_the_default_resource(device):
    pool = mr.PoolMemoryResource(mr.QueueMemoryResource(device), maximum_pool_size=16 * MiB)
    mr.set_current_device_resource(pool)
    try:
        assert mr.get_current_device_resource(device, "device") is pool
        devbuf.alloc(4096, "device", device=device)
        assert pool.pool_size() > 0
    finally:
        mr.reset_current_device_resource(device)
    assert type(mr.get_current_device_resource(device, "device")) is mr.QueueMemoryResource
    # The block of the first allocation goes back to the pool once the work on it is done, which
    # may be before or after this line: the pool's use may only shrink, never grow.
    before = pool.used_bytes
    kept = devbuf.alloc(4096, "device", device=device)
    assert pool.used_bytes <= before and kept.nbytes == 4096
