"""Day-one mistakes get devbuf's own messages, naming the argument and the way out, not the
binding layer's (pyo3's "'int' object is not an instance of 'str'"): `Device(0)` as cuda.core and
CuPy spell it, `alloc(-1)`, `Buffer(1024)`; writes to a read-only import say whose flag it was; a
NumPy view of devbuf memory imports back as that devbuf memory."""

import numpy as np
import pytest

import devbuf
from conftest import backend_names, require_backend


def test_device_takes_selectors_and_devices_and_says_what_an_int_means():
    with pytest.raises(TypeError, match=r'^selector: Device takes a selector string, not the int 0: Device\("cuda:0"\)'):
        devbuf.Device(0)
    with pytest.raises(TypeError, match=r"^selector: expected a selector string .* got float"):
        devbuf.Device(1.0)
    host = devbuf.Device("host")
    assert devbuf.Device(host) is host


@pytest.mark.parametrize(
    "nbytes, error, message",
    [
        (-1, ValueError, r"^nbytes: -1 is negative; alloc takes a number of bytes, 0 or more$"),
        (1 << 80, ValueError, r"^nbytes: \d+ bytes is more than any device's address space$"),
        (1.5, TypeError, r"^nbytes: expected an int number of bytes, got float$"),
        ("64", TypeError, r"^nbytes: expected an int number of bytes, got str$"),
    ],
)
def test_alloc_names_nbytes(nbytes, error, message):
    with pytest.raises(error, match=message):
        devbuf.alloc(nbytes, device="host")
    assert devbuf.alloc(np.int64(8), device="host").nbytes == 8


def test_buffer_is_made_by_alloc_not_by_the_class():
    with pytest.raises(TypeError, match=r"^Buffer: buffers are not made by the class; allocate with devbuf.alloc"):
        devbuf.Buffer(1024)


def test_read_only_imports_say_whose_flag_it_was():
    frozen = np.arange(8, dtype=np.uint8)
    frozen.flags.writeable = False
    imported = devbuf.asarray(frozen)
    for write, what in [
        (lambda: imported.copy_from(np.zeros(8, np.uint8)), "copy_from"),
        (lambda: imported.buffer.fill(0), "fill"),
        (lambda: imported[2:].copy_from(np.zeros(6, np.uint8)), "copy_from"),
    ]:
        with pytest.raises(ValueError, match=rf"^{what}: .* read-only: numpy.ndarray marked it read-only through DLPack"):
            write()


def test_a_dpnp_read_only_array_names_dpnp_and_suai():
    require_backend("sycl")
    dpnp = pytest.importorskip("dpnp")
    theirs = dpnp.arange(4, dtype="f4")
    theirs.flags["W"] = False
    ours = devbuf.asarray(theirs)
    with pytest.raises(ValueError, match=r"^fill: .*: dpnp\.dpnp_array\.dpnp_array marked it read-only through __sycl_usm_array_interface__ \(data\[1\]\)"):
        ours.buffer.fill(1)


@pytest.mark.parametrize("backend", backend_names())
def test_numpy_views_of_devbuf_memory_import_back_as_devbuf_memory(backend):
    require_backend(backend)
    buffer = devbuf.alloc(64, "shared", device=backend)
    host_view = np.asarray(buffer.view(np.float32))
    for theirs, offset in [(host_view, 0), (host_view[2:10:2], 8), (memoryview(buffer), 0)]:
        back = devbuf.asarray(theirs)
        assert (back.kind, back.device) == ("shared", buffer.device)
        assert back.ptr == buffer.ptr + offset
    assert devbuf.asarray(host_view[2:10:2]).strides == (8,)


def test_view_names_its_arguments():
    buffer = devbuf.alloc(64, device="host")
    with pytest.raises(ValueError, match=r"^offset: -8 is negative"):
        buffer.view("float32", offset=-8)
    with pytest.raises(ValueError, match=r"^shape: \[2, -2\] has the negative extent -2$"):
        buffer.view("float32", shape=(2, -2))
    with pytest.raises(TypeError, match=r"^shape: expected an int or a sequence of ints, got float$"):
        buffer.view("float32", shape=2.5)
