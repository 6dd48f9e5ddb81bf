"""The backend contract from Python, on every backend compiled in: one suite over
`devbuf.devices()` × kinds × protocols, derived from what each backend's descriptor states
(`devbuf.backends()`), not from a list of backend names. A new backend is tested here by
existing; a descriptor that says something its backend does not do fails here."""

import pytest

import devbuf
from conftest import require_backend, usable_kinds

BACKENDS = devbuf.backends()
# Every array-interface protocol any backend speaks: each device either speaks one or lacks it.
PROTOCOLS = sorted({protocol for backend in BACKENDS for protocol in backend.protocols})
PATTERN = bytes((i * 11 + 5) % 256 for i in range(256))


def descriptor(name):
    return next(backend for backend in BACKENDS if backend.name == name)


def device_kinds():
    """(selector, kind) for every usable device and every kind it allocates."""
    return [
        pytest.param(device.selector, kind, id=f"{device.selector}-{kind}")
        for device in devbuf.devices()
        if device.usable
        for kind in usable_kinds(device)
    ]


class Described:
    """An object that hands its memory over through one protocol only, as another library's
    array does; it keeps the exporter alive, as CAI and SUAI consumers do."""

    def __init__(self, exporter, protocol):
        self.exporter = exporter
        setattr(self, protocol, getattr(exporter, protocol))


@pytest.mark.parametrize("name", [backend.name for backend in BACKENDS])
def test_each_backend_compiled_in_is_usable_or_says_why(name):
    info = require_backend(name)
    assert any(device.usable for device in info.devices), info.devices


def test_backends_are_listed_in_the_default_order_with_the_host_last():
    ranks = [(backend.default_rank, backend.name) for backend in BACKENDS]
    assert ranks == sorted(ranks)
    assert BACKENDS[-1].name == "host"


def test_a_devices_kinds_are_among_its_backends():
    for device in devbuf.devices():
        assert set(device.kinds) <= set(descriptor(device.backend).kinds), device


@pytest.mark.parametrize("selector,kind", device_kinds())
def test_memory_exports_as_a_dlpack_device_type_its_descriptor_lists(selector, kind):
    buffer = devbuf.alloc(len(PATTERN), kind, device=selector)
    device_type, _ = buffer.__dlpack_device__()
    assert device_type in descriptor(buffer.device.backend).dlpack_device_types


@pytest.mark.parametrize("selector,kind", device_kinds())
def test_dlpack_takes_every_kind_back_zero_copy(selector, kind):
    buffer = devbuf.alloc(len(PATTERN), kind, device=selector)
    buffer.copy_from(PATTERN)
    back = devbuf.from_dlpack(buffer.view("uint8"))
    assert (back.ptr, back.device, back.kind) == (buffer.ptr, buffer.device, kind)
    assert back.to_bytes() == PATTERN


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("selector,kind", device_kinds())
def test_a_protocol_describes_exactly_the_memory_of_the_backends_that_speak_it(selector, kind, protocol):
    buffer = devbuf.alloc(len(PATTERN), kind, device=selector)
    array = buffer.view("uint8")
    if protocol not in descriptor(buffer.device.backend).protocols:
        # Absent, not an error: `hasattr` probes are how consumers ask.
        assert not hasattr(array, protocol)
        return
    buffer.copy_from(PATTERN)
    described = getattr(array, protocol)
    assert described["data"][0] == buffer.ptr and described["shape"] == (len(PATTERN),)
    back = devbuf.asarray(Described(array, protocol))
    assert (back.ptr, back.device, back.kind) == (buffer.ptr, buffer.device, kind)
    assert back.to_bytes() == PATTERN
