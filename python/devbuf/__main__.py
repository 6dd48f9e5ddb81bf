"""``python -m devbuf info``: backends, devices, kinds, why a backend is unavailable, and which
device is the default and why.
``python -m devbuf matrix [--wide]``: every conformance check and every consumer library on every
device, pass / FAIL / skip with the reason; exits 1 on any FAIL. Each row runs in a child process, so
a cell that crashes is a FAIL saying so, not the end of the matrix. One line per device, within 100
columns; --wide prints one column per check.
``python -m devbuf demo [--wide]``: memory on the default device handed zero-copy to dpctl, dpnp and
NumPy and back, writes on one side read on the other; then the matrix.
``python -m devbuf replay LOG [--device D] [--resource queue|pool|binning] [--kind K]``: every
allocation and free of a LoggingResourceAdaptor's log (or RMM's) again, against a resource of devbuf's
on device D (default: the default device); prints what it did and the time it took."""

import argparse
import sys

import devbuf
import devbuf.mr
from devbuf import _matrix, _runtime


def info() -> int:
    print(f"devbuf {devbuf.__version__}")
    for backend in devbuf.backends():
        state = "available" if backend.available else f"unavailable: {backend.reason}"
        print(f"\n{backend.name}: {state}")
        for device in backend.devices:
            print(f"  {device.selector}  {device.name} [{device.vendor}, driver {device.driver}]")
            if device.test_double:
                print(f"    NOT HARDWARE: {device.test_double}")
            if device.usable:
                memory = f", {device.global_mem_size / 2**30:.1f} GiB" if device.global_mem_size else ""
                print(f"    kinds: {', '.join(device.kinds)}{memory}")
            else:
                print(f"    unusable: {device.reason}")
    print(f"\nIntel CPU OpenCL runtime (the SYCL CPU device of devbuf's [sycl] extra): {_runtime.REGISTRATION}")
    try:
        device = devbuf.default_device()
        print(f"\ndefault device: {device.selector} ({device.name})")
        print(f"  why: {devbuf._devbuf._default_device_reason()}")
    except Exception as err:  # the default device may be unavailable; say why
        print(f"\ndefault device: none ({err})")
    print("  change it: DEVBUF_DEVICE=<selector>, devbuf.set_default_device(...), or with devbuf.Device(...):")
    return 0


def matrix(wide: bool = False) -> int:
    return _matrix.matrix(wide)


def say(text: str, indent: int = 0) -> None:
    """Prints ``text`` within the matrix's 100 columns, continued lines at column ``indent``."""
    print(_matrix._wrapped(text, indent) if text else "")


def demo(wide: bool = False) -> int:
    import numpy as np

    try:
        import dpctl.memory as dpctl_memory
    except ImportError:
        dpctl_memory = None
    try:
        import dpnp
    except ImportError:
        dpnp = None
    device = devbuf.default_device()
    say(f"default device: {device.selector} ({device.name}), kinds: {', '.join(device.kinds)}", 4)
    say("")
    # dpctl and dpnp take memory that SUAI describes, whichever backend's it is.
    backend = next(b for b in devbuf.backends() if b.name == device.backend)
    speaks_suai = "__sycl_usm_array_interface__" in backend.protocols
    if not speaks_suai:
        dpctl_memory = dpnp = None
    wrong = []

    def check(reader, seen, expected):
        # Each side must read what the other wrote last: the ordering every hand-off relies on.
        if not np.array_equal(seen, expected):
            wrong.append(f"{kind} memory: {reader} read {seen}, not {expected}")

    for kind in device.kinds:
        array = devbuf.alloc(4 * 8, kind).view("float32")
        expected = np.arange(8, dtype=np.float32)
        array.copy_from(expected)
        say(f"{kind:>6} memory at {array.ptr:#x}: devbuf wrote {np.frombuffer(array.to_bytes(), np.float32)}", 8)
        if dpctl_memory is not None:
            theirs = dpctl_memory.as_usm_memory(array)
            same = "the same pointer" if theirs._pointer == array.ptr else "A COPY"
            say(f"        dpctl sees {theirs.get_usm_type()} USM, {same}; dpctl writes 10..17", 10)
            expected = np.arange(10, 18, dtype=np.float32)
            theirs.copy_from_host(expected.tobytes())
        if dpnp is not None:
            theirs = dpnp.asarray(array)
            same = "the same pointer" if theirs.data.ptr == array.ptr else "A COPY"
            say(f"        dpnp sees a {theirs.usm_type} array, {same}, on devbuf's queue: "
                f"{theirs.sycl_queue == array.sycl_queue}; dpnp adds 1", 10)
            theirs += 1
            expected = expected + 1
        # Host and shared memory, and memory DLPack calls the CPU's (kDLCPU, 1): every kind of a
        # backend whose device is the host.
        if kind in ("host", "shared") or array.__dlpack_device__()[0] == 1:
            view = np.asarray(array)
            same = "the same pointer" if view.ctypes.data == array.ptr else "A COPY"
            say(f"        NumPy reads {view} through {same}; NumPy doubles it", 10)
            check("NumPy", view.copy(), expected)
            view *= 2
            expected = expected * 2
        back = np.frombuffer(array.to_bytes(), np.float32)
        say(f"        devbuf reads back {back}", 10)
        check("devbuf", back, expected)
    theirs = np.linspace(0, 1, 5)
    ours = devbuf.asarray(theirs)
    say("")
    say(f"NumPy array imported zero-copy (same pointer: {ours.ptr == theirs.ctypes.data}): {ours}", 4)
    if dpctl_memory is not None:
        usm = dpctl_memory.MemoryUSMDevice(16)
        usm.copy_from_host(b"dpctl's own USM!")
        imported = devbuf.asarray(usm)
        say(f"dpctl device USM imported zero-copy: {imported.kind} memory reading {imported.to_bytes()!r}", 4)
    if dpnp is not None:
        mine = dpnp.linspace(0, 1, 4, dtype=dpnp.float32)
        imported = devbuf.asarray(mine)
        same = "the same pointer" if imported.ptr == mine.data.ptr else "A COPY"
        say(f"dpnp array imported zero-copy ({same}): {imported}", 4)
    print()
    for line in wrong:
        say(f"WRONG: {line}", 4)
    return matrix(wide) or (1 if wrong else 0)


REPLAY_RESOURCES = {
    "queue": lambda upstream: upstream,
    "pool": lambda upstream: devbuf.mr.PoolMemoryResource(upstream),
    "binning": lambda upstream: devbuf.mr.BinningMemoryResource(upstream, 8, 20),
}


def replay(log: str, device: str | None, resource: str, kind: str) -> int:
    upstream = devbuf.mr.QueueMemoryResource(device)
    mr = REPLAY_RESOURCES[resource](upstream)
    report = devbuf.mr.replay(log, mr, kind)
    print(f"replayed {log} against {type(mr).__name__} on {mr.device.selector}")
    for key, value in report.items():
        print(f"  {key}: {value:.6f}" if isinstance(value, float) else f"  {key}: {value}")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m devbuf", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("command", choices=["info", "matrix", "demo", "replay"], nargs="?", default="info")
    parser.add_argument("log", nargs="?", help="replay: the log file")
    parser.add_argument("--device", help="replay: the device's selector (default: the default device)")
    parser.add_argument("--resource", choices=sorted(REPLAY_RESOURCES), default="queue", help="replay: what to replay against")
    parser.add_argument("--kind", choices=["host", "device", "shared"], default="device",
                        help="replay: the kind of a log without a Kind column (RMM's)")
    parser.add_argument("--wide", action="store_true",
                        help="matrix, demo: the whole matrix, one column per check (about 330 columns)")
    args = parser.parse_args(argv)
    if args.command == "replay":
        if args.log is None:
            parser.error("replay needs the log file: python -m devbuf replay LOG")
        return replay(args.log, args.device, args.resource, args.kind)
    if args.log is not None:
        parser.error(f"{args.command} takes no log file")
    if args.command == "info":
        return info()
    return {"matrix": matrix, "demo": demo}[args.command](args.wide)


if __name__ == "__main__":
    sys.exit(main())
