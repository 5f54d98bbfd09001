#!/usr/bin/env bash
# What the virtual clock holds to, measured (docs/virtual-clock.md):
#   scripts/virtual-clock-exact.sh OUT [BIN]
# 1. The same cell four times, twice on a quiet host and twice beside a
#    CPU hog per core and an fsync'd disk writer: z1, L, the cycle and the
#    thread's time, each run's per-group data kept.
# 2. A sweep of ebs:D across the steps of L = floor(10 * z1 * HZ), at
#    HZ=250 (x86_64) and HZ=100 (arm64), with the fix; without it, the
#    kernel's L is 10 x the tick boundaries its first zeroing spans (a
#    sub-tick zeroing is timed again until one spans a boundary): L=10
#    for a sub-tick zeroing or one spanning one boundary, L=20 for one
#    spanning two.
# 3. A target on a step, refused (exit 2) with its one line.
# OUT gets one results folder per run, table.md (the figures) and
# commands.txt (every command run). BIN: a lazyinit-bench binary
# (default: cargo's debug build).
set -euo pipefail
out=${1:?usage: scripts/virtual-clock-exact.sh OUT [BIN]}
cd "$(dirname "$0")/.."
bin=${2:-target/debug/lazyinit-bench}
mkdir -p "$out"
out=$(cd "$out" && pwd)
: >"$out/commands.txt"
load_pids=()
stop_load() {
  for p in "${load_pids[@]}"; do kill "$p" 2>/dev/null || true; done
  load_pids=()
  rm -f "$out/.writer"
}
trap stop_load EXIT
start_load() {
  for _ in $(seq "$(nproc)"); do
    (while :; do :; done) &
    load_pids+=($!)
  done
  (while :; do dd if=/dev/zero of="$out/.writer" bs=1M count=64 oflag=dsync status=none; done) &
  load_pids+=($!)
}
# run NAME ARGS...: one run into $out/NAME, its command kept.
run() {
  local name=$1
  shift
  echo "$bin run --clock virtual $* --out $out/$name" >>"$out/commands.txt"
  local t0=$SECONDS
  "$bin" run --clock virtual "$@" --out "$out/$name" --no-report >"$out/$name.log" 2>&1 || {
    echo "error: $name failed (log: $out/$name.log)" >&2
    tail -n 20 "$out/$name.log" >&2
    return 1
  }
  echo "$name: $((SECONDS - t0)) s" >&2
}
x86="--arch x86_64 --hz 250 --size 64GiB"
arm="--arch arm64 --hz 100 --size 64GiB"
for arch in x86 arm; do
  run "$arch-quiet-1" ${!arch} --variant fix
  run "$arch-quiet-2" ${!arch} --variant fix
  start_load
  run "$arch-loaded-1" ${!arch} --variant fix
  run "$arch-loaded-2" ${!arch} --variant fix
  stop_load
done
for d in 3.1 3.3 3.5 3.7 3.9; do
  run "sweep-x86-fix-ebs-${d}ms" $x86 --variant fix --storage-profile "ebs:${d}ms"
done
for d in 2.5 3.5 4.5; do
  run "sweep-arm-fix-ebs-${d}ms" $arm --variant fix --storage-profile "ebs:${d}ms"
done
run "x86-nofix-subtick-ebs-3.4ms" $x86 --variant nofix --storage-profile "ebs:3.4ms"
run "x86-nofix-one-boundary-ebs-5ms" $x86 --variant nofix --storage-profile "ebs:5ms"
run "x86-nofix-two-boundaries-ebs-7ms" $x86 --variant nofix --storage-profile "ebs:7ms"
run "arm-nofix-subtick-ebs-3.5ms" $arm --variant nofix --storage-profile "ebs:3.5ms"
run "arm-nofix-one-boundary-ebs-12.5ms" $arm --variant nofix --storage-profile "ebs:12.5ms"
run "arm-nofix-two-boundaries-ebs-19.5ms" $arm --variant nofix --storage-profile "ebs:19.5ms"
# A target on a step: refused before anything boots.
set +e
echo "$bin run --clock virtual $x86 --variant fix --storage-profile ebs:3.6ms --out $out/refused" >>"$out/commands.txt"
"$bin" run --clock virtual $x86 --variant fix --storage-profile ebs:3.6ms --out "$out/refused" >"$out/refused.log" 2>&1
rc=$?
set -e
echo "refused: exit $rc" >&2
# Kept small as scripts/publish-run.sh keeps a run (scripts/publish-cell.sh),
# and the repeats' traces compressed too (they show what ran inside each
# zeroing); no lock files.
. scripts/publish-cell.sh
for cell in "$out"/*/*/; do
  case $cell in
    */x86-quiet-*|*/x86-loaded-*|*/arm-quiet-*|*/arm-loaded-*) publish_cell "$cell" keep-trace ;;
    *) publish_cell "$cell" ;;
  esac
done
find "$out" -name '*.lock' -delete
python3 - "$out" "$rc" <<'PY'
import csv, glob, gzip, os, re, sys
from collections import Counter
out, rc = sys.argv[1], sys.argv[2]
lines = ["| run | accel | z1 ms | target ms | L | ms/group | cycles (most common, ms; the rest within) | lazyinit s |",
         "|---|---|---:|---:|---:|---:|---|---:|"]
same = {}  # the same cell's runs: z1 and cycles, to compare
for d in sorted(glob.glob(os.path.join(out, "*/results.csv"))):
    name = os.path.basename(os.path.dirname(d))
    for r in csv.DictReader(open(d)):
        g = glob.glob(os.path.join(os.path.dirname(d), r["cell_id"], "groups.csv*"))
        cyc = ""
        if g:
            opener = gzip.open if g[0].endswith(".gz") else open
            rows = list(csv.DictReader(opener(g[0], "rt")))
            t = [float(x["t_s"]) for x in rows]
            # The first group's interval starts at the mount, not a wake.
            # Nanoseconds where the trace had them (9 decimals in t_s).
            c = [round((b - a) * 1000, 6) for a, b in zip(t[1:], t[2:])]
            top, n = Counter(c).most_common(1)[0]
            far = max(abs(x - top) for x in c) * 1000
            cyc = f"{top:.6f} ({n} of {len(c)}; all within {far:.3f} us)"
            # x86-quiet-1, x86-loaded-2, ...: one cell, four runs.
            m = re.fullmatch(r"(x86|arm)-(quiet|loaded)-\d", name)
            key = m and m.group(1)
            if key:
                same.setdefault(key, []).append((name, float(r["z1_ms"]), c))
        lines.append(f"| {name} | {r['accel']} | {float(r['z1_ms']):.6f} | {r['z1_target_ms']} | {r['sleep_ticks']} | {float(r['ms_per_group']):.6f} | {cyc} | {float(r['lazyinit_s']):.6f} |")
ref = open(os.path.join(out, "refused.log")).read().strip().splitlines()
lines.append("")
lines.append(f"A target on a step (ebs:3.6ms at HZ=250): exit {rc}: `{ref[-1] if ref else ''}`")
lines.append("")
lines.append("The same cell run again: z1's spread over the runs, and each cycle's")
lines.append("largest difference from the same cycle of the first run.")
lines.append("")
lines.append("| cell | runs | z1 spread ns | cycles within us of run 1 (all) | cycles differing by more than 5 us |")
lines.append("|---|---:|---:|---:|---|")
for key, runs in sorted(same.items()):
    z = [r[1] for r in runs]
    base = runs[0][2]
    worst, far = 0.0, []
    for name, _, c in runs[1:]:
        d = [abs(a - b) * 1000 for a, b in zip(base, c)]
        if len(c) != len(base):
            far.append(f"{name}: {len(c)} cycles, not {len(base)}")
            continue
        worst = max([worst] + d)
        far += [f"{name} #{i + 2}: {x:.3f}" for i, x in enumerate(d) if x > 5]
    lines.append(f"| {key} | {len(runs)} | {(max(z) - min(z)) * 1e6:.0f} | {worst:.3f} | {', '.join(far) or 'none'} |")
open(os.path.join(out, "table.md"), "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
PY
