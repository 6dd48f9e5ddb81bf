"""NVIDIA's own cuda.core and cuda-bindings test suites against the devbuf CUDA test driver: the
driver's fidelity, measured by a maintainer with `ci/cuda-python-fidelity`, which fetches the
suites' sources (they are not on the package index; see tests/cuda-driver/README.md, "cuda.core's
and cuda-bindings' tests") and runs this for each suite:

    LD_LIBRARY_PATH=$(ci/cuda-test-driver):$LD_LIBRARY_PATH \\
        python tests/cuda-driver/fidelity/cuda_python.py --git-dir PATH core
    ... bindings

PATH is a git directory (bare or not) holding NVIDIA/cuda-python's commit `COMMIT` below. The
runner extracts that commit's tests into a scratch directory (`--work`, default a new temporary
one), adapts the one import the installed cuda-core release moved, and runs pytest with the plugin
beside this file (`cuda_python_plugin.py`). Every test runs but the modules and the test the
exclusion list ignores or deselects (`cuda_core_exclusions.txt`, `cuda_bindings_exclusions.txt`).

Then every result is accounted for:

- a failure the exclusion list names is counted under the list's reason; a failure it does not
  name fails the run;
- an excluded test that passes fails the run (its exclusion must go), and so does an exclusion
  that matches no test at all;
- a skip the suite decides itself is counted under the reason its message shows (`SKIPS` below);
  one whose message matches no reason is listed as such.

`--write-exclusions` rewrites the list from this run's failures instead, each classified by its
error text (`FAILURES` below; a failure no pattern explains is left out, so it still fails the
next run). The table it prints is the one tests/cuda-driver/README.md carries.
"""

import argparse
import os
import re
import subprocess
import sys
import tarfile
import tempfile
import xml.etree.ElementTree as ET
from collections import Counter
from importlib.metadata import version
from io import BytesIO
from pathlib import Path

HERE = Path(__file__).resolve().parent
COMMIT = "e51fb7fd296171c977bbcc426a8961fca470381c"
PATHS = ["cuda_core/tests", "cuda_bindings/tests", "cuda_python_test_helpers", "conftest.py", "pytest.ini"]
HELPERS = "cuda_bindings/cuda/bindings/_test_helpers"

# Why an excluded test cannot pass on the test driver: the exclusion lists' reason keys. Where the
# driver lacks a feature a GPU's driver has, the reason says "not modelled".
REASONS = {
    "graphs": "graphs and stream capture are not modelled (cuGraph*, cuStreamBeginCapture not found)",
    "kernels": "kernels are not modelled (no cuModule*, cuLibrary*, cuKernel*, cuLaunch*), and NVRTC, NVVM, "
    "nvJitLink and nvfatbin are not installed",
    "arrays": "CUDA arrays, textures and surfaces are not modelled (cuArray*, cuTex*, cuSurf* not found)",
    "runtime": "the CUDA runtime library cannot start on the test driver: it asks for the driver's "
    "undocumented export tables (cuGetExportTable), which are not modelled",
    "nvml": "NVML (the management library) is not installed",
    "checkpoint": "checkpointing is not modelled (cuCheckpoint*)",
    "ipc-events": "IPC events are not modelled (cuIpcGetEventHandle, cuIpcOpenEventHandle)",
    "green-contexts": "green contexts are not modelled",
    "coredump": "coredump attributes are not modelled",
    "cython": "Cython test extensions: not built (they need the CUDA headers)",
    "version": "version mismatch: the snapshot's test expects Python-level behaviour the installed "
    "cuda-core or cuda-bindings release does not have",
    "unordered-allocation": "the test uses pool memory on another stream before its allocation is "
    "ordered (cuMemAllocAsync: 'must not be accessed until the allocation operation completes'); "
    "the test driver keeps that rule and may report an illegal address, sticky for the process",
}

# How a failure's error shows its reason (first match wins, on the error's message before its
# traceback), for --write-exclusions.
FAILURES = [
    ("version", r"wrapper mapping|members, but expected"),
    ("runtime", r"cudaErrorCallRequiresNewerDriver|cudaErrorInsufficientDriver|cudart"),
    ("checkpoint", r"cuCheckpoint"),
    ("ipc-events", r"cuIpcGetEventHandle|cuIpcOpenEventHandle|IPC-enabled events?|ipc_enabled"),
    ("green-contexts", r"[Gg]reen ?[Cc]tx|green context"),
    ("coredump", r"[Cc]oredump"),
    ("arrays", r"cuArray|cuMipmappedArray|cuTex|cuSurf"),
    ("graphs", r"cuGraph|[Cc]apture|graph"),
    ("kernels", r"[Nn][Vv][Rr][Tt][Cc]|[Nn][Vv][Vv][Mm]|nvJitLink|nvjitlink|nvfatbin|cuModule|cuLibrary|cuKernel"
     r"|cuFunc|cuLaunch|cuLink|cuOccupancy|ObjectCode|Program|Linker"),
    ("nvml", r"[Nn][Vv][Mm][Ll]"),
]

# What a suite's own skip message says (first match wins): where the test driver's device answers
# that it lacks a feature a GPU has, the category says "not modelled".
SKIPS = [
    # test_cudart.py and test_interoperability.py ask the runtime (unsubstituted) before they run.
    ("the suite asked the CUDA runtime, which cannot start on the test driver (not modelled)",
     r"Requires mempool operations|When new attributes were introduced|Sparse Texture Device Filter"),
    ("cuda.core offers no such combination (ManagedMemoryResource has no IPC)",
     r"ManagedMemoryResource does not support IPC"),
    ("IPC-capable pools and IPC: not modelled (the devices report no shareable handle types)",
     r"[Ii][Pp][Cc]|shareable|handle type|POSIX_FILE_DESCRIPTOR|fabric"),
    ("host memory pools: not modelled", r"[Hh]ost.*[Pp]ool|[Pp]inned.*[Pp]ool|HOST_NUMA|host_numa|HOST_MEMORY_POOLS"),
    ("peer access: the devices are not peers", r"[Pp]eer"),
    ("green contexts: not modelled (cuDeviceGetDevResource not found)", r"[Gg]reen|DevResource"),
    ("checkpointing: not modelled", r"[Cc]heckpoint"),
    ("tensor maps: not modelled", r"[Tt]ensor ?[Mm]ap|TMA"),
    ("virtual memory management: not modelled", r"VMM|[Vv]irtual memory|cuMemCreate"),
    ("CUDA 13.1 or later features (the test driver is a CUDA 13.0 driver)", r"13\.[1-9]|131\d\d|1310"),
    ("a newer GPU architecture than the test driver's devices (compute capability 9.0)",
     r"compute capability|requires sm_|[Aa]rchitecture"),
    ("two devices of the same chip: the test driver names each device by its ordinal", r"same chip"),
    ("more devices than the test driver's two (DEVBUF_CUDA_TEST_DEVICES)",
     r"at least \d+ GPUs|(more than|need[s]?) \w+ (GPU|device)|[Mm]ulti.?GPU|devices? (are|is) required"),
    ("applies only without concurrent managed access (the test driver's devices have it)",
     r"[Cc]oncurrent managed access"),
    ("managed memory pools", r"[Mm]anaged"),
    ("cuFile (GPUDirect Storage) not installed", r"cu[Ff]ile|GDS"),
    ("an optional package is not installed (CuPy, PyTorch, pyglet, ml_dtypes, ...)",
     r"cupy|CuPy|torch|PyTorch|pyglet|ml_dtypes|numba|could not import|No module named|not installed"),
    ("compilers and linkers (NVRTC, NVVM, nvJitLink, nvfatbin, nvcc, cuLink options, headers)",
     r"[Nn][Vv][Rr][Tt][Cc]|[Nn][Vv][Vv][Mm]|nvJitLink|nvjitlink|nvfatbin|nvcc|cu[Ll]ink|libdevice|header"
     r"|CUDA_HOME|CUDA_PATH|PTX|ptx|cubin|compil"),
    ("not supported on this platform or Python (Windows, WSL, free-threading, ...)",
     r"[Ww]indows|WSL|free.?thread|GIL|Python 3|platform"),
    ("no parameters on this machine (pytest's empty parameter set)", r"empty parameter set"),
    ("disabled by the suite itself (marked to skip upstream)", r"nvbug|[Dd]isabled|TODO|flaky|review|[Ss]kip"),
]


def read_exclusions(path):
    """The list: {'ignore': {path: reason}, 'deselect': {...}, 'fail': {id: reason}} and problems.
    A line is `ID  # REASON` for a test (or a prefix of test ids) whose failure is excused,
    `ignore PATH  # REASON` for a module not collected, `deselect ID  # REASON` for a test not run."""
    entries = {"ignore": {}, "deselect": {}, "fail": {}}
    problems = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        name, _, reason = line.partition("#")
        reason = reason.strip()
        kind, _, rest = name.strip().partition(" ")
        if kind in ("ignore", "deselect"):
            name = rest.strip()
        else:
            kind, name = "fail", name.strip()
        if reason not in REASONS:
            problems.append(f"{path.name}:{number}: {name}: reason {reason!r} is none of {sorted(REASONS)}")
        entries[kind][name] = reason
    return entries, problems


def extract(git_dir, work):
    """The commit's tests into `work/tree`, the bindings' test helpers into `work/helpers`."""
    def archive(paths, into):
        made = subprocess.run(
            ["git", "--git-dir", str(git_dir), "archive", COMMIT, *paths],
            check=True, capture_output=True,
        ).stdout
        into.mkdir(parents=True, exist_ok=True)
        with tarfile.open(fileobj=BytesIO(made)) as tar:
            tar.extractall(into, filter="data")

    archive(PATHS, work / "tree")
    archive([HELPERS], work / "helpers")
    # cuda-core 1.2.2's cuda.core._memory no longer re-exports IPCBufferDescriptor: a whole module
    # would fail at import for that alone.
    for test in ["cuda_core/tests/test_memory.py", "cuda_core/tests/memory_ipc/test_errors.py"]:
        file = work / "tree" / test
        text = file.read_text()
        file.write_text(text.replace(
            "from cuda.core._memory import IPCBufferDescriptor",
            "from cuda.core._memory._ipc import IPCBufferDescriptor",
        ))


def run_pytest(root, targets, exclusions, junit, substitute, work):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), env.get("PYTHONPATH", "")])
    env["DEVBUF_FIDELITY_TEST_HELPERS"] = str(work / "helpers" / "cuda_bindings")
    env["DEVBUF_FIDELITY_SUBSTITUTE"] = "1" if substitute else "0"
    command = [sys.executable, "-m", "pytest", "-p", "cuda_python_plugin", "-q", "-p", "no:cacheprovider",
               "--continue-on-collection-errors", f"--junitxml={junit}", "-o", "addopts=", *targets]
    command += [f"--ignore={work / 'tree' / path}" for path in exclusions["ignore"]]
    command += [f"--deselect={test}" for test in exclusions["deselect"]]
    subprocess.run(command, cwd=root, env=env, stdout=subprocess.DEVNULL, check=False)


def results(junit):
    """{test id: (outcome, text)} from a JUnit file; ids are pytest's node ids, relative to the
    snapshot's root (`cuda_core/tests/test_x.py::Class::test[param]`); a module or package that
    failed to collect is its path."""
    found = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        classname, name = case.get("classname", ""), case.get("name", "")
        if not classname:
            test_id = name.replace(".", "/")
        else:
            # pytest writes `cuda_core.tests.test_x.Class`: the module's path, then the classes.
            parts = classname.split(".")
            module_end = next((i for i in range(len(parts), 0, -1) if parts[i - 1].startswith("test_")), len(parts))
            test_id = "::".join(["/".join(parts[:module_end]) + ".py", *parts[module_end:], name])
        outcome, text = "passed", ""
        for child in case:
            if child.tag in ("failure", "error"):
                # The message first: it is what classify() reads before the traceback.
                outcome, text = "failed", f"{child.get('message', '')}\n\n{child.text or ''}"
                break
            if child.tag == "skipped":
                outcome, text = "skipped", child.get("message", "") or (child.text or "")
        found[test_id] = (outcome, text)
    return found


def covered_by(test_id, names):
    for name in names:
        if test_id == name or test_id.startswith((name + "::", name + "[")):
            return name
    return None


def classify(text, table):
    for label, pattern in table:
        if re.search(pattern, text):
            return label
    return None


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("suite", choices=["core", "bindings"])
    parser.add_argument("--git-dir", required=True, type=Path, help="a git directory holding COMMIT")
    parser.add_argument("--work", type=Path, help="scratch directory (default: a new temporary one)")
    parser.add_argument("--write-exclusions", action="store_true")
    parser.add_argument("--reread", action="store_true",
                        help="account for the JUnit files a previous run left in --work, without running")
    args = parser.parse_args()
    name = {"core": "cuda_core", "bindings": "cuda_bindings"}[args.suite]
    list_path = HERE / f"{name}_exclusions.txt"
    exclusions, problems = read_exclusions(list_path)
    if args.reread and not args.work:
        parser.error("--reread needs the --work of a previous run")
    work = args.work or Path(tempfile.mkdtemp(prefix=f"devbuf-fidelity-{args.suite}-"))
    if not args.reread:
        extract(args.git_dir, work)
    root = work / "tree" / name
    # The runtime's own tests run without substitutions: they are the runtime's.
    runtime_tests = ["tests/test_cudart.py", "tests/test_interoperability.py"]
    without_runtime = dict.fromkeys((f"{name}/{test}" for test in runtime_tests), "runtime")
    runs = {
        "core": [(["tests"], exclusions, "core.xml", True)],
        "bindings": [
            (["tests"], dict(exclusions, ignore={**exclusions["ignore"], **without_runtime}), "bindings.xml", True),
            (runtime_tests, exclusions, "runtime.xml", False),
        ],
    }[args.suite]
    found = {}
    for targets, excluding, junit, substitute in runs:
        if not args.reread:
            run_pytest(root, targets, excluding, work / junit, substitute, work)
        found.update(results(work / junit))

    passed, failed, stale, excluded, skips, unexplained = [], [], [], Counter(), Counter(), []
    used = set()
    for test_id, (outcome, text) in sorted(found.items()):
        cover = covered_by(test_id, exclusions["fail"])
        if cover:
            used.add(cover)
        if outcome == "passed":
            (stale if cover else passed).append(test_id)
        elif outcome == "failed":
            if cover:
                excluded[exclusions["fail"][cover]] += 1
            else:
                failed.append((test_id, text))
        else:
            skips[classify(text, SKIPS) or f"other: {text.strip()[:100]}"] += 1

    if args.write_exclusions:
        # Kept: comments, modules and tests not run, and the entries that excused a failure now.
        still_failing = {cover for cover in used
                         if any(found[t][0] == "failed" and covered_by(t, [cover]) for t in found)}
        lines = [line for line in list_path.read_text().splitlines()
                 if line.startswith(("#", "ignore ", "deselect ")) or not line.strip()
                 or line.partition("#")[0].strip() in still_failing]
        for test_id, text in failed:
            message, _, traceback = text.partition("\n\n")
            reason = classify(message, FAILURES) or classify(traceback, FAILURES)
            if reason:
                lines.append(f"{test_id}  # {reason}")
            else:
                unexplained.append(test_id)
        list_path.write_text("\n".join(lines) + "\n")
        print(f"wrote {list_path}; {len(unexplained)} failure(s) no reason explains:")
        for test_id in unexplained:
            print(f"  {test_id}: {found[test_id][1].strip().splitlines()[0][:200] if found[test_id][1].strip() else ''}")
        return 1 if unexplained else 0

    problems += [f"{name}: excluded, but passed" for name in stale]
    problems += [f"{entry}: excludes no test that ran" for entry in exclusions["fail"] if entry not in used]
    for test_id, text in failed:
        first = text.strip().splitlines()[0] if text.strip() else ""
        print(f"FAILED {test_id}: {first[:300]}")
    for problem in problems:
        print(f"exclusion list: {problem}")
    label = f"cuda-core {version('cuda-core')}" if args.suite == "core" else ""
    print(f"\n{name} tests at {COMMIT[:7]} ({label + ', ' if label else ''}cuda-bindings "
          f"{version('cuda-bindings')}) on the devbuf CUDA test driver: {len(passed)} passed, "
          f"{len(failed)} failed, {sum(excluded.values())} excluded, {sum(skips.values())} skipped by the suite")
    print(f"\n| excluded: reason | {name} |\n|---|---|")
    for reason, count in excluded.most_common():
        print(f"| {REASONS[reason]} | {count} |")
    for kind in ("ignore", "deselect"):
        for entry, reason in exclusions[kind].items():
            what = "module `{}` (ignored)" if kind == "ignore" else "test `{}` (deselected)"
            print(f"| {REASONS[reason]} | {what.format(entry)} |")
    print(f"\n| skipped by the suite: reason | {name} |\n|---|---|")
    for reason, count in skips.most_common():
        print(f"| {reason} | {count} |")
    return 0 if not failed and not problems else 1


if __name__ == "__main__":
    sys.exit(main())
