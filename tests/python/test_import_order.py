"""The import-order trap: a program that lets dpctl or dpnp load the OpenCL loader before it
imports devbuf keeps devbuf from registering the Intel CPU runtime pip installed (the [sycl]
extra), so the SYCL CPU device is missing from that process. devbuf warns once at import, with the
fix, and the default device's reason says it. Run in child processes without ci/env.sh's
OCL_ICD_FILENAMES, as a user's program runs after `pip install devbuf[sycl]`."""

import os
import subprocess
import sys

import pytest

from devbuf import _runtime

PROGRAM = """
import warnings
{before}
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import devbuf
import devbuf._devbuf
print("WARNINGS", [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)])
print("REASON", devbuf._devbuf._default_device_reason())
"""


def run(before, **environment):
    env = {k: v for k, v in os.environ.items() if k not in ("OCL_ICD_FILENAMES", "OCL_ICD_VENDORS")}
    env.update(environment)
    done = subprocess.run([sys.executable, "-c", PROGRAM.format(before=before)], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    lines = dict(line.split(" ", 1) for line in done.stdout.splitlines() if line.startswith(("WARNINGS", "REASON")))
    return eval(lines["WARNINGS"]), lines["REASON"]


@pytest.fixture(autouse=True)
def intel_runtime_installed():
    if not any(os.path.exists(os.path.join(d, "libintelocl.so")) for d in _runtime._library_dirs()):
        pytest.skip("the Intel CPU OpenCL runtime (devbuf's [sycl] extra) is not installed here")
    pytest.importorskip("dpctl")


def test_importing_devbuf_after_dpctl_loaded_opencl_warns_once_with_the_fix():
    warned, reason = run("import dpctl\ndpctl.get_devices()")
    assert len(warned) == 1, warned
    assert "devbuf was imported after an OpenCL loader was loaded" in warned[0]
    assert "Fix: import devbuf before dpctl or dpnp, or set OCL_ICD_FILENAMES=" in warned[0]
    assert "too late to register the Intel CPU OpenCL runtime" in reason and "Fix: import devbuf before" in reason


def test_importing_devbuf_first_or_with_the_runtime_registered_says_nothing():
    warned, reason = run("")
    assert warned == [] and "too late" not in reason
    library = next(os.path.join(d, "libintelocl.so") for d in _runtime._library_dirs() if os.path.exists(os.path.join(d, "libintelocl.so")))
    warned, reason = run("import dpctl\ndpctl.get_devices()", OCL_ICD_FILENAMES=library)
    assert warned == [] and "too late" not in reason
