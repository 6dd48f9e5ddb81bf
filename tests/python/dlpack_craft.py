"""DLPack producers built field by field with ctypes, to hand devbuf's importers what no
well-behaved producer makes: any `ndim`, any device, shape arrays shorter than `ndim` says, a
`__dlpack_device__` that disagrees with the capsule, and C exchange tables returning such tensors.

Every crafted tensor keeps the ctypes objects it points into alive (`keep`), so a test decides how
long the memory lives; deleters are NULL unless a counter is asked for.
"""

import ctypes
import weakref

KDL_CPU = 1
KDL_CUDA = 2
KDL_CUDA_HOST = 3
KDL_OPENCL = 4
KDL_CUDA_MANAGED = 13
KDL_ONEAPI = 14


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


VERSIONED_DELETER = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
LEGACY_DELETER = VERSIONED_DELETER


class DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", LEGACY_DELETER)]


class DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [
        ("version", DLPackVersion),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", VERSIONED_DELETER),
        ("flags", ctypes.c_uint64),
        ("dl_tensor", DLTensor),
    ]


_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.restype = ctypes.py_object
_capsule_new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]

FLOAT32 = (2, 32, 1)


class CraftedTensor:
    """One managed tensor with the given fields. `shape`/`strides` are the values actually
    stored (they may be fewer than `ndim`); `strides=None` stores a NULL pointer."""

    def __init__(
        self,
        *,
        data,
        device=(KDL_CPU, 0),
        ndim=None,
        shape=(4,),
        strides=None,
        dtype=FLOAT32,
        byte_offset=0,
        versioned=True,
        version=(1, 3),
        flags=0,
        count_deletes=False,
    ):
        self.deletes = 0
        self.keep = []
        # Whether devbuf must refuse the tensor (a fuzzer's oracle; see fuzz_dlpack.py).
        self.must_refuse = False
        shape_values = (ctypes.c_int64 * max(len(shape), 1))(*shape)
        self.keep.append(shape_values)
        strides_ptr = None
        if strides is not None:
            stride_values = (ctypes.c_int64 * max(len(strides), 1))(*strides)
            self.keep.append(stride_values)
            strides_ptr = ctypes.cast(stride_values, ctypes.POINTER(ctypes.c_int64))
        tensor = DLTensor(
            data=data,
            device=DLDevice(*device),
            ndim=len(shape) if ndim is None else ndim,
            dtype=DLDataType(*dtype),
            shape=ctypes.cast(shape_values, ctypes.POINTER(ctypes.c_int64)),
            strides=strides_ptr,
            byte_offset=byte_offset,
        )
        deleter = VERSIONED_DELETER()
        if count_deletes:
            deleter = VERSIONED_DELETER(self._count_delete)
            self.keep.append(deleter)
        if versioned:
            self.managed = DLManagedTensorVersioned(
                version=DLPackVersion(*version), deleter=deleter, flags=flags, dl_tensor=tensor
            )
            self.name = b"dltensor_versioned"
        else:
            self.managed = DLManagedTensor(dl_tensor=tensor, deleter=deleter)
            self.name = b"dltensor"

    def _count_delete(self, _tensor):
        self.deletes += 1

    @property
    def address(self):
        return ctypes.addressof(self.managed)

    def capsule(self):
        """A capsule holding the tensor, with no destructor (the tensor's memory is ours)."""
        return _capsule_new(self.address, self.name, None)


class Producer:
    """An object whose `__dlpack__` returns the crafted tensor's capsule and whose
    `__dlpack_device__` says `announced` (the capsule's own device unless told otherwise)."""

    def __init__(self, tensor, announced=None):
        self.tensor = tensor
        self.announced = announced or (
            tensor.managed.dl_tensor.device.device_type,
            tensor.managed.dl_tensor.device.device_id,
        )
        self.calls = []

    def __dlpack__(self, **kwargs):
        self.calls.append(kwargs)
        return self.tensor.capsule()

    def __dlpack_device__(self):
        return self.announced


class DLPackExchangeAPIHeader(ctypes.Structure):
    _fields_ = [("version", DLPackVersion), ("prev_api", ctypes.c_void_p)]


FROM_PY_OBJECT = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p))
CURRENT_WORK_STREAM = ctypes.CFUNCTYPE(
    ctypes.c_int, ctypes.c_int32, ctypes.c_int32, ctypes.POINTER(ctypes.c_void_p)
)


class DLPackExchangeAPI(ctypes.Structure):
    _fields_ = [
        ("header", DLPackExchangeAPIHeader),
        ("managed_tensor_allocator", ctypes.c_void_p),
        ("managed_tensor_from_py_object_no_sync", FROM_PY_OBJECT),
        ("managed_tensor_to_py_object_no_sync", ctypes.c_void_p),
        ("dltensor_from_py_object_no_sync", ctypes.c_void_p),
        ("current_work_stream", CURRENT_WORK_STREAM),
    ]


def exchange_producer_type():
    """A new producer type publishing `__dlpack_c_exchange_api__` whose
    `managed_tensor_from_py_object_no_sync` hands out each instance's crafted `tensor` (the table
    receives a PyObject*, so live instances are found by address, without keeping them alive)."""
    live = weakref.WeakValueDictionary()

    def from_py_object(obj_address, out):
        out[0] = live[obj_address].tensor.address
        return 0

    def current_work_stream(_device_type, _device_id, out):
        out[0] = None
        return 0

    callbacks = (FROM_PY_OBJECT(from_py_object), CURRENT_WORK_STREAM(current_work_stream))
    api = DLPackExchangeAPI(
        header=DLPackExchangeAPIHeader(version=DLPackVersion(1, 3)),
        managed_tensor_from_py_object_no_sync=callbacks[0],
        current_work_stream=callbacks[1],
    )
    capsule = _capsule_new(ctypes.addressof(api), b"dlpack_exchange_api", None)

    class ExchangeProducer:
        __dlpack_c_exchange_api__ = capsule
        _keep = (api, callbacks)

        def __init__(self, tensor):
            self.tensor = tensor
            live[id(self)] = self

    return ExchangeProducer
