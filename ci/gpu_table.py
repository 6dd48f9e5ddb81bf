"""Writes the benchmark tables of a ci/gpu report into BENCHMARKS.md's GPU results: what lies
between the `gpu-table` markers there is replaced by the device, the date and the report's path,
then the tables of `bench-cuda` (the Rust example) and `ci/bench_cuda.py` as the report has them
(with their MISSING lines). ci/gpu runs it after a run on a GPU; a smoke run's report is refused.
  python ci/gpu_table.py REPORT [BENCHMARKS.md]"""

import re
import sys
from pathlib import Path

BEGIN = "<!-- gpu-table begin: ci/gpu_table.py writes what is between these markers -->"
END = "<!-- gpu-table end -->"


def sections(report):
    """The report's sections: {command line after '== ': its lines}."""
    found, name = {}, None
    for line in report.splitlines():
        if line.startswith("== "):
            name = line[3:].strip()
            found[name] = []
        elif name is not None:
            found[name].append(line)
    return found


def output(lines):
    """A benchmark's output as the report has it, without ci/gpu's timing of the step."""
    kept = [line for line in lines
            if not re.fullmatch(r"\(\d+ s\)", line.strip()) and not line.startswith("ci/gpu: ")]
    while kept and not kept[-1].strip():
        kept.pop()
    return kept


def render(report_path, report):
    lines = report.splitlines()
    if any("SMOKE RUN" in line for line in lines[:3]):
        raise SystemExit(f"{report_path}: a smoke run on the CUDA test driver, not a GPU's figures")
    header = lines[0].removeprefix("# devbuf CUDA report, ") if lines else "(an empty report)"
    found = sections(report)
    device = next((lines for name, lines in found.items() if name.startswith("nvidia-smi")), [])
    gpu = device[1].strip() if len(device) > 1 else "(nvidia-smi gave nothing)"
    out = [BEGIN, "", f"Run {header} on {gpu} (name, driver, memory); the whole report is",
           f"[{report_path}]({report_path}).", ""]
    for name, title in ((r"\S*bench-cuda\b", "`bench_cuda` (Rust example, devbuf against the bare driver calls)"),
                        (r"\S*python\S* ci/bench_cuda\.py", "`ci/bench_cuda.py` (devbuf against CuPy and Numba)")):
        section = next((lines for key, lines in found.items() if re.match(name, key)), None)
        out.append(f"{title}:")
        out.append("")
        out.extend(output(section) if section is not None else ["(not in the report)"])
        out.append("")
    out.append(END)
    return "\n".join(out)


def main(argv):
    if not 1 <= len(argv) <= 2:
        raise SystemExit(__doc__)
    report_path = Path(argv[0])
    benchmarks = Path(argv[1] if len(argv) > 1 else "BENCHMARKS.md")
    text = benchmarks.read_text()
    if BEGIN not in text or END not in text:
        raise SystemExit(f"{benchmarks}: no gpu-table markers")
    try:
        shown = report_path.resolve().relative_to(benchmarks.resolve().parent)
    except ValueError:
        shown = report_path
    table = render(str(shown), report_path.read_text())
    before, rest = text.split(BEGIN, 1)
    _, after = rest.split(END, 1)
    benchmarks.write_text(before + table + after)
    print(f"{benchmarks}: GPU table from {shown}")


if __name__ == "__main__":
    main(sys.argv[1:])
