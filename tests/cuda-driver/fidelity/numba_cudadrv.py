"""NVIDIA's own driver tests, numba-cuda's `numba.cuda.tests.cudadrv` (shipped in the numba-cuda
wheel), against the devbuf CUDA test driver: the driver's fidelity suite.

Run with the test driver on the library path (ci/test does):

    LD_LIBRARY_PATH=$(ci/cuda-test-driver):$LD_LIBRARY_PATH \
        python tests/cuda-driver/fidelity/numba_cudadrv.py

Every test runs except those the exclusion list beside this file names (a module, a class or one
test, each with the reason it cannot apply to a driver without kernels). The run fails when a test
that runs fails or errors, when an exclusion has no reason, and when an exclusion names nothing
(the list must not outlive the tests it excuses). Skips numba-cuda decides itself are reported with
their reasons.
"""

import importlib
import pkgutil
import sys
import unittest
from importlib.metadata import version
from pathlib import Path

PACKAGE = "numba.cuda.tests.cudadrv"
EXCLUSIONS = Path(__file__).with_name("numba_cudadrv_exclusions.txt")


def read_exclusions(path):
    """The exclusion list: {test id prefix: reason}; a line is `ID  # reason`."""
    exclusions, problems = {}, []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        name, _, reason = line.partition("#")
        name, reason = name.strip(), reason.strip()
        if not reason:
            problems.append(f"{path.name}:{number}: {name} has no reason")
        exclusions[name] = reason
    return exclusions, problems


def excluded_by(test_id, exclusions):
    """The exclusion that covers `test_id` (module.Class.test), if any."""
    parts = test_id.split(".")
    for end in range(len(parts), 0, -1):
        prefix = ".".join(parts[:end])
        if prefix in exclusions:
            return prefix
    return None


def tests_of(suite):
    for item in suite:
        if isinstance(item, unittest.TestSuite):
            yield from tests_of(item)
        else:
            yield item


def main():
    exclusions, problems = read_exclusions(EXCLUSIONS)
    used = set()
    package = importlib.import_module(PACKAGE)
    loader = unittest.TestLoader()
    kept = unittest.TestSuite()
    excluded_modules, excluded_tests = 0, 0
    for module in sorted(info.name for info in pkgutil.iter_modules(package.__path__)):
        if not module.startswith("test_"):
            continue
        if module in exclusions:
            # Not even imported: some of these fail at import without NVRTC or NVVM.
            used.add(module)
            excluded_modules += 1
            continue
        for test in tests_of(loader.loadTestsFromName(f"{PACKAGE}.{module}")):
            test_id = test.id().removeprefix(f"{PACKAGE}.")
            cover = excluded_by(test_id, exclusions)
            if cover is None:
                kept.addTest(test)
            else:
                used.add(cover)
                excluded_tests += 1
    problems += [f"{name} excludes nothing" for name in exclusions if name not in used]

    result = unittest.TextTestRunner(stream=sys.stdout, verbosity=1).run(kept)
    for test, reason in result.skipped:
        print(f"skipped by numba-cuda: {test.id()}: {reason}")
    for problem in problems:
        print(f"exclusion list: {problem}")
    failed = len(result.failures) + len(result.errors) + len(result.unexpectedSuccesses)
    passed = result.testsRun - failed - len(result.skipped) - len(result.expectedFailures)
    print(
        f"{PACKAGE} (numba-cuda {version('numba-cuda')}, cuda-bindings "
        f"{version('cuda-bindings')}) on the devbuf CUDA test driver: {passed} passed, "
        f"{failed} failed, {len(result.skipped)} skipped by numba-cuda; excluded: "
        f"{excluded_modules} modules, {excluded_tests} tests"
    )
    return 0 if failed == 0 and not problems else 1


if __name__ == "__main__":
    sys.exit(main())
