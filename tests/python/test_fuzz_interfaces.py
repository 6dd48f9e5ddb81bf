"""Property-based fuzzing of the dict import paths (SUAI, CAI) and of odd `__dlpack__` producers:
every input is a clean Python exception or a correct import, never a crash. DEVBUF_FUZZ_EXAMPLES
sets the examples per path (ci/test: 2,000; ci/soak: 100× that)."""

import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import devbuf

EXAMPLES = int(os.environ.get("DEVBUF_FUZZ_EXAMPLES", "2000"))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize="DEVBUF_FUZZ_SEED" not in os.environ,
    suppress_health_check=list(HealthCheck),
    database=None,
)
CLEAN = (TypeError, ValueError, BufferError, RuntimeError, OverflowError, AttributeError)


def sycl_buffer():
    if not any(b.name == "sycl" and b.available for b in devbuf.backends()):
        return None
    return devbuf.alloc(64, "shared", device="sycl")


SYCL = sycl_buffer()
HOST = np.arange(16, dtype=np.uint8)

ints = st.one_of(
    st.integers(-3, 70),
    st.sampled_from([-(1 << 63), (1 << 63) - 1, 1 << 62, 1 << 64, -1]),
)
anything = st.one_of(
    st.none(), ints, st.text(max_size=6), st.floats(allow_nan=True), st.binary(max_size=4),
    st.lists(ints, max_size=4).map(tuple), st.dictionaries(st.text(max_size=3), ints, max_size=2),
)
shapes = st.one_of(st.lists(ints, max_size=5).map(tuple), anything)
typestrs = st.one_of(
    st.sampled_from(["|u1", "<f4", "<f8", "<i2", ">i4", "|b1", "<c8", "|V3", "<q4", "", "f4", "<U2"]),
    st.text(max_size=5), anything,
)
pointers = st.one_of(
    st.sampled_from([0, 1, 0x10000, HOST.ctypes.data] + ([SYCL.ptr, SYCL.ptr + 8] if SYCL else [])),
    ints,
)
data = st.one_of(st.tuples(pointers, st.booleans()), anything)
syclobjs = st.one_of(
    st.sampled_from(["opencl:cpu:0", "nonsense", "cuda:9", ""]),
    st.sampled_from([SYCL.__sycl_usm_array_interface__["syclobj"]] if SYCL else [None]),
    anything,
)
KEYS = ["version", "data", "shape", "typestr", "strides", "offset", "syclobj", "descr", "mask", "stream"]


@st.composite
def interface_dicts(draw, protocol):
    base = {
        "version": draw(st.one_of(st.sampled_from([1, 2, 3]), anything)),
        "data": draw(data),
        "shape": draw(shapes),
        "typestr": draw(typestrs),
        "strides": draw(st.one_of(st.none(), shapes)),
    }
    if protocol == "suai":
        base["offset"] = draw(st.one_of(st.integers(-4, 64), anything))
        base["syclobj"] = draw(syclobjs)
    else:
        base["stream"] = draw(st.one_of(st.none(), ints, anything))
        base["mask"] = draw(st.one_of(st.none(), anything))
    for key in draw(st.lists(st.sampled_from(KEYS), max_size=3)):
        base.pop(key, None)
    for key in draw(st.lists(st.text(max_size=4), max_size=2)):
        base[key] = draw(anything)
    return draw(st.one_of(st.just(base), st.just(base), anything))


class Producer:
    def __init__(self, attribute, value):
        setattr(self, attribute, value)


def check_import(producer, expected_shape):
    try:
        array = devbuf.asarray(producer)
    except CLEAN:
        return
    assert isinstance(array, devbuf.Array)
    assert tuple(array.shape) == tuple(expected_shape)


@FUZZ
@given(interface_dicts("suai"))
def test_suai_dicts_import_or_raise_cleanly(dict_):
    shape = dict_.get("shape") if isinstance(dict_, dict) else None
    check_import(Producer("__sycl_usm_array_interface__", dict_), shape)


@FUZZ
@given(interface_dicts("cai"))
def test_cai_dicts_import_or_raise_cleanly(dict_):
    shape = dict_.get("shape") if isinstance(dict_, dict) else None
    check_import(Producer("__cuda_array_interface__", dict_), shape)


class OddProducer:
    """A `__dlpack__` producer that misbehaves in one of many ways."""

    def __init__(self, behaviour, source, device):
        self.behaviour, self.source, self.device = behaviour, source, device

    def __dlpack__(self, **kwargs):
        match self.behaviour:
            case "raise":
                raise RuntimeError("producer failure")
            case "raise-buffer":
                raise BufferError("cannot export")
            case "legacy":  # ignores max_version: an unversioned capsule
                return self.source.__dlpack__()
            case "versioned":
                return self.source.__dlpack__(max_version=(1, 0))
            case "same-capsule-twice":
                if not hasattr(self, "capsule"):
                    self.capsule = self.source.__dlpack__()
                return self.capsule
            case other:
                return other

    def __dlpack_device__(self):
        return self.device


@FUZZ
@given(
    st.one_of(
        st.sampled_from(["raise", "raise-buffer", "legacy", "versioned", "same-capsule-twice"]),
        anything,
    ),
    st.integers(0, 12),
    st.one_of(st.just((1, 0)), st.tuples(st.integers(-2, 20), st.integers(-2, 3)), anything),
)
def test_odd_dlpack_producers_import_or_raise_cleanly(behaviour, n, device):
    source = np.arange(n, dtype=np.int16)
    producer = OddProducer(behaviour, source, device)
    try:
        array = devbuf.from_dlpack(producer)
    except CLEAN:
        return
    assert bytes(memoryview(array)) == source.tobytes()


@pytest.mark.skipif(SYCL is None, reason="the SYCL backend is not available")
def test_the_fuzzer_reaches_successful_suai_imports():
    dict_ = dict(SYCL.__sycl_usm_array_interface__)
    assert devbuf.asarray(Producer("__sycl_usm_array_interface__", dict_)).shape == (64,)
