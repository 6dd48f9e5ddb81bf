"""The ordering machine (ordering_machine.py) covers devbuf's memory API, not a sample of it: every
public call the stubs (python/devbuf/_devbuf.pyi) and the devbuf.mr and devbuf.allocators modules
declare is either named by a rule of the machine (RULE_CALLS) or listed below as touching no
memory, with the reason. A new call that reads, writes, frees or exports memory fails here until a
rule makes it (or it is argued onto the list)."""

import ast
import inspect
import pathlib
import sys

import pytest

pytest.importorskip("hypothesis")
import ordering_machine  # noqa: E402

PACKAGE = pathlib.Path(__file__).resolve().parents[2] / "python" / "devbuf"
HERE = pathlib.Path(__file__).resolve().parent

# Calls that neither read, write, free nor export memory. Each line says why.
TOUCH_NO_MEMORY = {
    # What a device, stream, event, backend or handle is: names and numbers.
    **dict.fromkeys([
        "Device.__new__", "Device.backend", "Device.index", "Device.name", "Device.vendor", "Device.driver",
        "Device.test_double", "Device.selector", "Device.global_mem_size", "Device.kinds", "Device.usable",
        "Device.reason", "Device.queue", "Device.default_stream", "Device.mem_info", "Device.properties",
        "Stream.backend", "Stream.device", "Stream.stream", "Stream.sycl_queue", "Stream.handle", "Stream.priority",
        "Stream.is_nonblocking", "Stream.timing", "Stream.__cuda_stream__", "Event.stream",
        "BackendInfo.name", "BackendInfo.available", "BackendInfo.reason", "BackendInfo.devices", "BackendInfo.kinds",
        "BackendInfo.dlpack_device_types", "BackendInfo.protocols", "BackendInfo.makes_streams",
        "BackendInfo.may_be_default", "BackendInfo.default_rank", "IpcHandle.device", "IpcHandle.kind", "IpcHandle.nbytes", "IpcHandle.readonly",
        "backends", "devices", "default_device",
    ], "describes a device, stream, backend or handle; no memory"),
    # Streams and events are made without memory; the adopted ones are in every rule's draws.
    **dict.fromkeys(["Stream.__new__", "Device.create_stream"], "makes a stream; no memory"),
    **dict.fromkeys(["Event.__sub__", "Event.__rsub__", "get_elapsed_time"], "time between two events; no memory"),
    # What an array is: its shape and layout, read from devbuf's own record, never from the bytes.
    **dict.fromkeys([
        "Array.shape", "Array.dtype", "Array.typestr", "Array.strides", "Array.offset", "Array.ndim", "Array.size",
        "Array.itemsize", "Array.nbytes", "Array.readonly", "Array.ptr", "Array.kind", "Array.device", "Array.queue",
        "Array.c_contiguous", "Array.f_contiguous", "Array.closed", "Array.sycl_device", "Array.sycl_context",
        "Array.__len__", "Buffer.nbytes", "Buffer.ptr", "Buffer.owned",
    ], "an array's description; no memory (Buffer.ptr is not an export: the stub says so)"),
    "Buffer.__new__": "always a TypeError; makes nothing",
    "IpcHandle.from_bytes": "parses a handle's bytes; opens nothing (open_ipc does)",
    # Which device or resource later calls use: they steer allocations the rules make.
    "set_default_device": "chooses the default device; allocates nothing",
    # A resource's counters, settings and log: read from the resource's records.
    **dict.fromkeys([
        "MemoryResource.queue", "MemoryResource.device", "MemoryResource.upstream_mr", "MemoryResource.get_upstream",
        "PoolMemoryResource.pool_size", "PoolMemoryResource.initial_pool_size", "PoolMemoryResource.maximum_pool_size",
        "PoolMemoryResource.used_bytes", "PoolMemoryResource.free_bytes", "LimitingResourceAdaptor.get_allocation_limit",
        "LimitingResourceAdaptor.get_allocated_bytes", "StatisticsResourceAdaptor.allocation_counts",
        "StatisticsResourceAdaptor.push_counters", "StatisticsResourceAdaptor.pop_counters",
        "TrackingResourceAdaptor.get_allocated_bytes", "TrackingResourceAdaptor.get_outstanding_allocations_str",
        "FixedSizeMemoryResource.block_size", "FixedSizeMemoryResource.get_upstream_bytes",
        "BinningMemoryResource.bin_mrs", "LoggingResourceAdaptor.get_file_name", "FailureCallbackResourceAdaptor.callback",
    ], "a resource's counters or settings; no memory"),
    # devbuf.mr.statistics counts what the current resources allocate (RMM's rmm.statistics).
    **dict.fromkeys([
        "mr.statistics.MemoryRecord", "mr.statistics.ProfilerRecords", "mr.statistics.Statistics",
        "mr.statistics.default_profiler_records", "mr.statistics.enable_statistics", "mr.statistics.get_statistics",
        "mr.statistics.pop_statistics", "mr.statistics.profiler", "mr.statistics.push_statistics",
        "mr.statistics.statistics",
    ], "counts allocations through a StatisticsResourceAdaptor (a rule's resource); no memory of its own"),
    "DeviceFallbackWarning": "a warning class",
    # The conformance matrix allocates, checks and frees its own memory, handing none out.
    **dict.fromkeys(["conformance_matrix", "conformance_checks"], "devbuf's self-check on its own memory"),
    # The allocator plugins' bookkeeping.
    **dict.fromkeys([
        "allocators.numba.DevbufNumbaManager.initialize", "allocators.numba.DevbufNumbaManager.get_memory_info",
        "allocators.numba.DevbufNumbaManager.interface_version",
    ], "Numba's manager setup and free-memory query; no memory"),
    "allocators.torch.LIBRARY": "the path of the library PyTorch loads",
    # devbuf runs no kernels: arithmetic and conversion raise a TypeError naming the libraries
    # that compute (NotImplemented for a foreign operand, so that its own operator runs).
    **dict.fromkeys([
        f"Array.__{name}__" for name in ["add", "radd", "sub", "rsub", "mul", "rmul", "truediv", "rtruediv",
                                         "floordiv", "rfloordiv", "mod", "rmod", "pow", "rpow", "matmul", "rmatmul",
                                         "neg", "pos", "abs"]
    ], "always a TypeError (or NotImplemented): no kernel runs, no memory is read"),
    "Array.astype": "always a TypeError naming where to convert: devbuf converts no element types",
    "Array.__delitem__": "always a ValueError, as NumPy's: an array's size is fixed",
    "parse_bytes": "parses a size written as a string (\"4MiB\"); no memory",
    "mr.statistics.descriptive_name": "a function's or object's name for the profiler's records; no memory",
}

# How each call shows in the machine's source (the call itself, unless named here).
SPELLED = {
    "__new__": None, "__init__": None,  # the class's name
    "__enter__": "with ", "__exit__": "with ", "__getitem__": "[", "__array__": "np.asarray(",
    "__reduce_ex__": "pickle.dumps(", "__bytes__": "bytes(", "__setitem__": "] = ", "__iter__": "list(",
}


def is_public(name):
    return not name.startswith("_") or (name.startswith("__") and name.endswith("__"))


def class_members(node, prefix):
    for item in node.body:
        if isinstance(item, ast.FunctionDef) and is_public(item.name):
            yield f"{prefix}{node.name}.{item.name}"
        elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name) and is_public(item.target.id):
            yield f"{prefix}{node.name}.{item.target.id}"


def declared(path, prefix="", module_level_names=True):
    """Public functions, classes' public members and (optionally) public module-level names."""
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.FunctionDef) and not node.name.startswith("_"):
            yield prefix + node.name
        elif isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
            members = list(class_members(node, prefix))
            yield from members if members else [prefix + node.name]
        elif module_level_names and isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name) and not target.id.startswith("_") and target.id != "__all__":
                    yield prefix + target.id


def public_calls():
    """Every public call devbuf declares: the extension's stubs, devbuf.mr's own module
    (statistics; its other names are the extension's) and the allocator plugins."""
    calls = set(declared(PACKAGE / "_devbuf.pyi", module_level_names=False))
    mr_init = ast.parse((PACKAGE / "mr" / "__init__.py").read_text())
    from_extension = {alias.name for node in mr_init.body if isinstance(node, ast.ImportFrom)
                      and node.module == "_devbuf" for alias in node.names}
    stub_names = calls | {call.split(".")[0] for call in calls}
    assert from_extension <= stub_names, f"devbuf.mr names what the stubs lack: {from_extension - stub_names}"
    calls |= set(declared(PACKAGE / "mr" / "statistics.py", "mr.statistics.", module_level_names=False))
    calls.add("mr.statistics.default_profiler_records")
    for plugin in sorted((PACKAGE / "allocators").glob("*.py")):
        if plugin.name != "__init__.py":
            calls |= set(declared(plugin, f"allocators.{plugin.stem}."))
    return calls


def excluded(call):
    """Whether TOUCH_NO_MEMORY names the call, or the class it belongs to (every member of it)."""
    return any(call == name or call.startswith(name + ".") for name in TOUCH_NO_MEMORY)


def named_by_rules():
    return set().union(*ordering_machine.RULE_CALLS.values())


def test_every_call_that_touches_memory_is_made_by_a_rule_of_the_machine():
    calls = public_calls()
    missing = sorted(call for call in calls - named_by_rules() if not excluded(call))
    assert not missing, (
        f"{len(missing)} public calls touch memory and no rule of ordering_machine.py makes them: {missing}. "
        "Add a rule (and its RULE_CALLS row), or, for a call that touches no memory, a line in TOUCH_NO_MEMORY."
    )


def test_the_table_and_the_exclusions_name_only_calls_that_exist_and_never_both():
    calls = public_calls()
    assert not (named := named_by_rules() - calls), f"RULE_CALLS names calls devbuf does not declare: {sorted(named)}"
    stale = {name for name in TOUCH_NO_MEMORY if not any(call == name or call.startswith(name + ".") for call in calls)}
    assert not stale, f"TOUCH_NO_MEMORY names calls that are gone: {sorted(stale)}"
    assert not (both := {call for call in named_by_rules() if excluded(call)}), f"made by a rule and excluded: {sorted(both)}"


def test_every_row_is_a_rule_and_the_machine_makes_the_calls_it_names():
    machine = ordering_machine.Machine
    modules = {cls.__module__ for cls in machine.__mro__ if cls.__module__.startswith("ordering_")}
    members = [getattr(machine, name) for name in dir(machine)]
    helpers = "".join(inspect.getsource(member) for member in members
                      if inspect.isfunction(member) and not hasattr(member, "hypothesis_stateful_rule")
                      and member.__module__ in modules)
    helpers += "".join(inspect.getsource(member) for module in modules for member in vars(sys.modules[module]).values()
                       if inspect.isfunction(member) and member.__module__ == module
                       and member.__qualname__ == member.__name__)
    consumers = (HERE / "ordering_consumers.py").read_text() + (HERE / "ordering_ipc_reader.py").read_text()
    for rule_name, rule_calls in ordering_machine.RULE_CALLS.items():
        function = getattr(machine, rule_name, None)
        assert function is not None and hasattr(function, "hypothesis_stateful_rule"), f"{rule_name} is no rule"
        rule_source = inspect.getsource(function)
        # A rule makes a call itself, through the machine's helpers, or through the backend's
        # consumers where it hands them memory; make_resources builds the resources every rule draws.
        where = rule_source + helpers + (consumers if "backend." in rule_source else "")
        for call in rule_calls:
            parts = call.split(".")
            member = parts[-1]
            spelled = SPELLED.get(member, member) or parts[-2]
            assert spelled in where, f"RULE_CALLS says {rule_name} makes {call}; it never does"
