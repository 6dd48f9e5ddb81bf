"""``python -m devbuf matrix``: every conformance check and every consumer library on every device,
pass / FAIL / skip with the reason; exits 1 on any FAIL. By default each device is one line that
fits 100 columns (its counts, and the cells that did not pass); ``--wide`` prints one column per
check.

Each row runs in a child process, one cell after another, reporting each cell as it finishes: a
cell that crashes its process (a segfault in a driver, in a consumer library or in devbuf) is a
FAIL saying so, with what Python's faulthandler printed, and the row goes on in a new process
from the next cell. The matrix itself never crashes."""

import json
import signal
import subprocess
import sys
import textwrap

import devbuf
from devbuf import _consumers
from devbuf._devbuf import conformance_checks, conformance_matrix

# How long one child process may take for the rest of its row before its running cell is a FAIL.
ROW_TIMEOUT_S = 300
# Marks the child's result lines among whatever the libraries it loads print.
CELL = "devbuf-matrix-cell "


def _labels() -> list[str]:
    """The matrix's rows, listed by a child process: this process opens no runtime before its
    children do. (On one H200 machine, once a process had opened NVIDIA's OpenCL, its child
    processes' OpenCL loader no longer listed NVIDIA's platform, and that row's cells all failed.)"""
    code = f"import json; from {__name__} import labels_here; print(json.dumps(labels_here()))"
    listed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(listed.stdout.splitlines()[-1])


def labels_here() -> list[str]:
    """The matrix's rows: each device of an available backend, or an unavailable backend's name."""
    labels: list[str] = []
    for backend in devbuf.backends():
        if backend.available:
            labels.extend(device.selector for device in backend.devices)
        else:
            labels.append(backend.name)
    return labels


def run_row(label: str, start: int) -> None:
    """In the child process: row `label`'s cells from column `start` on, one line each as it ends."""
    checks = conformance_checks()
    consumers = _consumers.CONSUMERS
    for index in range(start, len(checks) + len(consumers)):
        if index < len(checks):
            rows = conformance_matrix(device=label, check=checks[index])
            status, reason = (rows[0][1][0][1:]) if rows and rows[0][1] else ("FAIL", f"no matrix row {label}")
        else:
            status, reason = _consumers.run(consumers[index - len(checks)][1], label)
        print(CELL + json.dumps([index, status, reason]), flush=True)


def _ended(returncode: int | None) -> str:
    if returncode is None:
        return f"gave no answer in {ROW_TIMEOUT_S} s"
    if returncode < 0:
        return f"crashed the process (signal {-returncode}, {signal.Signals(-returncode).name})"
    return f"ended the process with exit status {returncode}"


def _row(label: str, columns: list[str], crashes: list[str], cells_of: str = __name__) -> list[tuple[str, str]]:
    """Row `label`'s cells, each run in a child process by module `cells_of`'s `run_row`;
    `crashes` gets what a crash left."""
    cells: dict[int, tuple[str, str]] = {}
    start = 0
    while start < len(columns):
        code = f"from {cells_of} import run_row; run_row({label!r}, {start})"
        child = subprocess.Popen(
            [sys.executable, "-X", "faulthandler", "-c", code],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            out, err = child.communicate(timeout=ROW_TIMEOUT_S)
            returncode: int | None = child.returncode
        except subprocess.TimeoutExpired:
            child.kill()
            out, err = child.communicate()
            returncode = None
        following = start
        for line in out.splitlines():
            if line.startswith(CELL):
                index, status, reason = json.loads(line.removeprefix(CELL))
                cells[index] = (status, reason)
                following = index + 1
        if returncode == 0 and following >= len(columns):
            break
        if following < len(columns):
            what = f"{columns[following]} on {label} {_ended(returncode)}"
            cells[following] = ("FAIL", what)
            crashes.append(f"{what}; its stderr ended:\n" + "\n".join(err.splitlines()[-25:]))
        start = following + 1
    return [cells[index] for index in range(len(columns))]


# What the default output fits: a terminal or a CI log of 100 columns (``--wide`` prints the whole
# table, one column per check, about 330 wide).
WIDTH = 100


def _wrapped(text: str, indent: int, first: str = "") -> str:
    """``first`` followed by ``text``, wrapped to WIDTH columns, continued at column ``indent``."""
    return textwrap.fill(
        text, WIDTH, initial_indent=first, subsequent_indent=" " * indent, break_on_hyphens=False
    )


def header(columns: list[str], width: int, wide: bool) -> str:
    """The table's first line: one column per check (``wide``), or the per-row summary's."""
    if wide:
        return f"{'device':{width}}" + "".join(f"  {c:>8}" for c in columns)
    return f"{'device':{width}}  {'pass':>4}  {'skip':>4}  {'FAIL':>4}  not passed"


def row_line(label: str, columns: list[str], cells: list[str], width: int, wide: bool, checks: int = 0) -> str:
    """One row: every cell (``wide``), or the counts and the cells that did not pass, grouped by
    what they say (``skip[3]: numba, cupy``; "every check" for the first ``checks`` columns),
    wrapped to WIDTH columns."""
    if wide:
        return f"{label:{width}}" + "".join(f"  {c:>8}" for c in cells)
    counts = {status: sum(c.startswith(status) for c in cells) for status in ("pass", "skip", "FAIL")}
    groups: dict[str, list[str]] = {}
    for column, cell in zip(columns, cells):
        if cell != "pass":
            groups.setdefault(cell, []).append(column)
    # FAILs first: what to look at.
    ordered = sorted(groups.items(), key=lambda group: not group[0].startswith("FAIL"))

    def named(names: list[str]) -> str:
        if names == columns:
            return "every cell"
        if checks and names[:checks] == columns[:checks]:
            return ", ".join(["every check"] + names[checks:])
        return ", ".join(names)

    detail = "; ".join(f"{cell}: {named(names)}" for cell, names in ordered)
    first = f"{label:{width}}  {counts['pass']:>4}  {counts['skip']:>4}  {counts['FAIL']:>4}  "
    return _wrapped(detail, len(first), first) if detail else first + "-"


def matrix(wide: bool = False) -> int:
    consumers = _consumers.CONSUMERS
    columns = conformance_checks() + [name for name, _ in consumers]
    notes: list[str] = []
    crashes: list[str] = []

    def cell(status: str, reason: str) -> str:
        if status == "pass":
            return "pass"
        if reason not in notes:
            notes.append(reason)
        return f"{status}[{notes.index(reason) + 1}]"

    labels = _labels()
    width = max([len(label) for label in labels] + [6])
    print(header(columns, width, wide), flush=True)
    failed = False
    for label in labels:
        cells = [cell(status, reason) for status, reason in _row(label, columns, crashes)]
        failed |= any(c.startswith("FAIL") for c in cells)
        print(row_line(label, columns, cells, width, wide, len(conformance_checks())), flush=True)
    if not wide:
        print(_wrapped(f"columns: {', '.join(columns)} (python -m devbuf matrix --wide: one each)", 9))
    for number, note in enumerate(notes, 1):
        print(_wrapped(note, len(f"[{number}] "), f"[{number}] "))
    for crash in crashes:
        print(f"\nCRASH: {crash}")
    for device in devbuf.devices():
        if device.test_double:
            print(_wrapped(f"{device.selector} is NOT hardware: {device.test_double}", 4))
    return 1 if failed else 0
