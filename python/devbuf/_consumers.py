"""The consumer columns of ``python -m devbuf matrix``: a real library takes devbuf memory
zero-copy, both sides see each other's writes, and devbuf takes the library's memory back.

Each check returns ``(status, reason)``: "pass", "FAIL" or "skip", the reason saying why."""

import importlib

import devbuf

PATTERN = bytes((i * 7 + 3) % 256 for i in range(256))
KDLCPU = 1  # DLPack's device type of host memory
SUAI = "__sycl_usm_array_interface__"
CAI = "__cuda_array_interface__"


def _library(name):
    try:
        return importlib.import_module(name), ""
    except Exception as err:  # an import can fail in many ways; the matrix only reports it
        return None, f"{name} is not importable here ({type(err).__name__}: {err})"


def _device(label):
    for backend in devbuf.backends():
        for device in backend.devices:
            if device.selector == label:
                return device
    return None


def _speaks(label, attribute):
    """Whether the backend of the matrix row `label` (a device's selector, or an unavailable
    backend's name) describes its memory with the array interface `attribute`: the memory dpctl
    and dpnp (SUAI), Numba, CuPy and PyTorch (CAI) take, whichever backend's it is."""
    device = _device(label)
    backend_name = device.backend if device is not None else label
    return any(b.name == backend_name and attribute in b.protocols for b in devbuf.backends())


def _host_readable(label, kind):
    """Whether NumPy reads `kind` memory of device `label` in place: host and shared memory, and
    memory DLPack calls the CPU's (every kind of a backend whose device is the host)."""
    return kind in ("host", "shared") or devbuf.alloc(1, kind, device=label).__dlpack_device__()[0] == KDLCPU


def _unusable(label):
    """Why the matrix row `label` has no usable device."""
    for backend in devbuf.backends():
        if backend.name == label and not backend.available:
            return f"{label} backend unavailable"
    device = _device(label)
    return f"{label} is unusable: {device.reason}" if device is not None else f"no device {label}"


def _expect(condition, message):
    if not condition:
        raise AssertionError(message)


def _library_and_device(name, label):
    """The library a check needs and the usable device `label` names, or why the check skips."""
    library, why = _library(name)
    if library is None:
        return None, None, why
    device = _device(label)
    if device is None or not device.usable:
        return None, None, _unusable(label)
    return library, device, ""


def numpy_check(label):
    np, device, why = _library_and_device("numpy", label)
    if why:
        return "skip", why
    kinds = [kind for kind in device.kinds if _host_readable(label, kind)]
    if not kinds:
        return "skip", f"{label} has no host-accessible memory"
    for kind in kinds:
        buffer = devbuf.alloc(len(PATTERN), kind, device=label)
        buffer.copy_from(PATTERN)
        # Host-accessible device memory reaches NumPy as CPU memory when NumPy asks for the CPU.
        view = np.from_dlpack(buffer, device="cpu")
        _expect(view.ctypes.data == buffer.ptr, f"np.from_dlpack copied {kind} memory")
        _expect(np.asarray(buffer).ctypes.data == buffer.ptr, f"np.asarray copied {kind} memory")
        _expect(view.tobytes() == PATTERN, f"NumPy read different bytes from {kind} memory")
        view[:] = 0
        _expect(buffer.to_bytes() == bytes(len(PATTERN)), f"devbuf did not see NumPy's write to {kind}")
    theirs = np.arange(64, dtype=np.float32)
    ours = devbuf.asarray(theirs)
    _expect(ours.ptr == theirs.ctypes.data and ours.to_bytes() == theirs.tobytes(), "import of NumPy memory")
    return "pass", ""


def dpctl_check(label):
    if not _speaks(label, SUAI):
        return "skip", "not SYCL memory"
    dpctl_memory, device, why = _library_and_device("dpctl.memory", label)
    if why:
        return "skip", why
    for kind in device.kinds:
        buffer = devbuf.alloc(len(PATTERN), kind, device=label)
        buffer.copy_from(PATTERN)
        theirs = dpctl_memory.as_usm_memory(buffer)
        _expect(theirs.get_usm_type() == kind, f"dpctl sees {theirs.get_usm_type()} memory, not {kind}")
        _expect(theirs._pointer == buffer.ptr, f"dpctl copied {kind} memory")
        _expect(bytes(theirs.copy_to_host()) == PATTERN, f"dpctl read different bytes from {kind}")
        theirs.copy_from_host(bytes(len(PATTERN)))
        _expect(buffer.to_bytes() == bytes(len(PATTERN)), f"devbuf did not see dpctl's write to {kind}")
    mine = dpctl_memory.MemoryUSMDevice(len(PATTERN))
    mine.copy_from_host(PATTERN)
    imported = devbuf.asarray(mine)
    _expect(imported.ptr == mine._pointer and imported.kind == "device", "import of dpctl memory")
    _expect(imported.to_bytes() == PATTERN, "devbuf read different bytes from dpctl memory")
    return "pass", ""


def dpnp_check(label):
    if not _speaks(label, SUAI):
        return "skip", "not SYCL memory"
    dpnp, device, why = _library_and_device("dpnp", label)
    if why:
        return "skip", why
    for kind in device.kinds:
        buffer = devbuf.alloc(len(PATTERN), kind, device=label)
        buffer.copy_from(PATTERN)
        theirs = dpnp.asarray(buffer, copy=False)
        _expect(theirs.usm_type == kind, f"dpnp sees {theirs.usm_type} memory, not {kind}")
        _expect(theirs.data.ptr == buffer.ptr, f"dpnp copied {kind} memory")
        _expect(theirs.sycl_queue == buffer.sycl_queue, f"dpnp took another queue for {kind} memory")
        _expect(bytes(dpnp.asnumpy(theirs)) == PATTERN, f"dpnp read different bytes from {kind}")
        theirs += 1
        expected = bytes((b + 1) % 256 for b in PATTERN)
        _expect(buffer.to_bytes() == expected, f"devbuf did not see dpnp's write to {kind}")
    mine = dpnp.arange(32, dtype=dpnp.float32, device=device.selector.removeprefix("sycl:"))
    imported = devbuf.asarray(mine)
    _expect(imported.ptr == mine.data.ptr, "import of dpnp memory copied it")
    _expect(imported.to_bytes() == dpnp.asnumpy(mine).tobytes(), "devbuf read different bytes from dpnp")
    return "pass", ""


def _cuda_setup(label, library):
    """For a CUDA row: the library and a device buffer holding PATTERN, or a skip reason."""
    if not _speaks(label, CAI):
        return None, None, "not CUDA memory"
    device = _device(label)
    if device is None or not device.usable:
        return None, None, _unusable(label)
    module, why = _library(library)
    if module is None:
        return None, None, why
    buffer = devbuf.alloc(len(PATTERN), "device", device=label)
    buffer.copy_from(PATTERN)
    return module, buffer, ""


def numba_check(label):
    numba_cuda, buffer, why = _cuda_setup(label, "numba.cuda")
    if numba_cuda is None:
        return "skip", why
    np = importlib.import_module("numpy")
    # Numba works in its current device's context; another device's pool memory is out of reach
    # there without pool access (CUDA's stream-ordered allocator), so a Numba user selects the
    # memory's device first.
    with numba_cuda.gpus[int(label.partition(":")[2] or 0)]:
        theirs = numba_cuda.as_cuda_array(buffer)
        _expect(theirs.__cuda_array_interface__["data"][0] == buffer.ptr, "Numba copied device memory")
        _expect(theirs.copy_to_host().tobytes() == PATTERN, "Numba read different bytes")
        mine = numba_cuda.to_device(np.arange(32, dtype=np.int64))
        imported = devbuf.asarray(mine)
        _expect(imported.to_bytes() == np.arange(32, dtype=np.int64).tobytes(), "import of Numba memory")
    return "pass", ""


def cupy_check(label):
    cupy, buffer, why = _cuda_setup(label, "cupy")
    if cupy is None:
        return "skip", why
    theirs = cupy.asarray(buffer)
    _expect(theirs.data.ptr == buffer.ptr, "CuPy copied device memory")
    _expect(cupy.asnumpy(theirs).tobytes() == PATTERN, "CuPy read different bytes")
    mine = cupy.arange(32, dtype=cupy.float64)
    imported = devbuf.asarray(mine)
    _expect(imported.ptr == mine.data.ptr, "import of CuPy memory copied it")
    _expect(imported.to_bytes() == cupy.asnumpy(mine).tobytes(), "import of CuPy memory")
    return "pass", ""


def torch_check(label):
    torch, buffer, why = _cuda_setup(label, "torch")
    if torch is None:
        return "skip", why
    theirs = torch.from_dlpack(buffer)
    _expect(theirs.data_ptr() == buffer.ptr and theirs.is_cuda, "torch copied device memory")
    _expect(bytes(theirs.cpu().numpy().tobytes()) == PATTERN, "torch read different bytes")
    mine = torch.arange(32, dtype=torch.float32, device=buffer.device.selector)
    imported = devbuf.asarray(mine)
    _expect(imported.ptr == mine.data_ptr(), "import of torch memory copied it")
    _expect(imported.to_bytes() == mine.cpu().numpy().tobytes(), "import of torch memory")
    return "pass", ""


CONSUMERS = [
    ("numpy", numpy_check),
    ("dpctl", dpctl_check),
    ("dpnp", dpnp_check),
    ("numba", numba_check),
    ("cupy", cupy_check),
    ("torch", torch_check),
]


def run(check, label):
    """Runs one consumer check; an exception is a failure with its message, never a crash."""
    try:
        return check(label)
    except Exception as err:
        return "FAIL", f"{check.__name__} on {label}: {type(err).__name__}: {err}"
