#!/usr/bin/env python3
"""Per scenario and cell, how a slowed host held the sleep L: the table
docs/storage-profiles.md quotes ("On a slow or loaded host").

    scripts/l-held-summary.py results/l-held-median results/l-held-floor

Reads each folder's runs.csv and attempts.csv, as
scripts/measure-l-stability.sh writes them: runs at the target L (with the
fix; without it L = W = 10), measured mounts in all and per run (1/2/3/4/5),
the misses by cause (first zeroing below or above the window; a harness
that retried on the kernel's L also remade mounts whose z1 was in it),
the rows kept with a first zeroing outside the window and how many of
them said so (profile_held=false), and the runs' wall time.
"""
import collections
import csv
import os
import sys

CELLS = ["x86_64 HZ250 fix", "arm64 HZ100 fix", "x86_64 HZ250 nofix", "arm64 HZ100 nofix"]


def run_windows(folder, runs):
    """(scenario, run, cell) -> the z1 window (ms) of the row's target:
    [L, L + 1) / (W HZ) for L = floor(W z1_target HZ). Rows written
    before the z1_lo_ms column (a harness older than the window in the
    row) are judged on the same window as newer ones."""
    out = {}
    for s, i, _wall, d in runs:
        d = d if os.path.isabs(d) else os.path.join(folder, os.path.basename(d))
        p = os.path.join(d, "results.csv")
        if not os.path.exists(p):
            continue
        for r in csv.DictReader(open(p)):
            t = r.get("z1_target_ms") or ""
            if not t:
                continue
            per = float(r["wait_mult"]) * int(r["hz"])
            l = int(per * float(t) / 1000 + 1e-9)
            cell = f"{r['arch']} HZ{r['hz']} {r['variant']}"
            out[(s, i, cell)] = (l / per * 1000, (l + 1) / per * 1000)
    return out


def causes_of(a, windows):
    """Each missed z1's cause: below or above the window."""
    w = windows.get((a["scenario"], a["run"], a["cell"]))
    out = []
    for z in a["missed_z1_ms"].split():
        z = float(z)
        if w is None:
            out.append("?")
        else:
            out.append("low" if z < w[0] else "high" if z >= w[1] else "in")
    return out


def kept_outside(a, windows):
    w = windows.get((a["scenario"], a["run"], a["cell"]))
    if w is None or not a["z1_ms"]:
        return a["held"] == "false"
    z = float(a["z1_ms"])
    return not (w[0] <= z < w[1])


def main(folders):
    if not folders:
        sys.exit("usage: l-held-summary.py FOLDER...")
    print("| harness | scenario | cell | runs at target L | mounts | per run (1/2/3/4/5) | misses below/above | kept outside the window (said so) |")
    print("|---|---|---|---|---:|---|---|---:|")
    walls = []
    for folder in folders:
        name = os.path.basename(folder.rstrip("/"))
        att = list(csv.DictReader(open(os.path.join(folder, "attempts.csv"))))
        runs = list(csv.reader(open(os.path.join(folder, "runs.csv"))))
        windows = run_windows(folder, runs)
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
                causes = collections.Counter(k for a in xs for k in causes_of(a, windows))
                mounts = sum(int(a["attempts"] or 0) for a in xs)
                # Kept with a first zeroing outside the window, and how
                # many of those rows said so (profile_held=false; rows of a
                # harness before that column say nothing).
                outside = [a for a in xs if kept_outside(a, windows)]
                said = sum(1 for a in outside if a["held"] == "false")
                nh = f"{len(outside)} ({said})"
                if causes.get("in"):
                    causes["high"] = f"{causes['high']} +{causes['in']} in it"
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
