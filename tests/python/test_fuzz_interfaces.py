"""Property-based fuzzing of the dict import paths (SUAI, CAI), of odd `__dlpack__` producers and
of DLPack tensors crafted field by field with ctypes: every input is a clean Python exception or a
correct import, never a crash, and every deleter runs exactly once. DEVBUF_FUZZ_EXAMPLES sets the
examples per path (ci/test: 2,000; ci/soak: 100× that)."""

import ctypes
import os

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import devbuf
from dlpack_craft import KDL_CPU, CraftedTensor, Producer as DlpackProducer, exchange_producer_type

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


# Host memory every crafted tensor points into, and the DLPack entry points it reaches devbuf by.
ARENA_BYTES = 4096
ARENA = (ctypes.c_uint8 * ARENA_BYTES)(*(i % 251 for i in range(ARENA_BYTES)))
ARENA_ADDRESS = ctypes.addressof(ARENA)
Exchange = exchange_producer_type()
int32s = st.one_of(st.integers(-2, 70), st.sampled_from([-(1 << 31), (1 << 31) - 1, 1 << 20]))
int64s = st.one_of(st.integers(-8, 4100), st.sampled_from([-(1 << 63), (1 << 63) - 1, 1 << 62, -(1 << 62)]))


@st.composite
def crafted_tensors(draw):
    """A managed tensor's fields (CraftedTensor's arguments): a well-formed CPU tensor over the
    arena, with up to four fields then drawn from anything their C type holds. The shape and
    strides arrays always hold 64 values (devbuf's and NumPy's most dimensions), so that any
    `ndim` devbuf may accept reads memory the tensor owns; a larger one must be refused first."""
    ndim = draw(st.integers(0, 3))
    small = st.lists(st.integers(-6, 6), min_size=64, max_size=64)
    fields = dict(
        data=ARENA_ADDRESS + 2048,
        device=(KDL_CPU, 0),
        ndim=ndim,
        shape=draw(st.lists(st.integers(0, 5), min_size=64, max_size=64)),
        strides=draw(st.one_of(st.none(), small)),
        dtype=draw(st.sampled_from([(0, 8, 1), (1, 8, 1), (1, 16, 1), (2, 32, 1), (2, 64, 1), (5, 128, 1), (6, 8, 1)])),
        byte_offset=draw(st.integers(0, 64)),
        versioned=draw(st.booleans()),
        version=(1, 3),
        flags=draw(st.sampled_from([0, 1])),
    )
    hostile = {
        "data": st.sampled_from([0, 1, ARENA_ADDRESS, ARENA_ADDRESS + 4095]),
        "device": st.tuples(int32s, int32s),
        "ndim": int32s,
        "shape": st.lists(int64s, min_size=64, max_size=64),
        "strides": st.lists(int64s, min_size=64, max_size=64),
        "dtype": st.tuples(st.integers(0, 255), st.integers(0, 255), st.integers(0, 65535)),
        "byte_offset": st.one_of(st.integers(0, 8192), st.sampled_from([(1 << 64) - 1, 1 << 63])),
        "version": st.tuples(st.integers(0, 3), st.integers(0, 9)),
        "flags": st.integers(0, (1 << 64) - 1),
    }
    for field in draw(st.lists(st.sampled_from(sorted(hostile)), max_size=4, unique=True)):
        fields[field] = draw(hostile[field])
    return fields


def in_arena(tensor):
    """Whether the elements the tensor describes (as DLPack defines them) lie inside the arena,
    and are few enough to read into bytes: only then may the test read them (a copy, NumPy's
    reference reading) without the producer having lied about its memory."""
    dl = tensor.managed.dl_tensor
    if not 0 <= dl.ndim <= 64 or dl.dtype.bits % 8 or dl.dtype.lanes == 0:
        return False
    shape = [dl.shape[i] for i in range(dl.ndim)]
    if any(n < 0 for n in shape):
        return False
    itemsize = dl.dtype.bits // 8 * dl.dtype.lanes
    if dl.strides:
        strides = [dl.strides[i] for i in range(dl.ndim)]
    else:
        strides, step = [], 1
        for n in reversed(shape):
            strides.insert(0, step)
            step *= n
    start = (dl.data or 0) + dl.byte_offset
    if 0 in shape:
        return True
    count = 1
    for n in shape:
        count *= n
    if count * itemsize > 1 << 20:
        return False  # a broadcast (stride 0) of 2^62 elements fits the arena but not a bytes object
    low = start + sum((n - 1) * s * itemsize for n, s in zip(shape, strides) if s < 0)
    high = start + sum((n - 1) * s * itemsize for n, s in zip(shape, strides) if s > 0) + itemsize
    return dl.data != 0 and ARENA_ADDRESS <= low and high <= ARENA_ADDRESS + ARENA_BYTES


@FUZZ
@given(
    crafted_tensors(),
    st.sampled_from(["producer", "capsule", "exchange", "used-capsule"]),
    st.one_of(st.none(), st.tuples(int32s, int32s)),
    st.booleans(),
)
def test_crafted_dlpack_tensors_import_or_raise_cleanly(fields, how, announced, copy):
    tensor = CraftedTensor(**fields, count_deletes=True)
    readable = in_arena(tensor)
    copy = copy and readable  # a copy reads every byte the producer describes
    if how == "exchange" and tensor.name != b"dltensor_versioned":
        how = "capsule"
    if how == "producer":
        source = DlpackProducer(tensor, announced=announced)
    elif how == "exchange":
        source = Exchange(tensor)
    else:
        source = tensor.capsule()
        if how == "used-capsule":
            # A capsule a consumer already took is renamed; devbuf must not take it again.
            ctypes.pythonapi.PyCapsule_SetName.argtypes = [ctypes.py_object, ctypes.c_char_p]
            ctypes.pythonapi.PyCapsule_SetName(source, b"used_" + tensor.name)
    try:
        array = devbuf.from_dlpack(source, copy=copy) if copy else devbuf.asarray(source)
    except CLEAN:
        # Refused: a capsule keeps its tensor (nobody consumed it), except one of a major version
        # devbuf cannot read, which DLPack says the consumer deletes; a tensor the exchange table
        # handed over is devbuf's, and deleted.
        unknown_major = fields["versioned"] and fields["version"][0] != 1 and how != "used-capsule"
        if how == "producer" and not source.calls:
            unknown_major = False  # refused on what __dlpack_device__ said: never asked for a capsule
        assert tensor.deletes == (1 if how == "exchange" or unknown_major else 0)
        event("refused")
        return
    event("imported, bytes checked" if readable else "imported")
    assert how != "used-capsule", "a used capsule was imported"
    dl = tensor.managed.dl_tensor
    # A malformed tensor may only be one devbuf cannot tell from a good one: host memory described
    # as host memory, or an empty array (no byte is read).
    assert dl.device.device_type == KDL_CPU or array.nbytes == 0, (dl.device.device_type, array.nbytes)
    if readable:
        try:
            # NumPy, the reference importer, reads a twin (its deleter is not the one counted).
            twin = CraftedTensor(**fields)  # outlives NumPy's array, which reads its deleter
            want = np.from_dlpack(DlpackProducer(twin)).tobytes()
        except (TypeError, ValueError, BufferError, RuntimeError):
            want = None  # NumPy does not take this dtype or layout; devbuf may
        if want is not None:
            assert np.asarray(array).tobytes() == want
    del array  # the last reference: devbuf deletes the tensor now
    assert tensor.deletes == 1, "the deleter of an imported tensor ran twice or never"


@pytest.mark.skipif(SYCL is None, reason="the SYCL backend is not available")
def test_the_fuzzer_reaches_successful_suai_imports():
    dict_ = dict(SYCL.__sycl_usm_array_interface__)
    assert devbuf.asarray(Producer("__sycl_usm_array_interface__", dict_)).shape == (64,)
