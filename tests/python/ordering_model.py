"""The ordering machine's model (ordering_machine.py): what each allocation's bytes should be, the
devbuf objects over them, and the steps' log; the base of the machine's rule classes."""

import collections
import functools
import os
import sys

import numpy as np
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, initialize

import devbuf

VALUES = st.integers(1, 250)
DTYPES = st.sampled_from(["uint8", "uint16", "float32"])  # the creation functions'; item sizes up to 4 (take_view)
STREAMS = st.integers(0, 3)  # an index into the backend's streams of a device, modulo their number
SOME_STREAM = st.one_of(st.none(), STREAMS)
MEMORIES = Bundle("memories")


def open_stream(stream):
    """Whether `stream` may still be used (it may have been closed since it wrote)."""
    try:
        stream.query()
        return True
    except ValueError:
        return False


def uniform(value, nbytes):
    return bytes([value]) * nbytes


def host_pattern(obj, value):
    """`value` in every byte, in `obj`'s dtype and shape (what copy_from takes into it)."""
    return np.frombuffer(uniform(value, obj.nbytes), obj.dtype).reshape(obj.shape)


def flat(obj):
    return obj if obj.ndim == 1 else obj.reshape(-1)


class Block:
    """One allocation's bytes as the model says they are, and how a later owner gets memory from
    where this allocation goes back when it is freed. `foreign`: memory devbuf did not allocate
    (its buffers cannot grow); `fixed_size`: from a FixedSizeMemoryResource (they grow to its block
    size only); `known`: which bytes the model knows (None: all; a resize's new memory is unknown
    until written)."""

    def __init__(self, obj, again, ipc=False, foreign=False, fixed_size=False):
        self.base, self.kind, self.device = obj.ptr, obj.kind, obj.device
        self.model = np.zeros(obj.nbytes, np.uint8)
        self.again, self.ipc, self.foreign, self.fixed_size = again, ipc, foreign, fixed_size
        self.known = None
        self.writer = None  # see Held.writer


class Held:
    """A devbuf object over (part of) a block."""

    def __init__(self, obj, block, keep=None):
        self.obj, self.block, self.keep = obj, block, keep
        self.start, self.nbytes = obj.ptr - block.base, obj.nbytes
        self.closed_stream = False  # allocated on a stream since closed
        # Handed out through a protocol whose consumers read through this object (CAI, SUAI, the
        # dpctl attributes, the exchange API, the buffer protocol): its size is fixed from then on.
        self.anchored = False
        self.name = "memories_?"

    @property
    def writer(self):
        """The devbuf stream of the last unfinished write to any part of the block (None: none, or
        a stream devbuf does not own): every write is ordered after the earlier ones on the same
        allocation, so its stream finishing finishes them all."""
        return self.block.writer

    @writer.setter
    def writer(self, stream):
        self.block.writer = stream

    @property
    def expected(self):
        return self.block.model[self.start:self.start + self.nbytes]

    def wrote(self, value, writer=None):
        self.block.model[self.start:self.start + self.nbytes] = value
        self.writer = writer

    def region(self, obj):
        """The model's bytes under `obj`, a devbuf object over (part of) this block."""
        start = obj.ptr - self.block.base
        assert 0 <= start and start + obj.nbytes <= self.block.model.size, f"{obj!r} is not in {self!r}"
        return self.block.model[start:start + obj.nbytes]

    def elements(self, obj=None):
        """The model's bytes under `obj` (default: this object) as its elements, in its shape."""
        obj = self.obj if obj is None else obj
        return self.region(obj).view(obj.dtype).reshape(obj.shape)

    def __repr__(self):
        return (f"<{type(self.obj).__name__} {self.block.kind} {self.nbytes} B at +{self.start} of "
                f"{self.block.device.selector} block {id(self.block) % 10007}>")


STEPS_RUN = collections.Counter()
FIRST_FAILURE = []
# DEVBUF_ORDERING_TRACE=FILE: every step as it starts (for a sequence that hangs).
TRACE = open(os.environ["DEVBUF_ORDERING_TRACE"], "w") if os.environ.get("DEVBUF_ORDERING_TRACE") else None


def step(function):
    """Logs each step as Python that replays it (`name = state.rule(argument=...)`, memories by
    name); when the CUDA test driver's context is lost (a sticky error, as on a GPU: no later
    sequence can run in this process, so hypothesis cannot shrink), prints the sequence that lost it
    and ends the process."""

    @functools.wraps(function)
    def logged(self, **arguments):
        STEPS_RUN[function.__name__] += 1
        named = ", ".join(f"{k}={v.name if isinstance(v, Held) else repr(v)}" for k, v in arguments.items())
        makes = bool(getattr(type(self), function.__name__).hypothesis_stateful_rule.targets)
        result = f"memories_{self.made}"
        self.log.append(f"{result + ' = ' if makes else ''}state.{function.__name__}({named})")
        if TRACE:
            print(self.log[-1], file=TRACE, flush=True)
        try:
            made = function(self, **arguments)
        except Exception as err:
            if self.backend.context_lost(err):
                print("The CUDA test driver's context is lost (a sticky error, as on a GPU); the sequence that lost it:",
                      *self.log, f"{type(err).__name__}: {err}", sep="\n    ", flush=True)
                os._exit(3)
            if not FIRST_FAILURE:
                # The first failure as drawn: a rerun may not fail the same way, since devbuf's
                # pools and the runtimes keep state between sequences (hypothesis then reports
                # "inconsistent data generation" or a shorter sequence).
                FIRST_FAILURE.append(self.log)
                print("The first failing sequence, as drawn:", *self.log, f"{type(err).__name__}: {err}",
                      sep="\n    ", file=sys.stderr, flush=True)
            raise
        if makes:
            made.name = result
            self.made += 1
        return made

    return logged


class Base(RuleBasedStateMachine):
    """The state every rule class shares, and the helpers they use."""

    backend = None  # set by ordering_machine.run
    resources = None
    replay_log = None

    @initialize()
    def start(self):
        self.log, self.made = [], 0
        if TRACE:
            print("-- a new sequence", file=TRACE, flush=True)

    # -- helpers ---------------------------------------------------------------------------------

    def device(self, index):
        devices = self.backend.devices
        return devices[index % len(devices)]

    def stream_on(self, device, index):
        if index is None:
            return None
        streams = self.backend.streams[device]
        return streams[index % len(streams)]

    def kind(self, kind):
        return kind if kind in self.backend.kinds else self.backend.kinds[0]

    def check(self, held, seen, how, expected=None):
        want = (held.expected if expected is None else expected).tobytes()
        if seen != want:
            wrong = np.flatnonzero(np.frombuffer(seen, np.uint8) != np.frombuffer(want, np.uint8))
            raise AssertionError(
                f"{how} of {held!r} read {sorted(set(seen))[:4]} where the last writers wrote "
                f"{sorted(set(want))[:4]} ({wrong.size} bytes differ, the first at {wrong[0]})"
            )

    def write_initial(self, held, value, from_host):
        obj = held.obj
        if from_host and obj.kind != "device":
            self.backend.raw_writes(obj.ptr, obj.nbytes, obj.kind, value, obj.device)
        elif isinstance(obj, devbuf.Buffer):
            obj.fill(value)
        else:
            obj.copy_from(host_pattern(obj, value))
        held.wrote(value)
        return held
