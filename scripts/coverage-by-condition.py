#!/usr/bin/env python3
"""Coverage of the early stop's 95% interval by condition, from a `replay`
markdown (its per-run table) and the results folders it read.

    scripts/coverage-by-condition.py results/estimate-coverage/after.md

The condition of each folder (alone, 8 / 12 / 24 at once, near a tick) is
the table below: what its NOTES.md says it ran under.
"""
import csv
import sys
from collections import defaultdict
from pathlib import Path

CONDITION = {
    "distro-config-64GiB-fix": "alone",
    "distro-config-64GiB-nofix": "alone",
    "reported-series-quiet-rerun": "alone",
    "near-tick-under-alone": "near a tick, alone",
    "reported-baseline": "8 at once",
    "near-tick-under-8": "near a tick, 8 at once",
    "near-tick-over-8": "near a tick, 8 at once",
    "x86-fix-series": "12 at once",
    "reported-series-stable": "24 at once",
    "reported-series-quiet": "24 at once",
    "reported-series-n3": "24 at once",
    "reported-6.1-n3": "24 at once",
}


def main(md: str) -> None:
    root = Path(md).resolve().parents[1]
    # (run_id, cell_id) -> folder
    where = {}
    for folder in CONDITION:
        p = root / folder / "results.csv"
        for r in csv.DictReader(p.open()):
            where[(r["run_id"], r["cell_id"])] = folder
    table = defaultdict(lambda: [0, 0])  # (condition, N) -> [stopped, covered]
    for line in Path(md).read_text().splitlines():
        f = [c.strip() for c in line.strip("|").split("|")]
        if len(f) != 12 or f[11] not in ("yes", "no"):
            continue
        folder = where.get((f[0], f[1]))
        if folder is None:
            continue
        t = table[(CONDITION[folder], int(f[4]))]
        t[0] += 1
        t[1] += f[11] == "yes"
    conds = sorted({c for c, _ in table}, key=list(dict.fromkeys(CONDITION.values())).index)
    ns = sorted({n for _, n in table})
    print("| condition | " + " | ".join(f"N = {n}" for n in ns) + " |")
    print("|---|" + "---:|" * len(ns))
    for c in conds:
        cells = []
        for n in ns:
            s, k = table.get((c, n), [0, 0])
            cells.append(f"{k}/{s}" + (f" ({100 * k / s:.0f}%)" if s else ""))
        print(f"| {c} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main(sys.argv[1])
