#!/usr/bin/env python3
"""Per scenario and cell, how a slowed host held the sleep L: the table
docs/storage-profiles.md quotes ("On a slow or loaded host").

    scripts/l-held-summary.py results/l-held-median results/l-held-floor

Reads each folder's runs.csv and attempts.csv, as
scripts/measure-l-stability.sh writes them: runs at the target L (with the
fix; without it L = W = 10), measured mounts in all and per run (1/2/3/4/5),
the misses by cause (first zeroing below or above the window), rows that
say profile_held=false, and the runs' wall time.
"""
import collections
import csv
import os
import sys

CELLS = ["x86_64 HZ250 fix", "arm64 HZ100 fix", "x86_64 HZ250 nofix", "arm64 HZ100 nofix"]


def main(folders):
    if not folders:
        sys.exit("usage: l-held-summary.py FOLDER...")
    print("| harness | scenario | cell | runs at target L | mounts | per run (1/2/3/4/5) | misses below/above | not held |")
    print("|---|---|---|---|---:|---|---|---:|")
    walls = []
    for folder in folders:
        name = os.path.basename(folder.rstrip("/"))
        att = list(csv.DictReader(open(os.path.join(folder, "attempts.csv"))))
        runs = list(csv.reader(open(os.path.join(folder, "runs.csv"))))
        scenarios = []
        for a in att:
            if a["scenario"] not in scenarios:
                scenarios.append(a["scenario"])
        for s in scenarios:
            for cell in CELLS:
                xs = [a for a in att if a["scenario"] == s and a["cell"] == cell]
                if not xs:
                    continue
                want = lambda a: a["target_L"] or "10"
                hit = sum(1 for a in xs if a["status"] == "ok" and a["L"] == want(a))
                per = collections.Counter(a["attempts"] for a in xs)
                causes = collections.Counter(k for a in xs for k in a["missed_causes"].split())
                mounts = sum(int(a["attempts"] or 0) for a in xs)
                nh = sum(1 for a in xs if a["held"] == "false")
                print(
                    f"| {name} | {s} | {cell} | {hit}/{len(xs)} | {mounts} | "
                    + "/".join(str(per.get(str(n), 0)) for n in range(1, 6))
                    + f" | {causes.get('low', 0)}/{causes.get('high', 0)} | {nh} |"
                )
            w = [float(r[2]) for r in runs if r[0] == s]
            walls.append(f"{name} {s}: {len(w)} runs, wall {min(w):.1f}-{max(w):.1f} s, mean {sum(w) / len(w):.1f} s")
    print()
    for line in walls:
        print(f"- {line}")


if __name__ == "__main__":
    main(sys.argv[1:])
