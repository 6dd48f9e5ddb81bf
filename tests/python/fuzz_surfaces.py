"""Random inputs at the surfaces past the descriptors (issue 39): memory resources written in
Python and the stream arguments of devbuf's calls. Each input is served correctly or refused with
a clean exception naming what is at fault, in devbuf's words; never a crash, a leak, or a Rust debug
dump. Seeded, so a failure is replayed by its seed and index.

Classes of input (chosen uniformly), on every usable host, SYCL and CUDA device:
- "resource": a resource written in Python whose `allocate` returns, through a random adaptor
  chain (none, pool, statistics, tracking, limiting), memory of the kind asked (which must be
  served, then filled and read back), another kind's memory, too little memory, host memory the
  device runtime does not know, spans that wrap the address space, unaligned or null addresses,
  non-ints, or raises (which must reach the caller as that very exception). A device runtime must
  refuse every address it does not vouch for (the host backend vouches for no foreign host memory
  and refuses only what it can tell: its own allocations' kinds and bounds, wrapping spans; SYCL
  bounds no allocation, so too little SYCL memory is not drawn). Every address handed out goes
  back to `deallocate` exactly once.
- "stream": fill, copy_from, get, to_bytes, copy_to_host, close and MemoryResource.allocate/
  deallocate with `stream=` a stream of the memory's device, of another device, or no stream at
  all; `Stream.from_handle` with device arguments that can or cannot own a CUDA handle. Streams of
  the right device must work; anything else is a ValueError/TypeError that names `stream` or
  `device`.

Usage: python fuzz_surfaces.py COUNT [SEED]   (ci/soak runs 10^6)
"""

import gc
import random
import sys
import time

import numpy as np

import devbuf
import devbuf.mr as mr

# Every usable device of a backend that makes streams (the inputs pass streams of their own).
STREAMING = {backend.name for backend in devbuf.backends() if backend.makes_streams}
DEVICES = [d for d in devbuf.devices() if d.usable and d.backend in STREAMING]
HOST_MEMORY = np.zeros(1 << 16, np.uint8)
HOST_ADDRESS = (HOST_MEMORY.ctypes.data + 255) // 256 * 256
UPSTREAMS = {device.selector: mr.QueueMemoryResource(device) for device in DEVICES}
STREAMS = {device.selector: devbuf.Stream(device) for device in DEVICES}
DEBUG_DUMPS = ("Buffer {", "Some(", "None)", "Cai", "Suai")


class Raised(Exception):
    pass


class Fuzzed(mr.MemoryResource):
    """Returns what the input says; every address handed out is counted until it comes back."""

    def __init__(self, device, answer):
        super().__init__(device)
        self.answer = answer
        self.out = {}
        self.returned = 0
        self.raised = []
        self.upstream_taken = {}  # address -> (upstream, bytes, kind) taken from an upstream

    def allocate(self, nbytes, kind="shared"):
        value = self.answer(self, nbytes, kind)
        if isinstance(value, int) and 0 < value < 2**64:  # an address devbuf can give back
            self.out[value] = self.out.get(value, 0) + 1
        return value

    def deallocate(self, ptr, nbytes, kind="shared"):
        assert self.out.get(ptr, 0) > 0, f"{ptr:#x} given back twice or never handed out"
        self.out[ptr] -= 1
        self.returned += 1
        taken = self.upstream_taken.pop(ptr, None) if self.out[ptr] == 0 else None
        if taken:
            upstream, size, taken_kind = taken
            upstream.deallocate(ptr, size, taken_kind)


def answers(rng, device, kind):
    """(name, answer, valid): what allocate returns, and whether the runtime must serve it."""
    upstream = UPSTREAMS[device.selector]
    other_kinds = [k for k in device.kinds if k != kind]
    choices = ["right", "raise", "host", "wrap", "null", "unaligned", "not-int"]
    if other_kinds:
        choices.append("other-kind")
    if device.backend != "sycl":
        choices.append("short")
    name = rng.choice(choices)

    def upstream_memory(nbytes_of, kind_of):
        def answer(resource, nbytes, asked):
            size = nbytes_of(nbytes)
            ptr = upstream.allocate(size, kind_of(asked))
            resource.upstream_taken[ptr] = (upstream, size, kind_of(asked))
            return ptr

        return answer

    if name == "right":
        return name, upstream_memory(lambda n: n, lambda asked: asked), True
    if name == "other-kind":
        other = rng.choice(other_kinds)
        return name, upstream_memory(lambda n: n, lambda asked: other), False
    if name == "short":
        return name, upstream_memory(lambda n: max(n // 2, 1), lambda asked: asked), False
    if name == "raise":
        def answer(resource, nbytes, asked):
            resource.raised.append(rng.choice([Raised, MemoryError, RecursionError, KeyError])("refused"))
            raise resource.raised[-1]

        return name, answer, False
    if name == "wrap":
        steps = rng.randrange(1 << 20)
        return name, lambda resource, nbytes, asked: 2**64 - 256 * (1 + steps % (nbytes // 256)), False
    fixed = {
        "host": HOST_ADDRESS,
        "null": 0,
        "unaligned": HOST_ADDRESS + rng.choice([1, 8, 128]),
        "not-int": rng.choice([None, "0x1000", 1.5, 2**70, -256, object()]),
    }[name]
    # The host backend cannot tell foreign host memory from garbage: it takes what looks usable.
    valid = name == "host" and device.backend == "host"
    return name, lambda resource, nbytes, asked: fixed, valid


def resource_case(rng):
    device = rng.choice(DEVICES)
    kind = rng.choice(device.kinds)
    name, answer, valid = answers(rng, device, kind)
    resource = Fuzzed(device, answer)
    chain = rng.choice(["none", "pool", "statistics", "tracking", "limiting"])
    adaptor = {
        "none": lambda r: r,
        "pool": lambda r: mr.PoolMemoryResource(r, initial_pool_size=1 << 20, maximum_pool_size=1 << 22),
        "statistics": mr.StatisticsResourceAdaptor,
        "tracking": mr.TrackingResourceAdaptor,
        "limiting": lambda r: mr.LimitingResourceAdaptor(r, 1 << 22),
    }[chain]
    nbytes = rng.choice([256, 4096, 8192])
    label = f"resource {name} {kind} on {device.selector} through {chain}"
    top = None
    try:
        top = adaptor(resource)  # a pool takes its initial block from the resource at once
        buffer = devbuf.alloc(nbytes, kind, mr=top)
    except (ValueError, TypeError) as refused:
        assert not valid, f"{label}: refused memory the runtime vouches for: {refused}"
        assert str(refused).startswith("Fuzzed.allocate returned"), f"{label}: {refused}"
        served = False
    except (Raised, MemoryError, RecursionError, KeyError) as raised:
        # A pool that retries raises what the first call raised.
        assert name == "raise" and any(raised is r for r in resource.raised), f"{label}: {raised!r} was not raised"
        served = False
    else:
        assert valid, f"{label}: served memory the runtime does not vouch for"
        if name == "right":
            buffer.fill(rng.randrange(256))
            byte = buffer.to_bytes()[:1]
            assert buffer.to_bytes() == byte * nbytes, f"{label}: read back wrong bytes"
        del buffer
        served = True
    del top
    gc.collect()
    leaked = {ptr: n for ptr, n in resource.out.items() if n}
    assert not leaked, f"{label}: handed out and never given back: {leaked}"
    return name, served


STREAM_CALLS = ["fill", "copy_from", "get", "to_bytes", "copy_to_host", "close", "allocate", "deallocate", "from_handle"]


def stream_case(rng):
    device = rng.choice(DEVICES)
    call = rng.choice(STREAM_CALLS)
    if call == "from_handle":
        selector = rng.choice(["host", "sycl", "opencl:0:0", "nope", "", "cuda:9", "cuda:0", "cuda"])
        label = f"Stream.from_handle(device={selector!r})"
        try:
            devbuf.Stream.from_handle(1, device=selector)  # CUDA's legacy default stream
        except ValueError as refused:
            message = str(refused)
            assert message.startswith("device: ") or message.startswith(f'no device matches "{selector}"'), f"{label}: {message}"
            return "from_handle", False
        except RuntimeError as unavailable:
            assert "backend unavailable" in str(unavailable), f"{label}: {unavailable}"
            return "from_handle", False
        assert selector.startswith("cuda"), f"{label}: adopted"
        return "from_handle", True
    other = rng.choice(DEVICES)
    stream = rng.choice([STREAMS[other.selector], None, other, 7, "stream"])
    right = stream is None or (isinstance(stream, devbuf.Stream) and other == device)
    kind = rng.choice(device.kinds)
    memory = devbuf.alloc(64, kind, device=device)
    label = f"{call}(stream={stream!r}) on {kind} memory of {device.selector}"
    resource = UPSTREAMS[device.selector]
    calls = {
        "fill": lambda: memory.fill(3, stream=stream),
        "copy_from": lambda: memory.copy_from(bytes(64), stream=stream),
        "get": lambda: memory.get(stream=stream),
        "to_bytes": lambda: memory.to_bytes(stream=stream),
        "copy_to_host": lambda: memory.copy_to_host(stream=stream),
        "close": lambda: memory.close(stream=stream),
        "allocate": lambda: resource.deallocate(resource.allocate(64, kind, stream=stream), 64, kind),
        "deallocate": lambda: resource.deallocate(resource.allocate(64, kind), 64, kind, stream=stream),
    }
    try:
        calls[call]()
    except (ValueError, TypeError) as refused:
        message = str(refused)
        assert not any(dump in message for dump in DEBUG_DUMPS), f"{label}: a debug dump: {message}"
        named = "stream" in message or "Stream" in message or "devbuf.Queue" in message
        assert named, f"{label}: the error names no argument: {message}"
        return call, False
    # Host-accessible memory is reachable from every stream.
    assert right or isinstance(stream, devbuf.Stream), f"{label}: accepted"
    return call, True


CASES = [resource_case, stream_case]


def run(count, seed=0, report_every=0):
    """Feeds `count` inputs; returns {what: (served, refused)}. Raises AssertionError naming the
    seed and index to replay."""
    rng = random.Random(seed)
    tally = {}
    started = time.monotonic()
    for index in range(count):
        case = rng.choice(CASES)
        try:
            what, served = case(rng)
        except AssertionError as wrong:
            raise AssertionError(f"seed {seed} input {index} ({case.__name__}): {wrong}") from None
        except Exception as other:  # noqa: BLE001 - any other exception class is the failure
            raise AssertionError(f"seed {seed} input {index} ({case.__name__}): unclean {other!r}") from other
        counts = tally.setdefault(what, [0, 0])
        counts[0 if served else 1] += 1
        if report_every and (index + 1) % report_every == 0:
            rate = (index + 1) / (time.monotonic() - started)
            print(f"{index + 1} inputs, {rate:,.0f}/s, {tally}", flush=True)
    return {what: tuple(counts) for what, counts in tally.items()}


if __name__ == "__main__":
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
    seed = int(sys.argv[2]) if len(sys.argv) > 2 else 0
    result = run(count, seed, report_every=max(count // 10, 1))
    print(f"fuzz_surfaces: {count} inputs, seed {seed}, devices {[d.selector for d in DEVICES]}, no crash: {result}")
