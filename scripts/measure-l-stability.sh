#!/usr/bin/env bash
# Measures how stable each cell's sleep L is (issue: "the same cell must
# sleep the same L on any machine and at any concurrency"): N runs of the
# quick preset in each of four conditions, then a table of L and z1 per
# cell and run. Every run's results.csv (and its per-cell folders) stays
# under OUT for anyone to check.
#
#   scripts/measure-l-stability.sh OUT [N] [SCENARIO...]
#
# Scenarios: matrix (the 4 cells at once), alone (--alone: one at a time),
# busy (a busy loop on every core for the whole run), onecore (the whole
# run confined to CPU 0 with taskset, standing in for a host half as fast).
set -euo pipefail
out="${1:?usage: $0 OUT [N] [SCENARIO...]}"
n="${2:-5}"
shift $(( $# >= 2 ? 2 : $# ))
scenarios=("$@")
[ ${#scenarios[@]} -gt 0 ] || scenarios=(matrix alone busy onecore)
cd "$(dirname "$0")/.."
bin="${LAZYINIT_BENCH:-target/debug/lazyinit-bench}"
[ -x "$bin" ] || cargo build -q -p lazyinit-bench
mkdir -p "$out"

busy_pids=()
stop_busy() { for p in "${busy_pids[@]:-}"; do [ -n "$p" ] && kill "$p" 2>/dev/null || true; done; busy_pids=(); }
trap stop_busy EXIT

for s in "${scenarios[@]}"; do
  for i in $(seq 1 "$n"); do
    dir="$out/$s-$i"
    args=(run quick --no-report --out "$dir")
    pre=()
    case "$s" in
      matrix) ;;
      alone) args+=(--alone) ;;
      busy)
        for _ in $(seq 1 "$(nproc)"); do (while :; do :; done) & busy_pids+=($!); done ;;
      onecore) pre=(taskset -c 0) ;;
      *) echo "unknown scenario $s" >&2; exit 2 ;;
    esac
    t0=$(date +%s.%N)
    "${pre[@]}" "$bin" "${args[@]}" > "$out/$s-$i.log" 2>&1 || echo "$s-$i: exit $?" >&2
    t1=$(date +%s.%N)
    stop_busy
    # --alone writes into <out>-alone.
    [ -d "$dir-alone" ] && dir="$dir-alone"
    echo "$s,$i,$(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.1f", b-a}'),$dir" >> "$out/runs.csv"
  done
done

# One line per cell and run: scenario, run, cell, L, z1, guest part, hold.
python3 - "$out" <<'PY'
import csv, sys, os, collections
out = sys.argv[1]
rows = []
for s, i, wall, d in csv.reader(open(os.path.join(out, "runs.csv"))):
    p = os.path.join(d, "results.csv")
    if not os.path.exists(p):
        continue
    for r in csv.DictReader(open(p)):
        cell = f"{r['arch']} HZ{r['hz']} {r['variant']}"
        rows.append((s, int(i), wall, cell, r['status'], r['sleep_ticks'], r.get('z1_ms', ''),
                     r.get('guest_part_ms', ''), r.get('zero_hold_ms', ''), r['ms_per_group']))
with open(os.path.join(out, "l-table.csv"), "w") as f:
    w = csv.writer(f)
    w.writerow(["scenario", "run", "wall_s", "cell", "status", "L", "z1_ms", "guest_part_ms", "hold_ms", "ms_per_group"])
    w.writerows(sorted(rows))
by = collections.defaultdict(list)
for s, i, wall, cell, st, L, *_ in rows:
    by[(cell, s)].append(L if st == "ok" else st)
cells = sorted({c for c, _ in by})
scen = []
for s, *_ in rows:
    if s not in scen:
        scen.append(s)
print("| cell | " + " | ".join(scen) + " |")
print("|---|" + "---|" * len(scen))
for c in cells:
    print(f"| {c} | " + " | ".join(",".join(by[(c, s)]) for s in scen) + " |")
PY
