"""The default device: the policy (DEVBUF_DEVICE, else the first backend in devbuf.backends()'s
order that allocates every kind), set_default_device() for the process, `with devbuf.Device(...)` per thread."""

import os
import subprocess
import sys
import threading

import pytest

import devbuf

KINDS = ["host", "device", "shared"]


def run_python(code, **env_changes):
    """Runs `code` in a fresh interpreter with the environment changed; returns its stdout."""
    env = dict(os.environ)
    for name, value in env_changes.items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_default_device_allocates_every_kind():
    device = devbuf.default_device()
    assert sorted(device.kinds) == sorted(KINDS)
    for kind in KINDS:
        assert devbuf.alloc(64, kind).device == device


PROBE = """
import devbuf
device = devbuf.default_device()
print(device.selector)
print(devbuf._devbuf._default_device_reason())
devbuf.alloc(64, "host")
"""


@pytest.mark.skipif(not os.path.exists("/etc/OpenCL/vendors/pocl.icd"), reason="needs PoCL, an OpenCL device with SVM only")
def test_an_opencl_device_without_host_memory_is_skipped_for_the_host(tmp_path):
    # The case: no SYCL, and an OpenCL ICD (PoCL) whose device has SVM only. The default
    # used to be that device, where alloc(64, "host") fails.
    (tmp_path / "pocl.icd").write_text(open("/etc/OpenCL/vendors/pocl.icd").read())
    out = run_python(
        PROBE,
        DEVBUF_DEVICE=None,
        DEVBUF_SYCL_LIBRARY="/nonexistent/libDPCTLSyclInterface.so",
        OCL_ICD_FILENAMES=None,
        OCL_ICD_VENDORS=str(tmp_path),
    )
    selector, reason = out.splitlines()
    assert selector == "host", out
    assert "opencl (opencl:0:0 allocates no host memory)" in reason, reason


def test_devbuf_device_names_the_default_and_a_wrong_one_is_an_error():
    selector, reason = run_python(PROBE, DEVBUF_DEVICE="host").splitlines()
    assert (selector, reason) == ("host", 'DEVBUF_DEVICE="host"')
    failed = subprocess.run(
        [sys.executable, "-c", "import devbuf; devbuf.alloc(8)"],
        env={**os.environ, "DEVBUF_DEVICE": "nosuchbackend:3"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert failed.returncode != 0 and 'DEVBUF_DEVICE="nosuchbackend:3"' in failed.stderr


def test_set_default_device_applies_to_every_thread_until_reset():
    chosen = devbuf.default_device()
    host = devbuf.Device("host")
    assert devbuf.set_default_device("host") is None
    try:
        assert devbuf.default_device() == host
        assert devbuf.alloc(16).device == host
        assert devbuf.Queue().device == host
        assert devbuf.Device() == host
        seen = []
        thread = threading.Thread(target=lambda: seen.append(devbuf.default_device()))
        thread.start()
        thread.join()
        assert seen == [host]
        assert "set_default_device" in devbuf._devbuf._default_device_reason()
    finally:
        assert devbuf.set_default_device(None) == host
    assert devbuf.default_device() == chosen


def test_with_device_sets_this_threads_default_for_the_block_and_nests():
    chosen = devbuf.default_device()
    host = devbuf.Device("host")
    others = []
    with host as entered:
        assert entered is host
        assert devbuf.default_device() == host and devbuf.alloc(16, "device").device == host
        with devbuf.Device(chosen.selector):
            assert devbuf.default_device() == chosen
        assert devbuf.default_device() == host
        thread = threading.Thread(target=lambda: others.append(devbuf.default_device()))
        thread.start()
        thread.join()
    assert others == [chosen]  # another thread keeps its own default
    assert devbuf.default_device() == chosen


def test_leaving_blocks_out_of_order_is_an_error():
    host = devbuf.Device("host")
    with pytest.raises(RuntimeError, match="never entered"):
        host.__exit__(None, None, None)
    other = next((d for d in devbuf.devices() if d.usable and d != host), None)
    if other is None:
        pytest.skip("needs a second usable device")
    host.__enter__()
    try:
        with pytest.raises(RuntimeError, match="must nest"):
            other.__exit__(None, None, None)
        assert devbuf.default_device() == host  # the block still holds
    finally:
        host.__exit__(None, None, None)


def test_info_says_which_device_is_the_default_and_why():
    out = subprocess.run(
        [sys.executable, "-m", "devbuf", "info"], capture_output=True, text=True, timeout=120, check=True
    ).stdout
    device = devbuf.default_device()
    assert f"default device: {device.selector}" in out
    assert "  why: " in out
