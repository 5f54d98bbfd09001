#!/usr/bin/env python3
"""The nightly's estimates against the full run of the same cells: does each
95% interval hold the full run's total, and how far is each point estimate
(from the first group, and in lazyinit_s)? Run from the repository root."""
import csv

def rows(path):
    return {(r['arch'], r['variant'], int(r['volume_bytes']) >> 40): r
            for r in csv.DictReader(open(path))}

full = rows('results/reported-baseline/results.csv')
live = rows('results/nightly-live/results.csv')
print("| cell | full run | nightly (95% PI) | holds | from first group | lazyinit_s | groups traced |")
print("|---|---:|---:|---|---:|---:|---:|")
held = 0
for k in sorted(live):
    f, l = full[k], live[k]
    ft, lt = float(f['lazyinit_s']), float(l['lazyinit_s'])
    lo, hi = float(l['lazyinit_lo_s']), float(l['lazyinit_hi_s'])
    ff = ft - float(f['first_group_s'])
    lf = lt - float(l['first_group_s'])
    holds = lo <= ft <= hi
    held += holds
    print(f"| {k[0]} {k[1]} {k[2]} TiB | {ft:.1f} | {lt:.1f} ({lo:.1f}-{hi:.1f}) | "
          f"{'yes' if holds else 'NO'} | {100 * (lf - ff) / ff:+.2f}% | "
          f"{100 * (lt - ft) / ft:+.2f}% | {l['estimate_groups'] or l['traced_groups']} |")
print(f"\nheld {held}/{len(live)}")
