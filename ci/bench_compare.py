"""Compares the JSON-lines records of `ci/bench --json FILE` runs: one set of files prints each
row's ratio and verdict; two sets (before and after a change, separated by `--`) print both, each
ratio the median over the set's runs (alternate the runs of the two builds for a fair compare).
Exits 1 when a row of the last set misses its goal.
  python ci/bench_compare.py RUN.json...
  python ci/bench_compare.py BEFORE.json... -- AFTER.json..."""

import json
import os
import statistics
import sys


def load(paths):
    """Case → (row, [ratio or value of each run])."""
    cases = {}
    for path in paths:
        with open(path) as lines:
            for line in lines:
                row = json.loads(line)
                value = row["ratio"] if row["ratio"] is not None else row["devbuf"]
                cases.setdefault((row["section"], row["case"]), (row, []))[1].append(value)
    return cases


def figure(row, values):
    value = statistics.median(values)
    text = f"{value:.3g}×" if row["ratio"] is not None else f"{value:.3g} {row['unit']}"
    if len(values) > 1:
        text += f" ({min(values):.3g}–{max(values):.3g}, {len(values)} runs)"
    return value, text


def verdict(row, value):
    if row["goal"] is None:
        return "—"
    bound = f"≤ {row['goal']}×" if row["ratio"] is not None else f"≤ {row['goal']} {row['unit']}"
    return f"{bound}: {'meets' if value <= row['goal'] else 'MISSES'}"


def main(argv):
    if "--" in argv:
        split = argv.index("--")
        sets = [argv[:split], argv[split + 1:]]
    else:
        sets = [argv]
    if not all(sets):
        sys.exit(__doc__)
    loaded = [load(paths) for paths in sets]
    last = loaded[-1]
    # Each set is named by its first file.
    names = [os.path.basename(paths[0]) + (f" (+{len(paths) - 1})" if len(paths) > 1 else "") for paths in sets]
    header = ["section", "case"] + (names if len(sets) == 2 else ["devbuf / peer"]) + ["goal"]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    missed = False
    for key, (row, values) in last.items():
        cells = list(key)
        if len(sets) == 2:
            before = loaded[0].get(key)
            cells.append(figure(*before)[1] if before else "—")
        value, text = figure(row, values)
        cells += [text, verdict(row, value)]
        missed |= row["goal"] is not None and value > row["goal"]
        print("| " + " | ".join(cells) + " |")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
