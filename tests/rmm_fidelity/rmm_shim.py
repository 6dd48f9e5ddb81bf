"""A module named `rmm` made of devbuf's names: RMM's Python API mapped onto devbuf by renaming
and reordering arguments only, so that RMM's own tests measure devbuf (tests/rmm_fidelity).

Nothing here implements memory management: every RMM name is one devbuf name (a function, class,
method or constant), called with RMM's arguments moved to devbuf's places. Where RMM's call has
an implicit "current CUDA device", the shim names devbuf's device `DEVICE` (cuda:0, or
$DEVBUF_RMM_DEVICE); where RMM's default stream argument is `DEFAULT_STREAM`, devbuf's is None.
An RMM name devbuf has no counterpart for is `Lacking`: collecting a test that mentions it still
works, and using it raises `DevbufLacks` naming it, which the runner counts by name.

`rmm._cuda.gpu` is RMM's wrapper of the CUDA runtime's device queries, not memory management: it
maps onto the same queries of the driver API (cuda.bindings.driver), which the CUDA test driver
answers (the runtime itself cannot start there).
"""

import enum
import os
import sys
import types

import devbuf
import devbuf.mr
import devbuf.mr.statistics

DEVICE = os.environ.get("DEVBUF_RMM_DEVICE", "cuda:0")
devbuf.set_default_device(DEVICE)


class DevbufLacks(NotImplementedError):
    """An RMM name with no devbuf counterpart was used."""


class _LackingMeta(type):
    def __call__(cls, *args, **kwargs):
        raise DevbufLacks(f"devbuf has no counterpart of {cls.rmm_name}")

    def __instancecheck__(cls, obj):
        raise DevbufLacks(f"devbuf has no counterpart of {cls.rmm_name}")

    def __getattr__(cls, attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        raise DevbufLacks(f"devbuf has no counterpart of {cls.rmm_name} (.{attr})")

    def __iter__(cls):
        raise DevbufLacks(f"devbuf has no counterpart of {cls.rmm_name}")


def Lacking(rmm_name):
    return _LackingMeta(rmm_name.rsplit(".", 1)[-1], (), {"rmm_name": rmm_name})


def _attr(obj, name, rmm_name):
    """devbuf's `obj.name`, or Lacking(rmm_name) where devbuf has no such name."""
    return getattr(obj, name, None) or Lacking(rmm_name)


def _module(name, **names):
    module = types.ModuleType(name)
    module.__dict__.update(names)
    module.__path__ = []  # a package, so that submodules import
    sys.modules[name] = module
    parent, _, leaf = name.rpartition(".")
    if parent:
        setattr(sys.modules[parent], leaf, module)
    return module


def _device(device_id=None):
    """RMM's CUDA device id as devbuf's device selector."""
    return DEVICE if device_id is None else f"{DEVICE.split(':')[0]}:{int(device_id)}"


mr = devbuf.mr
statistics = devbuf.mr.statistics

# --- rmm.pylibrmm.stream ------------------------------------------------------------------------


class CudaStreamFlags(enum.IntEnum):
    SYNC_DEFAULT = 0
    NON_BLOCKING = 1


class _StreamMeta(type):
    """`rmm.pylibrmm.stream.Stream`: devbuf.Stream, RMM's `flags` as devbuf's `non_blocking`."""

    def __call__(cls, obj=None, flags=None):
        kwargs = {} if flags is None else {"non_blocking": flags == CudaStreamFlags.NON_BLOCKING}
        if obj is None:
            return devbuf.Stream(DEVICE, **kwargs)
        return devbuf.Stream(obj, **kwargs)

    def __instancecheck__(cls, obj):
        return isinstance(obj, devbuf.Stream)


class Stream(metaclass=_StreamMeta):
    pass


def _legacy_default_stream():
    # RMM's DEFAULT_STREAM is handle 0, which its builds (without per-thread default streams)
    # run as the legacy default stream: devbuf's handle for that stream is 1 (CU_STREAM_LEGACY).
    return devbuf.Stream.from_handle(1, DEVICE)


# --- rmm.DeviceBuffer ---------------------------------------------------------------------------


def _stream(stream):
    """RMM's stream argument: its DEFAULT_STREAM default is devbuf's None."""
    return stream


_DEFAULT = object()


class _DeviceBufferMeta(type):
    """`rmm.DeviceBuffer`: devbuf.Buffer of "device" memory (RMM's DeviceBuffer's kind) from the
    current resource or `mr`."""

    def __call__(cls, *, ptr=None, size=0, stream=_DEFAULT, mr=None):
        kwargs = {} if stream is _DEFAULT else {"stream": stream}
        if ptr is not None:
            return _attr(devbuf.Buffer, "from_device_pointer", "rmm.DeviceBuffer(ptr=)")(
                ptr, size, kind="device", device=DEVICE, mr=mr, **kwargs)
        return devbuf.alloc(size, "device", device=DEVICE, mr=mr, **kwargs)

    def __instancecheck__(cls, obj):
        return isinstance(obj, devbuf.Buffer)

    def to_device(cls, data, stream=_DEFAULT):
        kwargs = {} if stream is _DEFAULT else {"stream": stream}
        return _attr(devbuf.Buffer, "from_host", "rmm.DeviceBuffer.to_device")(
            data, kind="device", device=DEVICE, **kwargs)


class DeviceBuffer(metaclass=_DeviceBufferMeta):
    pass


def _stream_kwargs(stream):
    return {} if stream is _DEFAULT else {"stream": stream}


def copy_ptr_to_host(db_ptr, hb, stream=_DEFAULT):
    return _attr(devbuf, "copy_ptr_to_host", "rmm.pylibrmm.device_buffer.copy_ptr_to_host")(
        db_ptr, hb, **_stream_kwargs(stream))


def copy_host_to_ptr(hb, db_ptr, stream=_DEFAULT):
    return _attr(devbuf, "copy_host_to_ptr", "rmm.pylibrmm.device_buffer.copy_host_to_ptr")(
        hb, db_ptr, **_stream_kwargs(stream))


def copy_device_to_ptr(d_src, d_dst, count, stream=_DEFAULT):
    return _attr(devbuf, "copy_device_to_ptr", "rmm.pylibrmm.device_buffer.copy_device_to_ptr")(
        d_src, d_dst, count, **_stream_kwargs(stream))


def to_device(data, stream=_DEFAULT):
    return DeviceBuffer.to_device(data, **_stream_kwargs(stream))


# --- rmm.mr -------------------------------------------------------------------------------------


def _resource(devbuf_name, rmm_name, place_device=True):
    """An RMM resource class whose constructor has an implicit current device: devbuf's class of
    `devbuf_name`, given `device=DEVICE`."""
    names = (devbuf_name,) if isinstance(devbuf_name, str) else devbuf_name
    cls = next((getattr(devbuf.mr, name) for name in names if hasattr(devbuf.mr, name)), None)
    if cls is None:
        return Lacking(rmm_name)

    class _Meta(type):
        def __call__(self, *args, **kwargs):
            if place_device:
                kwargs.setdefault("device", DEVICE)
            return cls(*args, **kwargs)

        def __instancecheck__(self, obj):
            return isinstance(obj, cls)

    return _Meta(rmm_name.rsplit(".", 1)[-1], (), {})


def get_current_device_resource():
    return devbuf.mr.get_current_device_resource(DEVICE, "device")


def get_per_device_resource(device):
    return devbuf.mr.get_current_device_resource(_device(device), "device")


def set_current_device_resource(mr):
    devbuf.mr.set_current_device_resource(mr)


def set_per_device_resource(device, mr):
    devbuf.mr.set_current_device_resource(mr)


def _mr_function(name):
    return _attr(devbuf.mr, name, f"rmm.mr.{name}")


_mr_names = dict(
    DeviceMemoryResource=devbuf.mr.MemoryResource,
    UpstreamResourceAdaptor=_attr(devbuf.mr, "ResourceAdaptor", "rmm.mr.UpstreamResourceAdaptor"),
    CudaMemoryResource=_resource(("DeviceMemoryResource", "QueueMemoryResource"), "rmm.mr.CudaMemoryResource"),
    ManagedMemoryResource=_resource("ManagedMemoryResource", "rmm.mr.ManagedMemoryResource"),
    PinnedHostMemoryResource=_resource("PinnedHostMemoryResource", "rmm.mr.PinnedHostMemoryResource"),
    SystemMemoryResource=_resource("SystemMemoryResource", "rmm.mr.SystemMemoryResource"),
    SamHeadroomMemoryResource=_resource("SamHeadroomMemoryResource", "rmm.mr.SamHeadroomMemoryResource"),
    CudaAsyncMemoryResource=_resource("AsyncMemoryResource", "rmm.mr.CudaAsyncMemoryResource"),
    CudaAsyncViewMemoryResource=_resource("AsyncViewMemoryResource", "rmm.mr.CudaAsyncViewMemoryResource"),
    CallbackMemoryResource=_resource("CallbackMemoryResource", "rmm.mr.CallbackMemoryResource"),
    ArenaMemoryResource=_attr(devbuf.mr, "ArenaMemoryResource", "rmm.mr.ArenaMemoryResource"),
    PoolMemoryResource=devbuf.mr.PoolMemoryResource,
    BinningMemoryResource=devbuf.mr.BinningMemoryResource,
    FixedSizeMemoryResource=devbuf.mr.FixedSizeMemoryResource,
    LimitingResourceAdaptor=devbuf.mr.LimitingResourceAdaptor,
    LoggingResourceAdaptor=devbuf.mr.LoggingResourceAdaptor,
    StatisticsResourceAdaptor=devbuf.mr.StatisticsResourceAdaptor,
    TrackingResourceAdaptor=devbuf.mr.TrackingResourceAdaptor,
    FailureCallbackResourceAdaptor=devbuf.mr.FailureCallbackResourceAdaptor,
    PrefetchResourceAdaptor=devbuf.mr.PrefetchResourceAdaptor,
    available_device_memory=_mr_function("available_device_memory"),
    disable_logging=_mr_function("disable_logging"),
    enable_logging=_mr_function("enable_logging"),
    get_log_filenames=_mr_function("get_log_filenames"),
    get_current_device_resource=get_current_device_resource,
    get_per_device_resource=get_per_device_resource,
    is_initialized=_mr_function("is_initialized"),
    set_current_device_resource=set_current_device_resource,
    set_per_device_resource=set_per_device_resource,
)

# --- the module tree ----------------------------------------------------------------------------

_logging_names = {
    name: _attr(devbuf.mr, name, f"rmm.{name}")
    for name in ["flush_logger", "get_flush_level", "get_logging_level", "level_enum", "set_flush_level",
                 "set_logging_level", "should_log"]
}

rmm = _module(
    "rmm",
    DeviceBuffer=DeviceBuffer,
    RMMError=Lacking("rmm.RMMError"),
    __version__=devbuf.__version__,
    __git_commit__=_attr(devbuf, "__git_commit__", "rmm.__git_commit__"),
    is_initialized=_mr_function("is_initialized"),
    reinitialize=_mr_function("reinitialize"),
    register_reinitialize_hook=_mr_function("register_reinitialize_hook"),
    unregister_reinitialize_hook=_mr_function("unregister_reinitialize_hook"),
    disable_logging=_mr_function("disable_logging"),
    enable_logging=_mr_function("enable_logging"),
    get_log_filenames=_mr_function("get_log_filenames"),
    **_logging_names,
)
_module("rmm.mr", **_mr_names)
_async = _resource("AsyncMemoryResource", "rmm.mr.CudaAsyncMemoryResource")
_module("rmm.mr.experimental", CudaAsyncManagedMemoryResource=(
    lambda **kwargs: _async(kind="shared", **kwargs)) if hasattr(devbuf.mr, "AsyncMemoryResource")
    else Lacking("rmm.mr.experimental.CudaAsyncManagedMemoryResource"))
_module("rmm.pylibrmm")
_module("rmm.pylibrmm.memory_resource", **_mr_names)
_module("rmm.pylibrmm.memory_resource._memory_resource", **_mr_names,
        _flush_logs=_attr(devbuf.mr, "flush_logs", "rmm.pylibrmm.memory_resource._memory_resource._flush_logs"))
_module("rmm.pylibrmm.memory_resource.experimental",
        CudaAsyncManagedMemoryResource=sys.modules["rmm.mr.experimental"].CudaAsyncManagedMemoryResource)
_module("rmm.pylibrmm.stream", Stream=Stream, CudaStreamFlags=CudaStreamFlags)
def CudaStreamPool(pool_size=16, flags=CudaStreamFlags.SYNC_DEFAULT):
    """`rmm.pylibrmm.cuda_stream_pool.CudaStreamPool`: devbuf.StreamPool on the current device,
    RMM's `flags` as devbuf's `non_blocking`."""
    return _attr(devbuf, "StreamPool", "rmm.pylibrmm.cuda_stream_pool.CudaStreamPool")(
        DEVICE, pool_size, non_blocking=flags == CudaStreamFlags.NON_BLOCKING)


_module("rmm.pylibrmm.cuda_stream_pool", CudaStreamPool=CudaStreamPool)
_module("rmm.pylibrmm.device_buffer", DeviceBuffer=DeviceBuffer, copy_ptr_to_host=copy_ptr_to_host,
        copy_host_to_ptr=copy_host_to_ptr, copy_device_to_ptr=copy_device_to_ptr, to_device=to_device)
_module("rmm.pylibrmm.logger", **_logging_names)
_module("rmm.statistics", **{
    name: _attr(devbuf.mr.statistics, devbuf_name, f"rmm.statistics.{name}")
    for name, devbuf_name in [
        ("ProfilerRecords", "ProfilerRecords"), ("Statistics", "Statistics"),
        ("_get_descriptive_name_of_object", "descriptive_name"), ("default_profiler_records", "default_profiler_records"),
        ("enable_statistics", "enable_statistics"), ("get_statistics", "get_statistics"),
        ("pop_statistics", "pop_statistics"), ("profiler", "profiler"), ("push_statistics", "push_statistics"),
        ("statistics", "statistics"),
    ]
})
rmm.statistics.statistics = sys.modules["rmm.statistics"].statistics


def _stream_module_getattr(name):
    # Made on first use: adopting a handle is a call into devbuf, made once the device is set.
    if name in ("DEFAULT_STREAM", "LEGACY_DEFAULT_STREAM"):
        return _legacy_default_stream()
    if name == "PER_THREAD_DEFAULT_STREAM":
        return devbuf.Stream.from_handle(2, DEVICE)
    raise AttributeError(name)


sys.modules["rmm.pylibrmm.stream"].__getattr__ = _stream_module_getattr


# --- rmm._cuda.gpu: the CUDA runtime's device queries, asked of the driver API ------------------


def _gpu_module():
    from cuda.bindings import driver

    def check(result):
        err, *values = result
        if err != driver.CUresult.CUDA_SUCCESS:
            raise RuntimeError(f"{err}")
        return values[0] if len(values) == 1 else values

    def getDevice():
        return devbuf.Device(DEVICE).index

    def getDeviceAttribute(attr, device):
        check(driver.cuInit(0))
        return check(driver.cuDeviceGetAttribute(driver.CUdevice_attribute(int(attr)), device))

    def driverGetVersion():
        return check(driver.cuDriverGetVersion())

    def getDeviceCount():
        check(driver.cuInit(0))
        return check(driver.cuDeviceGetCount())

    return dict(getDevice=getDevice, getDeviceAttribute=getDeviceAttribute, driverGetVersion=driverGetVersion,
                # The runtime cannot start on the test driver: the driver's version stands for it.
                runtimeGetVersion=driverGetVersion, getDeviceCount=getDeviceCount)


_module("rmm._cuda")
_module("rmm._cuda.gpu", **_gpu_module())
_module("rmm.allocators")


def _numba_module():
    from devbuf.allocators.numba import DevbufNumbaManager

    return dict(RMMNumbaManager=DevbufNumbaManager)


_module("rmm.allocators.numba", **_numba_module())


def _plugin(module, rmm_name, devbuf_module, devbuf_name):
    """A CuPy or PyTorch allocator plugin, imported on first use (devbuf's import the library)."""

    def getattr_(name):
        if name != rmm_name:
            raise AttributeError(name)
        import importlib

        return getattr(importlib.import_module(devbuf_module), devbuf_name)

    _module(module).__getattr__ = getattr_


_plugin("rmm.allocators.cupy", "rmm_cupy_allocator", "devbuf.allocators.cupy", "devbuf_cupy_allocator")
_plugin("rmm.allocators.torch", "rmm_torch_allocator", "devbuf.allocators.torch", "devbuf_torch_allocator")
