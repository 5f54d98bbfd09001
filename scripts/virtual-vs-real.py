#!/usr/bin/env python3
"""The reported table on the virtual clock beside the model, the real
clock's table and the 2021 report (docs/virtual-clock.md):

    scripts/virtual-vs-real.py VIRTUAL_RUN [REAL_RUN] [REPORTED_2021_CSV]

VIRTUAL_RUN is a results folder of `run reported --clock virtual` (its
report.md gives the model's figure of each cell); REAL_RUN defaults to
results/reported-series-stable (its Debian 6.1 rows, n = 3), the 2021
figures to results/reported-2021.csv. Prints a markdown table.
"""
import csv
import os
import statistics
import sys


def cells_of(path, source=None):
    out = {}
    for r in csv.DictReader(open(os.path.join(path, "results.csv"))):
        if r["status"] != "ok" or (source and r["kernel_source"] != source):
            continue
        key = (r["arch"], r["variant"], int(r["volume_bytes"]))
        out.setdefault(key, []).append((float(r["lazyinit_s"]), r["sleep_ticks"], r["accel"]))
    return out


def models(path):
    """Model figure per cell from the run's report.md Cells table."""
    out = {}
    for line in open(os.path.join(path, "report.md")):
        f = [x.strip() for x in line.strip().strip("|").split("|")]
        if len(f) < 12 or not f[0].startswith(("arm64", "x86_64")):
            continue
        words = f[0].split()
        arch, variant, size = words[0].rstrip(","), words[3], words[4]
        out[(arch, variant, size)] = float(f[11])
    return out


def main():
    virt = sys.argv[1]
    real = sys.argv[2] if len(sys.argv) > 2 else "results/reported-series-stable"
    ref = sys.argv[3] if len(sys.argv) > 3 else "results/reported-2021.csv"
    v, r, m = cells_of(virt), cells_of(real, "debian-6.1"), models(virt)
    y = {(x["arch"], x["variant"], int(x["volume_bytes"])): float(x["lazyinit_s"])
         for x in csv.DictReader(open(ref))}
    print("| cell | virtual (L) | model | vs model | real clock, 6.1, n=3 (L) | 2021 | virtual vs 2021 |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for key in sorted(v, key=lambda k: (k[1] == "fix", k[2], k[0])):
        arch, variant, size = key
        tib = f"{size >> 40}TiB"
        (s, L, accel), = v[key]
        mod = m.get((arch, variant, tib))
        reals = r.get(key, [])
        real_txt = "–"
        if reals:
            xs = [x[0] for x in reals]
            ls = ",".join(sorted({x[1] for x in reals}))
            real_txt = f"{statistics.mean(xs):.1f} ({min(xs):.1f}-{max(xs):.1f}; L={ls})"
        ref_s = y.get(key)
        print(
            f"| {arch} {'with' if variant == 'fix' else 'without'} fix {tib} ({accel}) "
            f"| {s:.1f} ({L}) | {mod:.1f} | {100 * (s - mod) / mod:+.1f}% "
            f"| {real_txt} | {ref_s:.0f} | {100 * (s - ref_s) / ref_s:+.1f}% |"
        )


if __name__ == "__main__":
    main()
