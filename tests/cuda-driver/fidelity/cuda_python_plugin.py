"""A pytest plugin for running cuda.core's and cuda-bindings' own tests against the devbuf CUDA test
driver (loaded by `cuda_python.py`, beside it; see tests/cuda-driver/README.md).

It does two things, nothing else:

- makes `cuda.bindings._test_helpers` importable: the tests import it, and the cuda-bindings wheel
  does not ship it; `DEVBUF_FIDELITY_TEST_HELPERS` names the directory holding the snapshot's copy;
- with `DEVBUF_FIDELITY_SUBSTITUTE=1`, answers the few CUDA runtime and NVML questions the tests
  ask with their documented driver equivalents. The CUDA runtime bundled with cuda-bindings cannot
  start on the test driver (it first asks for the driver's undocumented export tables,
  `cuGetExportTable`), and NVML is not installed; without this, every test that synchronizes a
  device or counts devices fails for the runtime's sake, not the driver's. Each substitute calls
  the driver entry point the runtime function is documented to match and returns the runtime's
  error code of the same number.
"""

import os
import sys


def _driver():
    from cuda.bindings import driver

    return driver


def _runtime_error(result):
    from cuda.bindings import runtime

    return runtime.cudaError_t(int(result))


def _context_synchronize():
    (result,) = _driver().cuCtxSynchronize()
    return (_runtime_error(result),)


def _device_count():
    result, count = _driver().cuDeviceGetCount()
    return _runtime_error(result), count


def _pci_bus_id(length, device):
    result, bus_id = _driver().cuDeviceGetPCIBusId(length, device)
    return _runtime_error(result), bus_id


def _device_attribute(attribute, device):
    driver = _driver()
    result, value = driver.cuDeviceGetAttribute(driver.CUdevice_attribute(int(attribute)), device)
    return _runtime_error(result), value


def _num_devices():
    result, count = _driver().cuDeviceGetCount()
    if int(result) != 0:
        raise RuntimeError(f"cuDeviceGetCount failed: {result}")
    return count


def pytest_configure(config):  # noqa: ARG001 - pytest's hook signature
    helpers = os.environ.get("DEVBUF_FIDELITY_TEST_HELPERS")
    if helpers:
        import cuda.bindings

        cuda.bindings.__path__.append(os.path.join(helpers, "cuda", "bindings"))
    if os.environ.get("DEVBUF_FIDELITY_SUBSTITUTE") != "1":
        return
    from cuda.bindings import runtime

    runtime.cudaDeviceSynchronize = _context_synchronize
    runtime.cudaGetDeviceCount = _device_count
    runtime.cudaDeviceGetPCIBusId = _pci_bus_id
    runtime.cudaDeviceGetAttribute = _device_attribute
    try:
        import cuda.core.system as system
    except ImportError:
        return
    system.get_num_devices = _num_devices
    sys.modules["cuda.core.system"].get_num_devices = _num_devices
