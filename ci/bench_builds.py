"""Two builds of devbuf against each other on the Python rows of ci/bench_counts.py: each run times
every case's devbuf side against its peer (the case's second side) in alternating rounds
(ci/benchlib.py), one build per process, the builds alternating run by run (A B, B A, ...) so
that the machine's load hits both alike. Prints, per case and build, the median over the runs of
each run's median ratio (devbuf / peer), their spread and the medians in ns.
Make each build's directory from its checkout with `python -m pip install --no-deps --target DIR .`
  python ci/bench_builds.py DIR_A DIR_B [--runs N] CASE...     (cases: ci/bench_counts.py's)"""

import json
import os
import statistics
import subprocess
import sys

import bench_counts
from benchlib import per_call_rounds


def time_cases(cases):
    """One run in this process: per case, the devbuf side's and the peer's ns per call."""
    import devbuf

    result = {"devbuf": devbuf.__file__}
    for case in cases:
        _, statements, kind = bench_counts.PYTHON_CASES[case]
        names = bench_counts.setup(kind)
        # Each side called through a lambda, as ci/bench_python.py times its rows.
        ours, theirs = (eval(f"lambda: {statements[side]}", names) for side in list(statements)[:2])
        result[case] = per_call_rounds(ours, theirs, 15, 20000)
    print(json.dumps(result))


def main(argv):
    if argv[:1] == ["--time"]:
        return time_cases(argv[1:])
    builds, argv = argv[:2], argv[2:]
    runs = 10
    if argv[:1] == ["--runs"]:
        runs, argv = int(argv[1]), argv[2:]
    ratios = {(build, case): [] for build in builds for case in argv}
    times = {(build, case): [] for build in builds for case in argv}
    for run in range(runs):
        for build in builds if run % 2 == 0 else builds[::-1]:
            env = dict(os.environ, PYTHONPATH=os.path.abspath(build))
            out = subprocess.run([sys.executable, __file__, "--time", *argv], env=env, check=True,
                                 capture_output=True, text=True).stdout
            result = json.loads(out)
            if not result.pop("devbuf").startswith(os.path.abspath(build)):
                raise SystemExit(f"{build}: devbuf was not imported from it")
            for case, (ours, theirs) in result.items():
                ratios[build, case].append(statistics.median(o / t for o, t in zip(ours, theirs)))
                times[build, case].append((statistics.median(ours), statistics.median(theirs)))
    print(f"{runs} runs per build, {os.getloadavg()[0]:.2f} load average at the end\n")
    print("| case | build | devbuf / peer (spread of runs) | devbuf ns | peer ns |")
    print("|---|---|---:|---:|---:|")
    for case in argv:
        for build in builds:
            r, t = ratios[build, case], times[build, case]
            print(f"| {case} | {build} | {statistics.median(r):.3f}× ({min(r):.3f}–{max(r):.3f}) "
                  f"| {statistics.median(o for o, _ in t):.1f} | {statistics.median(p for _, p in t):.1f} |")


if __name__ == "__main__":
    os.chdir(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    main(sys.argv[1:])
