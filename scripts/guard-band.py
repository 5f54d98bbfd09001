#!/usr/bin/env python3
"""The real clock's guard band, measured on committed runs (docs/storage-profiles.md).

    python3 scripts/guard-band.py [RESULTS_DIR] > results/guard-band/table.md

The kernel times a first zeroing z1 from just before ext4_init_inode_table
to just after its event; the trace from the journal start inside it. With
the fix the kernel sleeps L = floor(W z1 HZ) on its own reading. Every
committed real-clock row with the fix, a traced z1 and the kernel's L (its
timer) is read: where L is one more than the trace's z1 gives, the kernel's
reading crossed the step the trace did not, and the kernel's z1 was longer
by at least (step - traced z1). The table gives, per arch and HZ, how many
rows, how many crossed, the largest such lower bound, and how far under a
step the trace read the z1 of every crossing row, against how many rows
read that close without crossing. Rows are counted once (run, cell, start and z1: a row copied into
another folder, a merge or a shard, is one row).
"""
import csv
import glob
import math
import os
import sys
from collections import defaultdict

root = sys.argv[1] if len(sys.argv) > 1 else "results"
seen = set()
groups = defaultdict(list)  # (arch, hz) -> [(under_us, crossed, bound_us, folder)]
for path in sorted(glob.glob(os.path.join(root, "**", "results.csv"), recursive=True)):
    folder = os.path.relpath(os.path.dirname(path), root)
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            if r.get("variant") != "fix" or r.get("status") != "ok":
                continue
            if "icount" in r.get("accel", ""):
                continue  # the virtual clock: no host between the two readings
            try:
                z1 = float(r["z1_ms"]) / 1e3
                slept = int(r["sleep_ticks"])
                hz = int(r["hz"])
                w = int(r.get("wait_mult") or 10)
            except (KeyError, TypeError, ValueError):
                continue
            key = (r.get("run_id"), r.get("cell_id"), r.get("started_at"), r.get("z1_ms"))
            if key in seen:
                continue
            seen.add(key)
            per = 1.0 / (w * hz)
            formula = math.floor(z1 / per)
            step = (formula + 1) * per  # the next step above the traced z1
            under_us = (step - z1) * 1e6
            crossed = slept == formula + 1
            bound = under_us if crossed else None
            groups[(r["arch"], hz)].append((under_us, crossed, bound, folder, slept - formula))

print("| arch | HZ | rows | kernel L = trace's + 1 | other L | largest (step - trace z1) where crossed, us | rows read within 50 us under a step | of them crossed | crossed more than 50 us under a step |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
for (arch, hz), rows in sorted(groups.items()):
    crossed = [r for r in rows if r[1]]
    other = [r for r in rows if r[4] not in (0, 1)]
    near = [r for r in rows if r[0] < 50]
    far = [r for r in crossed if r[0] >= 50]
    big = max((r[2] for r in crossed), default=None)
    print(f"| {arch} | {hz} | {len(rows)} | {len(crossed)} | {len(other)} | {'-' if big is None else f'{big:.0f}'} | {len(near)} | {sum(1 for r in near if r[1])} | {len(far)} |")
print()
print("Crossing rows (traced z1 under the step, us; folder):")
print()
for (arch, hz), rows in sorted(groups.items()):
    for r in sorted(x for x in rows if x[1]):
        print(f"- {arch} HZ={hz}: {r[0]:.0f} us under ({r[3]})")
