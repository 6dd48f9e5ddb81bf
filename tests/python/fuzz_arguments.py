"""Random numbers and strings at the surfaces that turn them into addresses (issue 45): every input
is served correctly or refused with a clean exception naming the argument at fault, in devbuf's
words; never a crash, a Rust panic (pyo3's PanicException, which `except Exception` misses), a
stack overflow or a leak. Seeded, so a failure is replayed by its seed and index.

Classes of input (chosen uniformly), on every usable device:
- "constructor": a memory resource or adaptor (fixed-size, binning and its bins, limiting, pool,
  statistics, tracking, logging, failure-callback, prefetch) built with arguments drawn from valid
  sizes, boundaries (2^31 to 2^64 and past), negative numbers and non-ints, over a random upstream
  (the device's queue under a 4 MiB limit, or a resource built earlier in the run: bins that
  reach their binning resource and stacks hundreds deep are drawn too); then allocations of random
  sizes and kinds through it, served (written and read back) or refused.
- "selector": any Unicode after any backend's name (multi-byte, combining, full-width, NUL, lone
  surrogates, 10,000 characters) to Device, alloc, Stream, zeros, to_device, from_handle and an IPC
  handle naming it.
- "index": basic index tuples (ints in and far out of range, slices with any start, stop and step,
  `...`, `None`) and reshape and transpose arguments on arrays of up to 4 dimensions, checked
  against NumPy: the same elements, or a refusal where NumPy refuses.
- "from_handle": pointers into real memory of each device, past its end, at the top of the address
  space and past the user address space, null, negative and non-int; sizes from 0 to 2^64 and
  past; devices, owners and deleters right and wrong. Memory that exists is read back right; every
  span devbuf can tell is wrong is refused naming `ptr` or `nbytes`.
- "replay": logs of a logging adaptor, mutated line by line (sizes huge and negative, addresses of
  garbage, columns missing, extra or reordered, bytes that are no UTF-8), replayed against a host
  resource under a limit: a report, or a ValueError naming `log`; nothing left allocated.

Usage: python fuzz_arguments.py COUNT [SEED]   (ci/soak runs 10^6)
"""

import ctypes
import gc
import io
import os
import random
import sys
import tempfile
import time

import numpy as np

import devbuf
import devbuf.mr as mr
from ipc_craft import Fields

DEVICES = [d for d in devbuf.devices() if d.usable]
STREAMING = {b.name for b in devbuf.backends() if b.makes_streams}
BACKEND_WORDS = sorted({b.name for b in devbuf.backends()} | {"gpu", "cpu", "level_zero", "opencl:cpu", ""})
DEBUG_DUMPS = ("Buffer {", "Some(", "None)", "panicked", "Cai", "Suai", "Error {")
# What one input may take from a device: the CUDA test driver never reuses a device address (so
# that a freed pointer stays unknown to it), and 10^6 inputs of up to 64 MiB each ran through its
# 4 TiB range.
LIMIT = 4 << 20
INTS = [0, 1, 7, 255, 256, 1000, 4096, 1 << 20, 2**31, 2**32, 2**47, 2**56, 2**62, 2**62 + 256, 2**63 - 1, 2**63, 2**64 - 1, 2**64, 2**100, -1, -256, -(2**63), -(2**64)]
NON_INTS = [1.5, "64", None, b"\x00", object(), [4096], True, np.int64(4096), np.float32(2)]
UNICODE = ["€", "０", "９", "\u0301", "😀", "\x00", "\udcff", "\u202e", "GPU-", "gpu", ":", "-", "0", "1", "9", "a", "Z", " "]


class Unclean(AssertionError):
    pass


def draw_int(rng):
    roll = rng.random()
    if roll < 0.4:
        return rng.choice(INTS)
    if roll < 0.8:
        return rng.randrange(-(1 << 20), 1 << 24)
    if roll < 0.9:
        return rng.choice(NON_INTS)
    return rng.randrange(-(2**70), 2**70)


def check_clean(label, error, names):
    """A refusal in devbuf's words: an expected class, naming one of `names`, no debug dump."""
    message = str(error)
    if not isinstance(error, Exception):
        raise Unclean(f"{label}: {type(error).__name__} is no Exception: {message}")
    if any(dump in message for dump in DEBUG_DUMPS):
        raise Unclean(f"{label}: a debug dump: {message}")
    if names and not any(name in message for name in names):
        raise Unclean(f"{label}: {type(error).__name__} names none of {names}: {message}")


# -- constructors of resources and adaptors

BUILT = []  # resources built in this run: upstreams of later ones (bins that reach their binning)


def base_upstream(rng):
    device = rng.choice(DEVICES)
    return mr.LimitingResourceAdaptor(mr.QueueMemoryResource(device), LIMIT), device


def constructor_case(rng):
    if BUILT and rng.random() < 0.3:
        upstream, device = rng.choice(BUILT)
    else:
        upstream, device = base_upstream(rng)
    a, b = draw_int(rng), draw_int(rng)
    # Bins from 2^8 to 2^20 as often as anything else: most pairs drawn are refused.
    exponents = (rng.randrange(0, 12), rng.randrange(12, 21)) if rng.random() < 0.5 else (a, b)
    which = rng.choice(["fixed", "binning", "add_bin", "limiting", "pool", "statistics", "tracking", "logging", "callback", "prefetch", "deep"])
    makes = {
        "fixed": (lambda: mr.FixedSizeMemoryResource(upstream, a, b), ["block_size", "blocks_to_preallocate"]),
        "binning": (lambda: mr.BinningMemoryResource(upstream, *exponents), ["min_size_exponent", "max_size_exponent"]),
        "limiting": (lambda: mr.LimitingResourceAdaptor(upstream, a), ["allocation_limit"]),
        "pool": (lambda: mr.PoolMemoryResource(upstream, a, b), ["initial_pool_size", "maximum_pool_size"]),
        "statistics": (lambda: mr.StatisticsResourceAdaptor(upstream), ["upstream_mr"]),
        "tracking": (lambda: mr.TrackingResourceAdaptor(upstream), ["upstream_mr"]),
        "logging": (lambda: mr.LoggingResourceAdaptor(upstream, io.StringIO()), ["upstream_mr"]),
        "callback": (lambda: mr.FailureCallbackResourceAdaptor(upstream, lambda n: False), ["upstream_mr"]),
        "prefetch": (lambda: mr.PrefetchResourceAdaptor(upstream), ["upstream_mr"]),
    }
    label = f"{which}({a!r}, {b!r}) over {type(upstream).__name__} on {device.selector}"
    if which == "add_bin":
        try:
            binning = mr.BinningMemoryResource(upstream)
        except RecursionError as refused:
            check_clean(label, refused, ["upstream_mr"])
            return which, False
        bin_resource = rng.choice([None, binning, upstream] + [r for r, _ in BUILT[-4:]])
        label = f"add_bin({a!r}, {type(bin_resource).__name__})"
        try:
            binning.add_bin(a, bin_resource)
        except (ValueError, TypeError, RecursionError, OverflowError, MemoryError) as refused:
            check_clean(label, refused, ["allocation_size", "bin_resource", "upstream_mr"])
        resource = binning
    elif which == "deep":
        depth = rng.choice([10, 200, 255, 256, 300, 5000])
        label = f"a stack {depth} deep"
        resource = upstream
        try:
            for _ in range(depth):
                resource = mr.StatisticsResourceAdaptor(resource)
        except RecursionError as refused:
            check_clean(label, refused, ["upstream_mr"])
    else:
        make, names = makes[which]
        try:
            resource = make()
        except (ValueError, TypeError, RecursionError, OverflowError, MemoryError) as refused:
            if isinstance(refused, OverflowError):
                raise Unclean(f"{label}: OverflowError naming nothing: {refused}") from None
            check_clean(label, refused, names + ["upstream_mr"])
            return which, False
    served = allocate_through(rng, resource, device, label)
    if rng.random() < 0.2:
        BUILT.append((resource, device))
        del BUILT[:-16]
    return which, served


def allocate_through(rng, resource, device, label):
    served = False
    for _ in range(rng.randrange(1, 4)):
        nbytes = rng.choice([0, 1, 100, 256, 3000, 4096, 1 << 16, 1 << 20, LIMIT + 1, 2**40, 2**62])
        kind = rng.choice(device.kinds)
        try:
            buffer = devbuf.alloc(nbytes, kind, mr=resource)
        except (MemoryError, ValueError, RecursionError) as refused:
            check_clean(f"{label}: alloc({nbytes}, {kind!r})", refused, [])
            continue
        if buffer.nbytes != nbytes:
            raise Unclean(f"{label}: alloc({nbytes}) gave {buffer.nbytes} bytes")
        if 0 < nbytes <= 1 << 16:
            byte = rng.randrange(256)
            buffer.fill(byte)
            if buffer.to_bytes() != bytes([byte]) * nbytes:
                raise Unclean(f"{label}: {nbytes} bytes of {kind} memory read back wrong")
        served = True
        del buffer
    return served


# -- selectors


def random_selector(rng):
    if rng.random() < 0.2:
        return rng.choice(DEVICES).selector
    word = rng.choice(BACKEND_WORDS)
    tail = "".join(rng.choice(UNICODE) for _ in range(rng.randrange(0, 12)))
    if rng.random() < 0.02:
        tail *= 1000
    return f"{word}:{tail}" if word and rng.random() < 0.8 else word + tail


def selector_case(rng):
    selector = random_selector(rng)
    call = rng.choice(["Device", "alloc", "Stream", "zeros", "to_device", "from_handle(device)", "ipc"])
    calls = {
        "Device": lambda: devbuf.Device(selector),
        "alloc": lambda: devbuf.alloc(64, device=selector),
        "Stream": lambda: devbuf.Stream(selector),
        "zeros": lambda: devbuf.zeros((4,), "float32", device=selector),
        "to_device": lambda: devbuf.zeros((4,), "uint8", device="host").to_device(selector),
        "from_handle(device)": lambda: devbuf.Buffer.from_handle(0, 0, selector),
        "ipc": lambda: devbuf.open_ipc(IPC_HANDLE.but(device=selector.encode("utf-8", "surrogatepass")).encode()),
    }
    label = f"{call}({selector[:60]!r})"
    try:
        calls[call]()
    except (ValueError, TypeError, RuntimeError, BufferError, MemoryError) as refused:
        if isinstance(refused, RuntimeError) and "unavailable" not in str(refused):
            raise Unclean(f"{label}: RuntimeError: {refused}") from None
        check_clean(label, refused, [])
        return call, False
    return call, True


# -- indices, reshape and transpose, against NumPy

SLICE_ENDS = [None, 0, 1, 2, -1, -2, 3, 5, 100, -100, 2**62, -(2**62), 2**63 - 1, -(2**63), 2**64, -(2**64)]
STEPS = [None, 1, 2, 3, -1, -2, -3, 0, 2**62, -(2**62), 2**63 - 1, -(2**63)]


def random_index(rng, ndim):
    entries = []
    for _ in range(rng.randrange(0, ndim + 3)):
        roll = rng.random()
        if roll < 0.35:
            entries.append(rng.choice([0, 1, -1, 2, -2, 3, 5, -6, 2**62, -(2**63), 2**64]))
        elif roll < 0.8:
            entries.append(slice(rng.choice(SLICE_ENDS), rng.choice(SLICE_ENDS), rng.choice(STEPS)))
        elif roll < 0.9:
            entries.append(Ellipsis)
        else:
            entries.append(None)
    return tuple(entries) if rng.random() < 0.8 or len(entries) != 1 else entries[0]


def index_case(rng):
    shape = tuple(rng.randrange(0, 5) for _ in range(rng.randrange(0, 5)))
    dtype = rng.choice(["uint8", "int16", "float32", "complex128"])
    theirs = np.arange(int(np.prod(shape)), dtype=dtype).reshape(shape)
    device = rng.choice([d for d in DEVICES if "device" in d.kinds] or DEVICES)
    ours = devbuf.asarray(theirs, device=device.selector, copy=True)
    op = rng.choice(["index", "index", "reshape", "transpose"])
    if op == "index":
        index = random_index(rng, len(shape))
        label = f"x[{index!r}] of shape {shape}"
        apply_numpy, apply_ours = (lambda x: x[index]), (lambda x: x[index])
    elif op == "reshape":
        new = [rng.choice([-1, 0, 1, 2, 3, 4, 6, -2, 2**62, 2**63 - 1, -(2**63)]) for _ in range(rng.randrange(0, 5))]
        args = (tuple(new),) if rng.random() < 0.5 else tuple(new)
        label = f"x.reshape{args!r} of shape {shape}"
        apply_numpy, apply_ours = (lambda x: x.reshape(*args)), (lambda x: x.reshape(*args))
    else:
        axes = None if rng.random() < 0.3 else tuple(rng.choice([0, 1, 2, 3, -1, -5, 2**63]) for _ in range(rng.randrange(0, 5)))
        label = f"x.transpose({axes!r}) of shape {shape}"
        apply_numpy, apply_ours = (lambda x: x.transpose(axes)), (lambda x: x.transpose(axes))
    try:
        expected = apply_numpy(theirs)
    except (IndexError, ValueError, TypeError, OverflowError):
        expected = None
    try:
        got = apply_ours(ours)
    except (IndexError, ValueError, TypeError, OverflowError, NotImplementedError) as refused:
        check_clean(label, refused, [])
        if expected is not None and not isinstance(refused, NotImplementedError):
            # Where devbuf is stricter than NumPy, by design: a negative extent other than -1
            # (NumPy reads any as "unknown"; its documentation names -1).
            stricter = op == "reshape" and any(n < -1 for n in new)
            if not stricter:
                raise Unclean(f"{label}: NumPy gives shape {np.shape(expected)}, devbuf refused: {refused!r}") from None
        return op, False
    if expected is None:
        raise Unclean(f"{label}: NumPy refuses, devbuf gave shape {getattr(got, 'shape', got)}")
    values = got.get() if hasattr(got, "get") else got
    if np.shape(values) != np.shape(expected) or not np.array_equal(values, expected):
        raise Unclean(f"{label}: devbuf {np.shape(values)} {values!r} != NumPy {np.shape(expected)} {expected!r}")
    return op, True


# -- Buffer.from_handle


def from_handle_case(rng):
    device = rng.choice(DEVICES)
    kind = rng.choice(device.kinds)
    real = devbuf.alloc(4096, kind, device=device)
    host = np.arange(4096, dtype=np.uint8) % 251
    base, size, theirs = rng.choice([(real.ptr, 4096, False), (host.ctypes.data, 4096, True)])
    roll = rng.random()
    if roll < 0.3:
        ptr, nbytes = base + rng.randrange(0, 4096), rng.randrange(0, 64)
    elif roll < 0.5:
        ptr, nbytes = base, size + rng.choice([1, 4096, 2**40, 2**62])
    elif roll < 0.7:
        ptr, nbytes = rng.choice([0, 2**47 - 4096, 2**47, 2**56, 2**62, 2**64 - 16, 2**64 - 1]), rng.choice([0, 1, 16, 4096, 2**63])
    else:
        ptr, nbytes = draw_int(rng), draw_int(rng)
    target = rng.choice([device, device.selector, None, "host", "nope", 7])
    keep = rng.choice(["owner", "deleter", "none", "both", "bad-deleter"])
    deleted = []
    kwargs = {
        "owner": {"owner": (real, host)},
        "deleter": {"deleter": lambda: deleted.append(1)},
        "none": {},
        "both": {"owner": real, "deleter": lambda: None},
        "bad-deleter": {"deleter": 3},
    }[keep]
    label = f"from_handle({ptr!r}, {nbytes!r}, {target!r}, {keep}) near {kind} memory of {device.selector}"
    inside = isinstance(ptr, int) and isinstance(nbytes, int) and base <= ptr and ptr + nbytes <= base + size
    try:
        buffer = devbuf.Buffer.from_handle(ptr, nbytes, target, **kwargs)
    except (ValueError, TypeError, RuntimeError, BufferError) as refused:
        check_clean(label, refused, ["ptr", "nbytes", "device", "owner", "deleter", "no device matches", "unavailable", "selector"])
        return "from_handle", False
    if isinstance(ptr, int) and ptr + (nbytes if isinstance(nbytes, int) else 0) > 2**64:
        raise Unclean(f"{label}: a span that wraps the address space was accepted")
    # Read back only memory the host can read: NumPy's, or devbuf's host-accessible memory seen
    # as memory of its own device.
    readable = theirs or (buffer.device == real.device and kind != "device")
    if inside and readable and nbytes:
        got = np.frombuffer(buffer.to_bytes(), np.uint8)
        want = np.frombuffer((real.to_bytes() if base == real.ptr else host.tobytes()), np.uint8)[ptr - base : ptr - base + nbytes]
        if not np.array_equal(got, want):
            raise Unclean(f"{label}: read back wrong bytes")
    del buffer
    gc.collect()
    if keep == "deleter" and deleted != [1]:
        raise Unclean(f"{label}: the deleter ran {len(deleted)} times")
    return "from_handle", True


# -- replay logs


def make_log():
    sink = io.StringIO()
    logging = mr.LoggingResourceAdaptor(mr.QueueMemoryResource("host"), sink)
    rng = random.Random(45)
    live = []
    for _ in range(40):
        if live and rng.random() < 0.4:
            live.pop(rng.randrange(len(live)))
        else:
            live.append(devbuf.alloc(rng.choice([64, 256, 4096]), "host", mr=logging))
    del live
    gc.collect()
    return sink.getvalue().splitlines()


def mutate_line(rng, line):
    fields = line.split(",")
    roll = rng.random()
    if roll < 0.3 and fields:
        at = rng.randrange(len(fields))
        fields[at] = rng.choice(["", "-1", "0", "0x0", "18446744073709551616", str(2**62), "0xffffffffffffffff", "nan", "allocate", "free", "€", "1e9", " 12 ", "\x00"] + [str(draw_int(rng))])
    elif roll < 0.45 and fields:
        del fields[rng.randrange(len(fields))]
    elif roll < 0.55:
        fields.insert(rng.randrange(len(fields) + 1), rng.choice(["x", "", "0"]))
    elif roll < 0.6:
        rng.shuffle(fields)
    return ",".join(fields)


LOG_LINES = None


def replay_case(rng, workdir):
    global LOG_LINES
    if LOG_LINES is None:
        LOG_LINES = make_log()
    lines = list(LOG_LINES)
    for _ in range(rng.randrange(0, 6)):
        roll = rng.random()
        at = rng.randrange(len(lines))
        if roll < 0.5:
            lines[at] = mutate_line(rng, lines[at])
        elif roll < 0.7:
            del lines[at]
        elif roll < 0.9:
            lines.insert(at, lines[rng.randrange(len(lines))])
        else:
            lines.insert(at, "".join(rng.choice(UNICODE) for _ in range(rng.randrange(1, 30))))
    data = ("\n".join(lines[: rng.randrange(0, len(lines) + 1)]) + "\n").encode("utf-8", "surrogatepass")
    if rng.random() < 0.1:
        at = rng.randrange(len(data) + 1)
        data = data[:at] + bytes([rng.randrange(128, 256)]) + data[at:]
    path = os.path.join(workdir, "log.csv")
    with open(path, "wb") as out:
        out.write(data)
    limited = mr.LimitingResourceAdaptor(mr.QueueMemoryResource("host"), 16 << 20)
    label = f"replay of {len(data)} bytes"
    try:
        report = mr.replay(path, limited, rng.choice(["host", "device", "shared"]))
    except (ValueError, TypeError) as refused:
        check_clean(label, refused, ["log"])
        served = False
    else:
        if min(report[key] for key in ("allocations", "frees", "failures", "unmatched_frees", "left_live")) < 0:
            raise Unclean(f"{label}: a negative count: {report}")
        served = True
    if limited.get_allocated_bytes() != 0:
        raise Unclean(f"{label}: {limited.get_allocated_bytes()} bytes left allocated")
    return "replay", served


CASES = ["constructor", "selector", "index", "from_handle", "replay"]
IPC_HANDLE = Fields.parse(bytes(devbuf.alloc(64, "host", device="host", ipc=True).ipc_handle()))


def rss_bytes():
    """Resident memory once garbage is collected and glibc has given back the free memory it
    keeps (its heap keeps what the fuzzer's odd sizes freed, which reads as growth that is no
    leak: with the trim, RSS stays flat)."""
    gc.collect()
    ctypes.CDLL(None).malloc_trim(0)
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def run(count, seed=0, report_every=0):
    """Feeds `count` inputs; returns {what: (served, refused)}. Raises AssertionError naming the
    seed and index to replay."""
    rng = random.Random(seed)
    tally = {}
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as workdir:
        cases = {
            "constructor": constructor_case,
            "selector": selector_case,
            "index": index_case,
            "from_handle": from_handle_case,
            "replay": lambda rng: replay_case(rng, workdir),
        }
        for index in range(count):
            case = rng.choice(CASES)
            try:
                what, served = cases[case](rng)
            except AssertionError as wrong:
                raise AssertionError(f"seed {seed} input {index} ({case}): {wrong}") from None
            except BaseException as other:  # noqa: BLE001 - anything else (a PanicException) fails
                if isinstance(other, KeyboardInterrupt):
                    raise
                raise AssertionError(f"seed {seed} input {index} ({case}): unclean {other!r}") from other
            counts = tally.setdefault(what, [0, 0])
            counts[0 if served else 1] += 1
            if report_every and (index + 1) % report_every == 0:
                rate = (index + 1) / (time.monotonic() - started)
                print(f"{index + 1} inputs, {rate:,.0f}/s, RSS {rss_bytes() >> 20} MiB, {tally}", flush=True)
    BUILT.clear()
    return {what: tuple(counts) for what, counts in tally.items()}


if __name__ == "__main__":
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
    seed = int(sys.argv[2]) if len(sys.argv) > 2 else 0
    started = time.monotonic()
    result = run(count, seed, report_every=max(count // 10, 1))
    seconds = time.monotonic() - started
    print(f"fuzz_arguments: {count} inputs, seed {seed}, devices {[d.selector for d in DEVICES]}, {seconds:.0f} s, no crash: {result}")
