"""What every benchmark script shares: devbuf and its peer timed in alternating rounds in one run
(devbuf, peer, devbuf, peer, ... so that machine load hits both alike), each row's ratio the
median of the per-round ratios, a goal per row, and the rows printed as Markdown and, when
DEVBUF_BENCH_JSON names a file, appended to it as JSON lines (see ci/bench_compare.py)."""

import gc
import json
import os
import statistics
import sys
import time
import timeit

# Rounds per case unless a case says otherwise.
ROUNDS = 21


class Row:
    """One comparison: devbuf's and the peer's per-round figures (seconds, or ns for per-call
    cases), the reference's name, and the goal on the ratio (devbuf / peer ≤ goal)."""

    def __init__(self, section, case, ours, theirs, reference, goal=None, unit="s"):
        self.section, self.case, self.reference, self.goal, self.unit = section, case, reference, goal, unit
        self.ours, self.theirs = list(ours), list(theirs)
        if self.theirs:
            ratios = [a / b for a, b in zip(self.ours, self.theirs)]
            self.ratio = statistics.median(ratios)
            self.spread = (min(ratios), max(ratios))
        else:
            self.ratio, self.spread = None, None

    @property
    def value(self):
        return self.ratio if self.theirs else statistics.median(self.ours)

    @property
    def meets(self):
        return None if self.goal is None else self.value <= self.goal

    def verdict(self):
        if self.goal is None:
            return "—"
        bound = f"≤ {self.goal} {self.unit}" if not self.theirs else f"≤ {self.goal}×"
        return f"{bound}: {'meets' if self.meets else 'MISSES'}"

    def markdown(self):
        ours = show(statistics.median(self.ours), self.unit)
        if not self.theirs:
            return f"| {self.case} | {ours} | — | — | {self.verdict()} |"
        theirs = show(statistics.median(self.theirs), self.unit)
        low, high = self.spread
        return (f"| {self.case} | {ours} | {theirs} ({self.reference}) | {self.ratio:.3g}× "
                f"({low:.3g}–{high:.3g}) | {self.verdict()} |")

    def record(self):
        return {
            "section": self.section, "case": self.case, "reference": self.reference,
            "unit": self.unit, "devbuf": statistics.median(self.ours),
            "peer": statistics.median(self.theirs) if self.theirs else None,
            "ratio": self.ratio, "ratio_spread": self.spread, "goal": self.goal,
            "meets": self.meets, "rounds": len(self.ours),
        }


def show(value, unit):
    if unit == "ns":
        if value >= 1e4:
            return show(value * 1e-9, "s")
        return f"{value:.1f} ns" if value < 100 else f"{value:.0f} ns"
    if value >= 1e-3:
        return f"{value * 1e3:.2f} ms"
    return f"{value * 1e6:.2f} µs"


def per_call_rounds(ours, theirs, rounds, number):
    """ns per call of two callables, timed in alternating rounds of `number` calls each (both
    through the same `timeit` lambda harness)."""
    timers = [timeit.Timer(ours), timeit.Timer(theirs)]
    for timer in timers:
        timer.timeit(max(number // 10, 1))  # warm-up
    samples = ([], [])
    for _ in range(rounds):
        for side, timer in enumerate(timers):
            samples[side].append(timer.timeit(number) / number * 1e9)
    return samples


def seconds_rounds(ours, theirs, rounds, settle=None):
    """Seconds per run of two callables, in alternating rounds. Every other round runs the peer
    first: a run long enough to disturb the machine (a 64 MiB scatter through two workers) leaves
    the side that follows it a different machine, and always the same side would read it. Before
    each run `settle` (when given) waits until the previous run's work has finished; the garbage
    collector is paused during the run, as timeit does, so that no run is charged a collection of
    garbage the other side left."""
    samples = ([], [])
    runs = (ours, theirs)
    for round_number in range(rounds):
        for side in (0, 1) if round_number % 2 == 0 else (1, 0):
            if settle is not None:
                settle()
            samples[side].append(time_without_gc(runs[side]))
    return samples


def time_without_gc(run):
    """Seconds one call of `run` takes, the garbage collector paused during the call. (Not run
    before it: a collection just before a call of microseconds leaves it cold caches.)"""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        start = time.perf_counter()
        run()
        return time.perf_counter() - start
    finally:
        if was_enabled:
            gc.enable()


class Report:
    """The rows of one section, printed as a Markdown table and appended as JSON lines."""

    def __init__(self, section, side="devbuf"):
        self.section, self.side, self.rows, self.notes = section, side, [], []

    def compare_calls(self, case, ours, theirs, reference, goal=None, rounds=ROUNDS, number=20000):
        samples = per_call_rounds(ours, theirs, rounds, number)
        self.rows.append(Row(self.section, case, *samples, reference, goal, unit="ns"))

    def compare_runs(self, case, ours, theirs, reference, goal=None, rounds=ROUNDS, settle=None):
        samples = seconds_rounds(ours, theirs, rounds, settle)
        self.rows.append(Row(self.section, case, *samples, reference, goal))

    def add(self, row):
        self.rows.append(row)

    def skip(self, what, why):
        self.notes.append(f"{what}: skipped ({why})")

    def print(self, header=""):
        if header:
            print(header + "\n")
        print(f"| case | {self.side} | reference | {self.side} / reference (spread of rounds) | goal |")
        print("|---|---:|---:|---:|---|")
        for row in self.rows:
            print(row.markdown())
        for note in self.notes:
            print(f"\n{note}")
        sys.stdout.flush()
        path = os.environ.get("DEVBUF_BENCH_JSON")
        if path:
            with open(path, "a") as out:
                for row in self.rows:
                    out.write(json.dumps(row.record()) + "\n")


def load_average():
    """The 1-minute load average and the core count, for the record of how loaded the machine was."""
    return f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores"
