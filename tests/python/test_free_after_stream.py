"""`MemoryResource.deallocate(ptr, nbytes, kind, stream=S)` on every resource and adaptor: the
block is freed, or handed out again, only after the work on S so far (RMM's contract, and the
streams guide's). A writer still running on S when the block is given back must not land in the
block's next owner: the next owner's bytes read back as written. On the CUDA test driver with its
delay (a free while S's work is pending is also an illegal address there), and on the real SYCL
runtime (S's fill behind large copies)."""

import pytest

import devbuf
import devbuf.mr as mr
from conftest import backend_names, require_backend

NBYTES = 1 << 22


def resources(device, kind):
    """Every resource and adaptor over the device's queue, by name. The pool holds one block of
    the size asked: a request after a free on a stream waits for that free (RMM's pool does)."""
    queue = lambda: mr.QueueMemoryResource(device)  # noqa: E731
    binning = mr.BinningMemoryResource(queue())
    binning.add_bin(NBYTES, mr.FixedSizeMemoryResource(queue(), block_size=NBYTES, blocks_to_preallocate=1))
    return {
        "queue": queue(),
        "pool": mr.PoolMemoryResource(queue(), initial_pool_size=5 << 20, maximum_pool_size=5 << 20,
                                      kind=kind),
        "binning": binning,
        "fixed_size": mr.FixedSizeMemoryResource(queue(), block_size=NBYTES, blocks_to_preallocate=1),
        "limiting": mr.LimitingResourceAdaptor(queue(), allocation_limit=4 * NBYTES),
        "statistics": mr.StatisticsResourceAdaptor(queue()),
        "tracking": mr.TrackingResourceAdaptor(queue()),
        "logging": mr.LoggingResourceAdaptor(queue(), _Sink()),
        "failure_callback": mr.FailureCallbackResourceAdaptor(queue(), lambda nbytes: False),
        "prefetch": mr.PrefetchResourceAdaptor(queue()),
    }


class _Sink:
    """A log stream that keeps nothing."""

    def write(self, text):
        return len(text)


@pytest.fixture(params=[name for name in backend_names(makes_streams=True) if name in ("cuda", "sycl")])
def device(request):
    require_backend(request.param)
    return devbuf.Device(request.param)


def busy_writer(device, stream, ptr, value):
    """Writes `value` over the block at `ptr` on `stream`, late: behind large work there. Returns
    what must stay alive until the write is done (a view of foreign memory waits for devbuf's
    work on it when it goes)."""
    block = devbuf.Buffer.from_handle(ptr, NBYTES, device)
    scratch = [devbuf.alloc(8 * NBYTES, "device", device=device) for _ in range(2)]
    for _ in range(3):
        scratch[1].copy_from(scratch[0], stream=stream, blocking=False)
    block.fill(value, stream=stream, blocking=False)
    return block, scratch


@pytest.mark.parametrize("name", ["queue", "pool", "binning", "fixed_size", "limiting", "statistics",
                                  "tracking", "logging", "failure_callback", "prefetch"])
@pytest.mark.parametrize("kind", ["device", "shared", "host"])
def test_a_block_given_back_on_a_stream_waits_for_its_work(device, name, kind):
    resource = resources(device, kind)[name]
    stream = devbuf.Stream(device)
    for round in range(3):
        ptr = resource.allocate(NBYTES, kind)
        keep = busy_writer(device, stream, ptr, 7)
        resource.deallocate(ptr, NBYTES, kind, stream=stream)
        again = resource.allocate(NBYTES, kind)
        block = devbuf.Buffer.from_handle(again, NBYTES, device)
        block.fill(9)
        seen = set(block.to_bytes())
        assert seen == {9}, f"round {round}: the next owner of {again:#x} read {sorted(seen)}, the old writer's 7"
        resource.deallocate(again, NBYTES, kind)
        del keep
