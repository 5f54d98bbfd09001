#!/usr/bin/env python3
"""Seconds from a run's start to each cell's phases, from its events.jsonl:
where a quick matrix's wall time goes (boot, mkfs, calibration, critical
span, lazy-init). Usage: scripts/phase-times.py RESULTS_DIR"""
import collections, json, sys

rows = [json.loads(l) for l in open(f"{sys.argv[1]}/events.jsonl")]
t0 = float(rows[0]["at"])
cells = collections.defaultdict(dict)
for r in rows:
    if r["event"] == "phase":
        cells[r["cell"]].setdefault(r["phase"], float(r["at"]) - t0)
    elif r["event"] == "finished":
        cells[r["cell"]]["finished"] = float(r["at"]) - t0
phases = ["launch", "boot", "verify", "mkfs", "mount", "lazyinit", "collect", "finished"]
print("| cell | " + " | ".join(phases) + " |")
print("|---|" + "---:|" * len(phases))
for c, p in sorted(cells.items()):
    print(f"| {c} | " + " | ".join(f"{p[k]:.1f}" if k in p else "" for k in phases) + " |")
print(f"\nwall: {max(p.get('finished', 0) for p in cells.values()):.1f} s")
