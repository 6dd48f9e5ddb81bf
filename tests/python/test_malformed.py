"""Bad input gets a clear exception naming the key at fault, never a crash, and nothing leaks or
is freed twice."""

import gc
import weakref

import numpy as np
import pytest

import devbuf

GOOD_CAI = {"version": 3, "data": (0x10000, False), "shape": (4,), "typestr": "<f4", "strides": None}
GOOD_SUAI = {
    "version": 1,
    "data": (0x10000, False),
    "shape": (4,),
    "typestr": "<f4",
    "strides": None,
    "offset": 0,
    "syclobj": "opencl:cpu:0",
}


class Producer:
    def __init__(self, attribute, dict_):
        setattr(self, attribute, dict_)


def without(dict_, key):
    return {k: v for k, v in dict_.items() if k != key}


CASES = [
    # (changes, exception, key)
    ({"version": 7}, ValueError, "version"),
    ({"version": "3"}, TypeError, "version"),
    ({"shape": (-1,)}, ValueError, "shape"),
    ({"shape": "4"}, TypeError, "shape"),
    ({"shape": (1 << 62, 8)}, ValueError, "shape"),
    ({"typestr": "<q4"}, ValueError, "typestr"),
    ({"typestr": 4}, TypeError, "typestr"),
    ({"data": (0, False)}, ValueError, "data"),
    ({"data": (0x10001, False)}, ValueError, "data"),
    ({"data": 0x10000}, TypeError, "data"),
    # The (pointer, read-only) pair: a tuple of an int and a bool, nothing else.
    ({"data": [0x10000, False]}, TypeError, "data"),
    ({"data": (0x10000, False, 0)}, TypeError, "data"),
    ({"data": (0x10000,)}, TypeError, "data"),
    ({"data": (0x10000, "no")}, TypeError, "data"),
    ({"data": ("0x10000", False)}, TypeError, "data"),
    ({"data": (-0x10000, False)}, TypeError, "data"),
    ({"strides": (4, 4)}, ValueError, "strides"),
    ({"strides": (1 << 62,)}, ValueError, "strides"),
    ({"strides": [None]}, TypeError, "strides"),
]


@pytest.mark.parametrize("changes,error,key", CASES, ids=[f"{next(iter(c))}-{e.__name__}" for c, e, _ in CASES])
@pytest.mark.parametrize("attribute", ["__cuda_array_interface__", "__sycl_usm_array_interface__"])
def test_malformed_interface_dicts_name_the_key(attribute, changes, error, key):
    good = GOOD_CAI if attribute.startswith("__cuda") else GOOD_SUAI
    if attribute.startswith("__sycl") and "version" in changes and changes["version"] == 7:
        changes = {"version": 3}
    producer = Producer(attribute, {**good, **changes})
    with pytest.raises(error, match=rf"^{key}: "):
        devbuf.asarray(producer)


@pytest.mark.parametrize("key", ["version", "shape", "typestr", "data"])
def test_missing_cai_keys_are_named(key):
    with pytest.raises(ValueError, match=rf"^{key}: missing"):
        devbuf.asarray(Producer("__cuda_array_interface__", without(GOOD_CAI, key)))


@pytest.mark.parametrize("key", ["version", "shape", "typestr", "data"])
def test_missing_suai_keys_are_named(key):
    # Without `data` the spec falls back to the buffer protocol; an object without one is a SUAI
    # fault naming the key, not a buffer-protocol TypeError.
    with pytest.raises(ValueError, match=rf"^{key}: missing from __sycl_usm_array_interface__"):
        devbuf.asarray(Producer("__sycl_usm_array_interface__", without(GOOD_SUAI, key)))


def test_suai_without_data_falls_back_to_the_buffer_protocol():
    class HostUsm(bytearray):
        __sycl_usm_array_interface__ = without(GOOD_SUAI, "data")

    assert devbuf.asarray(HostUsm(b"spec")).to_bytes() == b"spec"


def test_cai_specific_keys():
    cai = lambda **c: Producer("__cuda_array_interface__", {**GOOD_CAI, **c})  # noqa: E731
    with pytest.raises(ValueError, match="^mask: "):
        devbuf.asarray(cai(mask=Producer("__cuda_array_interface__", GOOD_CAI)))
    with pytest.raises(ValueError, match="^descr: "):
        devbuf.asarray(cai(descr=[("x", "<f4"), ("y", "<f4")]))
    with pytest.raises(TypeError, match="^descr: expected a list of"):
        devbuf.asarray(cai(descr=5))
    with pytest.raises(TypeError, match="^stream: "):
        devbuf.asarray(cai(stream="default"))
    with pytest.raises(TypeError, match="not a dict"):
        devbuf.asarray(Producer("__cuda_array_interface__", [1, 2]))
    with pytest.raises(ValueError, match="^strides: byte stride 6"):
        devbuf.asarray(cai(strides=(6,)))


def test_suai_specific_keys():
    suai = lambda **c: Producer("__sycl_usm_array_interface__", {**GOOD_SUAI, **c})  # noqa: E731
    with pytest.raises(ValueError, match="^offset: "):
        devbuf.asarray(suai(offset=-2))
    with pytest.raises(TypeError, match="^offset: "):
        devbuf.asarray(suai(offset="2"))
    with pytest.raises(ValueError, match="^syclobj: missing"):
        devbuf.asarray(Producer("__sycl_usm_array_interface__", without(GOOD_SUAI, "syclobj")))
    with pytest.raises(ValueError, match="^typedescr: "):
        devbuf.asarray(suai(typedescr=[("a", "<f4")]))
    with pytest.raises(TypeError, match="^typedescr: expected a list of"):
        devbuf.asarray(suai(typedescr=5))
    with pytest.raises(ValueError, match="^syclobj: "):
        devbuf.asarray(suai(syclobj=12345))


def test_dlpack_capsules_of_the_wrong_kind_or_used_twice():
    import ctypes

    make = ctypes.pythonapi.PyCapsule_New
    make.restype = ctypes.py_object
    make.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
    with pytest.raises(TypeError, match="^capsule: "):
        devbuf.from_dlpack(make(0x1000, b"not_dltensor", None))
    capsule = np.arange(3.0).__dlpack__()
    devbuf.from_dlpack(capsule)
    with pytest.raises(ValueError, match="^capsule: .*already consumed"):
        devbuf.from_dlpack(capsule)
    with pytest.raises(TypeError, match="__dlpack__"):
        devbuf.from_dlpack(object())


def test_unsupported_buffer_formats_name_the_format():
    structured = np.zeros(3, dtype=[("a", "<i4"), ("b", "<f8")])
    with pytest.raises(ValueError, match="^format: "):
        devbuf.asarray(memoryview(structured))


def test_objects_that_speak_no_protocol():
    with pytest.raises(TypeError, match="cannot import a object"):
        devbuf.asarray(object())


def test_a_producer_whose_dlpack_raises_buffererror_falls_back_to_its_buffer():
    class Host(bytearray):
        def __dlpack__(self, **_):
            raise BufferError("cannot export")

        def __dlpack_device__(self):
            return (1, 0)

    assert devbuf.asarray(Host(b"fallback")).to_bytes() == b"fallback"


def test_failed_imports_neither_leak_nor_free_the_producer(collect=None):
    source = np.arange(8.0)
    alive = weakref.ref(source)
    for _ in range(100):
        with pytest.raises(ValueError):
            devbuf.asarray(Producer("__sycl_usm_array_interface__", {**GOOD_SUAI, "data": (source.ctypes.data, False), "syclobj": 1}))
    capsule = source.__dlpack__()
    del source
    gc.collect()
    assert alive() is not None  # the unconsumed capsule still owns it
    del capsule
    gc.collect()
    assert alive() is None


def test_keys_that_are_not_the_interned_strs_are_read_too():
    # devbuf reads a dict in one pass, matching keys by identity with its interned names first: a
    # producer's keys built at run time, or a str subclass, must be found by their text.
    class Key(str):
        pass

    def fresh(text):
        key = "".join(list(text))
        assert key == text and key is not text
        return key

    for make in (fresh, Key):
        for attribute, good, key, changes, message in [
            ("__sycl_usm_array_interface__", GOOD_SUAI, "offset", {"offset": -2}, "^offset: -2 is negative"),
            ("__cuda_array_interface__", GOOD_CAI, "mask", {"mask": GOOD_CAI}, "^mask: masked arrays"),
        ]:
            producer = Producer(attribute, {make(k): v for k, v in {**good, **changes}.items()})
            with pytest.raises(ValueError, match=message):
                devbuf.asarray(producer)
