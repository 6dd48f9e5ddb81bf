"""Run in a bare venv where only `pip install devbuf[sycl]` happened, with none of ci/env.sh's
variables: the SYCL CPU device must work with no manual step."""

import os
import sys

for variable in ("OCL_ICD_FILENAMES", "OCL_ICD_VENDORS", "LD_LIBRARY_PATH", "DEVBUF_SYCL_LIBRARY", "DEVBUF_DEVICE"):
    assert not os.environ.get(variable), f"{variable} is set: this check must run without it"

import devbuf  # noqa: E402  (after the check: importing devbuf sets OCL_ICD_FILENAMES itself)
import dpctl.memory  # noqa: E402
import numpy as np  # noqa: E402
from devbuf import _runtime  # noqa: E402

print("Intel CPU runtime:", _runtime.REGISTRATION)
sycl = next(b for b in devbuf.backends() if b.name == "sycl")
assert sycl.available, f"the SYCL backend is unavailable in a bare install: {sycl.reason}"
device = devbuf.default_device()
assert device.backend == "sycl", f"default device {device.selector}: {devbuf._devbuf._default_device_reason()}"
for kind in ("host", "device", "shared"):
    array = devbuf.alloc(16, kind).view("float32")
    array.copy_from(np.arange(4, dtype=np.float32))
    usm = dpctl.memory.as_usm_memory(array)
    assert usm.get_usm_type() == kind and usm._pointer == array.ptr
    assert np.frombuffer(array.to_bytes(), np.float32).tolist() == [0.0, 1.0, 2.0, 3.0]
# The OpenCL backend sees the same runtime, through the same loader.
intel = [d for d in devbuf.devices("opencl") if d.usable and sorted(d.kinds) == ["device", "host", "shared"]]
assert intel, f"the OpenCL backend does not see Intel's CPU runtime: {devbuf.devices('opencl')}"
print(f"{device.selector} ({device.name}): host, device and shared USM, seen zero-copy by dpctl", file=sys.stderr)
