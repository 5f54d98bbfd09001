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
# run confined to CPU 0 with taskset, standing in for a host half as fast),
# slow (the whole run on CPU 0 with a busy loop pinned beside it: the
# guests get about half of one core), quota (the whole run in a cgroup v1
# `cpu` group of 0.8 CPU, cfs_quota_us 80000 per 100000, with 0.32 s of
# real-time runtime a second for the NBD servers' SCHED_FIFO threads: a
# 2-core host 2.5 times slower). Besides l-table.csv, attempts.csv has
# per cell and run the measured mounts, each first zeroing and why it
# missed (below or above the window), and scripts/l-held-summary.py's
# table says per scenario how many with-fix runs slept the target's L.
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
# The quota's cgroup: a name of this run's own, removed on exit (its
# tasks are gone by then: each run is waited for).
cg=""
drop_cgroup() { [ -n "$cg" ] && [ -d "$cg" ] && rmdir "$cg" 2>/dev/null || true; }
trap 'stop_busy; drop_cgroup' EXIT
trap 'exit 130' INT TERM
make_cgroup() {
  local root=/sys/fs/cgroup/cpu
  [ -w "$root/cpu.cfs_quota_us" ] || { echo "quota: no writable cgroup v1 cpu controller at $root (run as root on a cgroup v1 host)" >&2; exit 2; }
  cg="$root/lazyinit-quota-$$"
  mkdir "$cg"
  echo 100000 > "$cg/cpu.cfs_period_us"
  echo 80000 > "$cg/cpu.cfs_quota_us"
  [ -e "$cg/cpu.rt_runtime_us" ] && echo 320000 > "$cg/cpu.rt_runtime_us"
}

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
      slow)
        pre=(taskset -c 0)
        (taskset -c 0 sh -c 'while :; do :; done') & busy_pids+=($!) ;;
      quota)
        [ -n "$cg" ] || make_cgroup
        pre=(sh -c 'echo $$ > "$0/tasks" && exec "$@"' "$cg") ;;
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

# One line per cell and run: scenario, run, cell, L, z1, guest part, hold
# (l-table.csv); its measured mounts and each missed first zeroing, from
# the cell's storage.txt (attempt_N_z1_us, one per missed mount), with its
# cause on the row's window (attempts.csv); then the table of L per
# scenario and l-held-summary.py's of targets, mounts and misses.
python3 - "$out" <<'PY'
import csv, sys, os, collections
out = sys.argv[1]

def target_l(r):
    t = r.get("z1_target_ms") or ""
    if r["variant"] != "fix" or not t:
        return None
    return int(float(r["wait_mult"]) * float(t) / 1000 * int(r["hz"]) + 1e-9)

rows, att = [], []
for s, i, wall, d in csv.reader(open(os.path.join(out, "runs.csv"))):
    p = os.path.join(d, "results.csv")
    if not os.path.exists(p):
        continue
    for r in csv.DictReader(open(p)):
        cell = f"{r['arch']} HZ{r['hz']} {r['variant']}"
        rows.append((s, int(i), wall, cell, r['status'], r['sleep_ticks'], r.get('z1_ms', ''),
                     r.get('guest_part_ms', ''), r.get('zero_hold_ms', ''), r['ms_per_group']))
        lo, hi = r.get("z1_lo_ms") or "", r.get("z1_hi_ms") or ""
        missed = []
        st = os.path.join(d, r["cell_id"], "storage.txt")
        if os.path.exists(st):
            for line in open(st):
                k, _, v = line.strip().partition("=")
                if k.startswith("attempt_") and k.endswith("_z1_us"):
                    missed.append(int(v) / 1000)
        def cause(z):
            if not lo:
                return "?"
            return "low" if z < float(lo) else "high" if z >= float(hi) else "in"
        tl = target_l(r)
        att.append(dict(scenario=s, run=i, cell=cell, status=r["status"],
                        attempts=r.get("z1_attempts") or "", L=r["sleep_ticks"],
                        target_L="" if tl is None else tl,
                        held=r.get("profile_held") or "", z1_ms=r.get("z1_ms") or "",
                        window=f"{lo}-{hi}" if lo else "",
                        missed_z1_ms=" ".join(f"{z:.3f}" for z in missed),
                        missed_causes=" ".join(cause(z) for z in missed)))
with open(os.path.join(out, "l-table.csv"), "w") as f:
    w = csv.writer(f)
    w.writerow(["scenario", "run", "wall_s", "cell", "status", "L", "z1_ms", "guest_part_ms", "hold_ms", "ms_per_group"])
    w.writerows(sorted(rows))
if att:
    with open(os.path.join(out, "attempts.csv"), "w") as f:
        w = csv.DictWriter(f, fieldnames=list(att[0]))
        w.writeheader()
        w.writerows(att)
by = collections.defaultdict(list)
for s, i, wall, cell, st, L, *_ in rows:
    by[(cell, s)].append(L if st == "ok" else st)
scen = []
for s, *_ in rows:
    if s not in scen:
        scen.append(s)
print("| cell | " + " | ".join(scen) + " |")
print("|---|" + "---|" * len(scen))
for c in sorted({c for c, _ in by}):
    print(f"| {c} | " + " | ".join(",".join(by[(c, s)]) for s in scen) + " |")
PY
if [ -f "$out/attempts.csv" ]; then
  echo
  python3 scripts/l-held-summary.py "$out"
fi
