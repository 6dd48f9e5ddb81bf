"""A DLPack producer is untrusted: devbuf bounds every count it reads from the tensor before using
it (ndim ≤ 64) and routes by the capsule's own device, not by `__dlpack_device__`. Each case below
crashed the process or read foreign memory before those checks; now each is a clean exception,
through every entry point: a producer's `__dlpack__`, a bare capsule, and a C exchange table."""

import ctypes

import pytest

import devbuf
from conftest import backend_info
from dlpack_craft import (
    KDL_CPU,
    KDL_CUDA,
    KDL_ONEAPI,
    CraftedTensor,
    Producer,
    exchange_producer_type,
)

ENTRY_POINTS = {
    "asarray": lambda obj: devbuf.asarray(obj),
    "asarray-copy": lambda obj: devbuf.asarray(obj, copy=True),
    "from_dlpack": lambda obj: devbuf.from_dlpack(obj),
}

# 16 readable bytes: a real host address, so only the descriptor is at fault.
MEMORY = (ctypes.c_float * 4)(1, 2, 3, 4)


def host_tensor(**fields):
    return CraftedTensor(data=ctypes.addressof(MEMORY), **fields)


def wrappers(tensor):
    """The tensor as each kind of producer hands it over (exchange tables hand out versioned
    tensors only)."""
    found = {"producer": Producer(tensor), "capsule": tensor.capsule()}
    if tensor.name == b"dltensor_versioned":
        found["exchange"] = exchange_producer_type()(tensor)
    return found


@pytest.mark.parametrize("entry", ENTRY_POINTS)
@pytest.mark.parametrize("ndim", [2**31 - 1, 1 << 20, 65, -1, -(2**31)])
@pytest.mark.parametrize("versioned", [True, False])
def test_ndim_is_bounded_before_the_shape_is_read(entry, ndim, versioned):
    # One shape value behind a pointer that claims `ndim`: reading on walks off the array.
    tensor = host_tensor(ndim=ndim, shape=(4,), strides=(1,), versioned=versioned)
    for how, obj in wrappers(tensor).items():
        with pytest.raises(ValueError, match=rf"^ndim: {ndim} dimensions is outside the supported range \[0, 64\]"):
            ENTRY_POINTS[entry](obj)
        assert tensor.deletes == 0, how


def test_the_most_dimensions_numpy_allows_still_import():
    tensor = host_tensor(shape=(1,) * 63 + (4,))
    assert devbuf.asarray(Producer(tensor)).shape == (1,) * 63 + (4,)
    with pytest.raises(ValueError, match="^ndim: 65 dimensions"):
        devbuf.asarray(Producer(host_tensor(shape=(1,) * 64 + (4,))))


@pytest.mark.parametrize("entry", ENTRY_POINTS)
@pytest.mark.parametrize("capsule_device", [(KDL_ONEAPI, 0), (KDL_ONEAPI, 1), (KDL_CUDA, 0)])
def test_a_capsule_on_another_device_than_announced_is_refused(entry, capsule_device):
    # __dlpack_device__ says CPU; the capsule says device memory. Trusting the former made
    # devbuf take (and with copy=True memcpy) a device pointer as host memory.
    tensor = host_tensor(device=capsule_device)
    producer = Producer(tensor, announced=(KDL_CPU, 0))
    expected = rf"^device: the tensor is on DLPack device \({capsule_device[0]}, {capsule_device[1]}\) but __dlpack_device__\(\) said \(1, 0\)"
    with pytest.raises(BufferError, match=expected):
        ENTRY_POINTS[entry](producer)
    # And the other way round: announced device memory, a capsule that says CPU.
    producer = Producer(host_tensor(), announced=capsule_device)
    with pytest.raises(BufferError):
        ENTRY_POINTS[entry](producer)


def available(backend):
    info = backend_info(backend)
    return info is not None and info.available


@pytest.mark.parametrize("how", ["capsule", "exchange"])
@pytest.mark.parametrize("entry", ENTRY_POINTS)
def test_the_capsules_device_decides_and_its_pointer_is_checked_there(how, entry):
    """With nothing announced, the capsule's device routes the import: host memory labelled as
    SYCL or CUDA memory is checked by that runtime (or refused when devbuf cannot reach it)."""
    cases = [((KDL_ONEAPI, 1 << 20), BufferError, r"^device: devbuf cannot reach DLPack device \(14, 1048576\)")]
    if available("sycl"):
        cases.append(((KDL_ONEAPI, 0), ValueError, r"^data: 0x[0-9a-f]+ is not memory of \"sycl:"))
    if available("cuda"):
        cases.append(((KDL_CUDA, 0), ValueError, r"^data: 0x[0-9a-f]+ is not memory of \"cuda:0\""))
    else:
        cases.append(((KDL_CUDA, 0), BufferError, r"^device: devbuf cannot reach DLPack device \(2, 0\)"))
    for device, error, message in cases:
        tensor = host_tensor(device=device, count_deletes=True)
        obj = wrappers(tensor)[how]
        with pytest.raises(error, match=message):
            ENTRY_POINTS[entry](obj)
        # A tensor that came without a capsule is deleted by the consumer that refused it; a
        # refused capsule stays unconsumed, with its producer (the same error a second time).
        assert tensor.deletes == (1 if how == "exchange" else 0)
        if how == "capsule":
            with pytest.raises(error, match=message):
                ENTRY_POINTS[entry](obj)


def test_a_well_formed_crafted_tensor_imports_zero_copy():
    tensor = host_tensor(count_deletes=True)
    for obj in wrappers(tensor).values():
        array = devbuf.asarray(obj)
        assert array.buffer.ptr == ctypes.addressof(MEMORY)
        assert array.buffer.to_bytes() == bytes(MEMORY)
        del array
    import gc

    gc.collect()
    assert tensor.deletes == 3  # one per import, each once


def test_fuzzed_producers_never_crash():
    """The CI profile of the fuzzer (ci/soak runs 10^6 inputs): every class of crafted tensor,
    through every entry point, imports correctly or raises a clean error."""
    from fuzz_dlpack import run

    tally = run(20_000, seed=14)
    assert all(refused > 0 for name, (_, refused) in tally.items() if name != "valid_case"), tally
    assert tally["valid_case"][0] > 0, tally


class _Odd:
    """An argument of no type `__dlpack__` takes."""


@pytest.mark.parametrize(
    "kwargs",
    [
        {"copy": "odd"},
        {"dl_device": "odd"},
        {"max_version": "odd"},
        {"dl_device": (5, 0), "copy": False},
        {"dl_device": (2, 0)},
        {"stream": 5},
        {"stream": "odd"},
        {"unexpected": 1},
    ],
    ids=lambda kwargs: ",".join(f"{key}={value}" for key, value in kwargs.items()),
)
def test_refused_dlpack_calls_release_what_they_hold_at_once(kwargs):
    """Each refused `__dlpack__` call kept a reference to its arguments (their types, its error's
    type and message: ~130 bytes) in pyo3's pending pool until some other devbuf call ran; 1,000
    refusals held 1,000 references. Nothing else of devbuf's runs between them here."""
    import sys
    import tracemalloc

    odd = _Odd()
    kwargs = {key: odd if value == "odd" else value for key, value in kwargs.items()}
    buffer = devbuf.alloc(64, "host", device="host")
    with pytest.raises((TypeError, ValueError, BufferError)):
        buffer.__dlpack__(**kwargs)
    references = sys.getrefcount(odd), sys.getrefcount(_Odd), sys.getrefcount(buffer)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for _ in range(1000):
            try:
                buffer.__dlpack__(**kwargs)
            except (TypeError, ValueError, BufferError):
                pass
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert (sys.getrefcount(odd), sys.getrefcount(_Odd), sys.getrefcount(buffer)) == references
    assert grown < 16_000, f"{grown} bytes held after 1,000 refusals"
