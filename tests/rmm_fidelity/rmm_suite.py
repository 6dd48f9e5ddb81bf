"""RMM's own Python test suite run on devbuf through a module named `rmm` that only renames
(rmm_shim.py beside this file), on the CUDA test driver: how far an RMM user's code runs on
devbuf after a rename. Run by a maintainer by hand (RMM's tests are in neither of its wheels on
the package index; its older source distributions there predate the API measured):

    LD_LIBRARY_PATH=$(ci/cuda-test-driver):$LD_LIBRARY_PATH \\
        python tests/rmm_fidelity/rmm_suite.py --git-dir PATH

PATH is a git directory (bare or not) of rapidsai/rmm holding `COMMIT` below (a clone of it, at
any later commit of its main branch). The runner extracts that commit's `python/rmm/rmm/tests`
into a scratch directory (`--work`, default a new temporary one) and runs pytest there with the
plugin beside this file, which puts the shim in place of `rmm` before the suite's conftest
imports it. RMM itself is not installed, and none of its code runs: only its tests.

Every item is then counted: passed; skipped by the suite (its reason); not applicable here
(`NOT_APPLICABLE`: the CUDA runtime, which cannot start on the test driver, or CuPy and PyTorch,
which are not installed); or failed, by cause (`CAUSES`: an RMM name devbuf lacks, named by the
shim's `DevbufLacks`; or a documented difference; anything else is listed by its first line).
The summary gives the pass rate of the applicable items and of the test functions (a function
passes when every applicable item of it passes), and, beside it, the function pass rate over the
functions working RMM code can rely on: without those that only assert an error RMM raises for a
call devbuf accepts (`REFUSAL_ONLY`), which no working RMM code makes. `--json FILE` writes the
counts.
"""

import argparse
import json
import os
import re
import subprocess
import sys
import tarfile
import tempfile
import xml.etree.ElementTree as ET
from collections import Counter, defaultdict
from io import BytesIO
from pathlib import Path

HERE = Path(__file__).resolve().parent
COMMIT = "5d50a37b9612e29d53f8202fba792b1a36f88a79"  # rapidsai/rmm main, 2026-07-02
TESTS = "python/rmm/rmm/tests"

# Failures that say nothing about devbuf: what the suite asks of libraries that cannot run here.
NOT_APPLICABLE = [
    ("the CUDA runtime (cuda.bindings.runtime), which cannot start on the test driver",
     r"cudaError|cudart|cuda\.bindings\.runtime|libcudart|runtime\.cuda"),
    ("CuPy or PyTorch, not installed", r"No module named '(cupy|torch)'"),
]

# Failures on a difference the memory-resource guide documents (docs/guide/memory-resources.md,
# "Differences from RMM", whose rows these labels are): the cause, and the pattern of the test's
# id or of its error (searched in "id\nerror").
CAUSES = [
    ("`stream=None` means the buffer's or resource's own queue, not a TypeError", r"_stream_none\n"),
    ("`__sizeof__` is the Python object's size, not the device memory's", r"rmm_device_buffer\[\d+\]\n.*assert \d+ == \d+\n.*__sizeof__ of devbuf\.Buffer"),
    ("devbuf's pools hand out no IPC-shareable memory", r"pool_handle|enable_fabric"),
    ("`initial_pool_size > maximum_pool_size` is a ValueError", r"initial_pool_size: \d+ bytes is more than maximum_pool_size"),
    ("the error of a new stream's flags given with an existing one names devbuf's arguments",
     r"test_flags_with_obj_raises\n.*Regex pattern did not match"),
    ("devbuf lacks `{}`", r"DevbufLacks: devbuf has no counterpart of ([\w.]+)"),
]


# Test functions that only assert an error RMM raises for a call devbuf accepts, with a meaning
# the guide documents (its "Differences from RMM"): the call raises in RMM, so no working RMM
# code makes it, and the difference cannot break such code. By the function's id: the second
# function rate leaves them out whether they pass or fail; the raw rate counts them.
REFUSAL_ONLY = [
    ("RMM's TypeError for an explicit `stream=None` (devbuf: the buffer's or resource's own queue)",
     r"^test_device_buffer\.py::test_\w+_stream_none$"),
]


def refusal_only(function):
    """The REFUSAL_ONLY label of a test function (its id without parameters), or None."""
    return next((label for label, pattern in REFUSAL_ONLY if re.search(pattern, function)), None)


def extract(git_dir, work):
    made = subprocess.run(["git", "--git-dir", str(git_dir), "archive", COMMIT, TESTS],
                          check=True, capture_output=True).stdout
    with tarfile.open(fileobj=BytesIO(made)) as tar:
        tar.extractall(work, filter="data")
    return work / TESTS


def run_pytest(tests, junit, extra):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), str(tests), env.get("PYTHONPATH", "")])
    command = [sys.executable, "-m", "pytest", "-p", "rmm_fidelity_plugin", "-q", "-p", "no:cacheprovider",
               "--continue-on-collection-errors", f"--junitxml={junit}", "-o", "addopts=",
               "-o", "junit_family=xunit1", *extra, str(tests)]
    subprocess.run(command, cwd=tests, env=env, stdout=subprocess.DEVNULL, check=False)


def results(junit):
    """{test id: (outcome, text)}: `test_x.py::Class::test[param]`; a module that failed to
    collect is its path."""
    found = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        classname, name = case.get("classname", ""), case.get("name", "")
        parts = [p for p in classname.split(".") if p]
        if parts and parts[0].startswith("test_"):
            test_id = "::".join([parts[0] + ".py", *parts[1:], name])
        else:
            test_id = name
        outcome, text = "passed", ""
        for child in case:
            if child.tag in ("failure", "error"):
                outcome, text = "failed", f"{child.get('message', '')}\n\n{child.text or ''}"
                break
            if child.tag == "skipped":
                outcome, text = "skipped", child.get("message", "") or (child.text or "")
        found[test_id] = (outcome, text)
    return found


def cause_of(test_id, text):
    for label, pattern in NOT_APPLICABLE:
        if re.search(pattern, text):
            return "n/a", label
    for label, pattern in CAUSES:
        match = re.search(pattern, f"{test_id}\n{text}", re.DOTALL)
        if match:
            return "failed", label.format(*match.groups())
    first = next((line.strip() for line in text.splitlines() if line.strip()), "")
    return "failed", f"other: {first[:160]}"


def function_of(test_id):
    return test_id.split("[", 1)[0]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--git-dir", type=Path, help="a git directory of rapidsai/rmm holding COMMIT")
    parser.add_argument("--work", type=Path, help="scratch directory (default: a new temporary one)")
    parser.add_argument("--reread", action="store_true", help="count the JUnit file a previous run left in --work")
    parser.add_argument("--json", type=Path, help="also write the counts here")
    parser.add_argument("--list", action="store_true", help="list every failing item with its cause")
    parser.add_argument("pytest_args", nargs="*", help="passed to pytest (e.g. -k pool)")
    args = parser.parse_args()
    if args.reread and not args.work:
        parser.error("--reread needs the --work of a previous run")
    if not args.reread and not args.git_dir:
        parser.error("--git-dir is needed to extract RMM's tests")
    work = args.work or Path(tempfile.mkdtemp(prefix="devbuf-rmm-suite-"))
    junit = work / "rmm.xml"
    if not args.reread:
        tests = extract(args.git_dir, work)
        run_pytest(tests, junit, args.pytest_args)
    found = results(junit)

    outcomes, causes, skips = Counter(), Counter(), Counter()
    functions = defaultdict(set)
    failing = []
    for test_id, (outcome, text) in sorted(found.items()):
        if outcome == "failed":
            outcome, cause = cause_of(test_id, text)
            (causes if outcome == "failed" else skips)[cause] += 1
            if outcome == "failed":
                failing.append((test_id, cause))
        elif outcome == "skipped":
            skips[f"skipped by the suite: {text.strip().splitlines()[0][:120] if text.strip() else ''}"] += 1
        outcomes[outcome] += 1
        functions[function_of(test_id)].add(outcome)

    applicable = outcomes["passed"] + outcomes["failed"]
    counted = {name: seen - {"skipped", "n/a"} for name, seen in functions.items()}
    counted = {name: seen for name, seen in counted.items() if seen}
    passing_functions = sum(seen == {"passed"} for seen in counted.values())
    if args.list:
        for test_id, cause in failing:
            print(f"FAILED {test_id}: {cause}")
    print(f"RMM's Python tests at {COMMIT[:8]} through the rename (tests/rmm_fidelity/rmm_shim.py), "
          f"devbuf {__import__('devbuf').__version__}, on {os.environ.get('DEVBUF_RMM_DEVICE', 'cuda:0')}:")
    print(f"  {len(found)} items: {outcomes['passed']} passed, {outcomes['failed']} failed, "
          f"{outcomes['skipped']} skipped by the suite, {outcomes['n/a']} not applicable here")
    rate = 100 * outcomes["passed"] / applicable if applicable else 0.0
    print(f"  applicable items: {outcomes['passed']} of {applicable} pass ({rate:.1f}%)")
    frate = 100 * passing_functions / len(counted) if counted else 0.0
    print(f"  test functions: {passing_functions} of {len(counted)} pass in every applicable item ({frate:.1f}%)")
    relied_on = {name: seen for name, seen in counted.items() if not refusal_only(name)}
    left_out = Counter(refusal_only(name) for name in counted if refusal_only(name))
    relied_passing = sum(seen == {"passed"} for seen in relied_on.values())
    rrate = 100 * relied_passing / len(relied_on) if relied_on else 0.0
    print(f"  test functions of behaviour working RMM code can rely on: {relied_passing} of {len(relied_on)} "
          f"pass ({rrate:.1f}%), leaving out {sum(left_out.values())} that only assert an error RMM raises "
          f"for a call devbuf accepts:")
    for label, count in left_out.most_common():
        print(f"    {count}: {label}")
    print("\n| failing items: cause | items |\n|---|---|")
    for cause, count in causes.most_common():
        print(f"| {cause} | {count} |")
    print("\n| not run or not applicable: reason | items |\n|---|---|")
    for reason, count in skips.most_common():
        print(f"| {reason} | {count} |")
    if args.json:
        args.json.write_text(json.dumps({
            "commit": COMMIT, "items": len(found), **outcomes, "applicable": applicable,
            "functions": len(counted), "functions_passing": passing_functions,
            "functions_relied_on": len(relied_on), "functions_relied_on_passing": relied_passing,
            "functions_left_out": dict(left_out),
            "causes": dict(causes), "not_run": dict(skips),
        }, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
