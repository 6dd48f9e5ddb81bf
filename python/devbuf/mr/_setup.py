"""RMM's process-wide switches on devbuf's current resources: `reinitialize` and its hooks,
`is_initialized`, the logging switches, `available_device_memory`."""

import os
from typing import Any, Callable

from .. import _devbuf
from .._devbuf import (
    DeviceMemoryResource,
    LoggingResourceAdaptor,
    ManagedMemoryResource,
    MemoryResource,
    PoolMemoryResource,
    get_current_device_resource,
    set_current_device_resource,
)

_KINDS = ("device", "shared", "host")
_hooks: list[tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any]]] = []
# The devices reinitialize or enable_logging set up (selectors), as RMM's per-device resources.
_devices: list[str] = []


def _selectors(devices: Any) -> list[str]:
    """RMM's `devices` (an int or a list of ints: device indices of the default device's backend)
    or devbuf's (selectors, Devices), as selectors; None: the default device."""
    if devices is None:
        return [_devbuf.default_device().selector]
    if isinstance(devices, (int, str, _devbuf.Device)):
        devices = [devices]
    backend = _devbuf.default_device().backend
    return [_devbuf.Device(f"{backend}:{d}" if isinstance(d, int) else d).selector for d in devices]


def _log_name(log_file_name: str | None, device: str) -> str:
    """RMM's per-device log name: `.devN` (N the device's index) before the extension."""
    name = log_file_name or os.environ.get("DEVBUF_LOG_FILE")
    if not name:
        raise ValueError("log_file_name: none given and $DEVBUF_LOG_FILE is not set")
    root, ext = os.path.splitext(name)
    return f"{root}.dev{_devbuf.Device(device).index}{ext}"


def reinitialize(pool_allocator: bool = False, managed_memory: bool = False,
                 initial_pool_size: int | str | None = None, maximum_pool_size: int | str | None = None,
                 devices: Any = 0, logging: bool = False, log_file_name: str | None = None) -> None:
    """RMM's `rmm.reinitialize`: runs the hooks (`register_reinitialize_hook`, last registered
    first), then makes each of `devices` (device indices on the default device's backend, as
    RMM's, or selectors) allocate device memory from a fresh resource: the device's device memory
    (`DeviceMemoryResource`), or its shared memory with `managed_memory=True`
    (`ManagedMemoryResource`), under a `PoolMemoryResource(initial_pool_size, maximum_pool_size)`
    with `pool_allocator=True` (sizes as ints or strings, "4MiB"), logged to `log_file_name` (its
    name with `.devN` before the extension) with `logging=True`. devbuf's "shared" and "host"
    allocations keep their own current resources. Memory from earlier resources stays valid."""
    for func, args, kwargs in reversed(_hooks):
        func(*args, **kwargs)
    selectors = _selectors(devices)
    made = []
    for device in selectors:
        mr: MemoryResource = (ManagedMemoryResource if managed_memory else DeviceMemoryResource)(device)
        if pool_allocator:
            mr = PoolMemoryResource(mr, initial_pool_size, maximum_pool_size)
        if logging:
            mr = LoggingResourceAdaptor(mr, _log_name(log_file_name, device))
        made.append(mr)
    # Set only once every device's resource was made: a bad argument changes nothing.
    for mr in made:
        set_current_device_resource(mr, "device")
    _devices[:] = selectors


def is_initialized(device: Any = None) -> bool:
    """RMM's `rmm.is_initialized`: whether every device `reinitialize` set up (default: the
    default device) opens and has a current resource for device memory."""
    devices = _devices or _selectors(device)
    try:
        return all(_devbuf.Device(d).usable and get_current_device_resource(d, "device") is not None
                   for d in devices)
    except (ValueError, RuntimeError):
        return False


def register_reinitialize_hook(func: Callable[..., Any], *args: Any, **kwargs: Any) -> Callable[..., Any]:
    """Calls `func(*args, **kwargs)` at the start of each `reinitialize`, hooks in the reverse
    order of registration (RMM's). Returns `func`."""
    _hooks.append((func, args, kwargs))
    return func


def unregister_reinitialize_hook(func: Callable[..., Any]) -> None:
    """Removes every registration of `func`."""
    _hooks[:] = [hook for hook in _hooks if hook[0] != func]


def _current_by_resource(device: str) -> list[tuple[MemoryResource, list[str]]]:
    """The device's current resources, each with the kinds it is current for."""
    groups: list[tuple[MemoryResource, list[str]]] = []
    for kind in _KINDS:
        if kind not in _devbuf.Device(device).kinds:
            continue
        mr = get_current_device_resource(device, kind)
        for seen, kinds in groups:
            if seen is mr:
                kinds.append(kind)
                break
        else:
            groups.append((mr, [kind]))
    return groups


def enable_logging(log_file_name: str | None = None, devices: Any = None) -> None:
    """RMM's `rmm.enable_logging`: wraps each current resource of the devices `reinitialize` set
    up (or `devices`; default: the default device) in a `LoggingResourceAdaptor` writing to
    `log_file_name` (default: $DEVBUF_LOG_FILE) with `.devN` before its extension."""
    selectors = _selectors(devices) if devices is not None else (_devices or _selectors(None))
    for device in selectors:
        name = _log_name(log_file_name, device)
        for mr, kinds in _current_by_resource(device):
            if not isinstance(mr, LoggingResourceAdaptor):
                logged = LoggingResourceAdaptor(mr, name)
                for kind in kinds:
                    set_current_device_resource(logged, kind)
    for device in selectors:
        if device not in _devices:
            _devices.append(device)


def disable_logging() -> None:
    """RMM's `rmm.disable_logging`: the current resources that log give way to what they wrap."""
    for device in _devices or _selectors(None):
        for mr, kinds in _current_by_resource(device):
            if isinstance(mr, LoggingResourceAdaptor):
                for kind in kinds:
                    set_current_device_resource(mr.upstream_mr, kind)


def get_log_filenames() -> dict[int, str | None]:
    """RMM's `rmm.get_log_filenames`: each set-up device's index → the file its current device
    memory resource logs to (None: not logging)."""
    names = {}
    for device in _devices or _selectors(None):
        mr = get_current_device_resource(device, "device")
        names[_devbuf.Device(device).index] = mr.get_file_name() if isinstance(mr, LoggingResourceAdaptor) else None
    return names


def flush_logs() -> None:
    """Flushes every current resource that logs, of the set-up devices (RMM's `_flush_logs`)."""
    for device in _devices or _selectors(None):
        for mr, _ in _current_by_resource(device):
            if isinstance(mr, LoggingResourceAdaptor):
                mr.flush()


def available_device_memory(device: Any = None) -> tuple[int, int]:
    """RMM's `available_device_memory()`: (free, total) bytes of `device` (default: the default
    device), as `Device.mem_info`."""
    return _devbuf.Device(device).mem_info if device is not None else _devbuf.default_device().mem_info
