#!/usr/bin/env bash
# A cold CI run, measured: `bash .ci/run` on a fresh clone of HEAD with an
# empty kernel/image cache and an empty cargo target (cargo's registry and
# the host's packages kept), under /usr/bin/time -v, with the phases'
# times (scripts/test.sh's `+N s` lines) and every test's time:
#   scripts/ci-cold.sh OUT_DIR        # e.g. results/ci-cold
#   CI_WARM=1 scripts/ci-cold.sh OUT  # the same, with the cache and target of
#                                     # the last cold run kept (a warm run)
# Writes OUT_DIR/run.txt (everything the run printed, then time's report),
# OUT_DIR/tests.tsv (seconds, test; slowest first), OUT_DIR/cpu.tsv (each
# test's CPU-seconds, binary, test: scripts/cpu-runner.sh), OUT_DIR/summary.txt,
# OUT_DIR/cargo-timing.html (cargo's per-crate build times of the tests),
# OUT_DIR/junit.xml and OUT_DIR/timeline.tsv (each test's start, from the
# tests phase's start, and its duration).
# Run it on a quiet machine: the figures are the machine's.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
out=$(realpath -m "${1:?usage: scripts/ci-cold.sh OUT_DIR}")
base="${CI_COLD_BASE:-${XDG_CACHE_HOME:-$HOME/.cache}/lazyinit-ci-cold}"
mkdir -p "$out" "$base"
clone="$base/clone"
cache="$base/cache"
target="$base/target"
if [ -z "${CI_WARM:-}" ]; then
  rm -rf "$clone" "$cache" "$target"
else
  rm -rf "$clone"
fi
mkdir -p "$cache" "$target"
git clone -q "$here" "$clone"
commit=$(git -C "$clone" rev-parse HEAD)
kind=cold
[ -z "${CI_WARM:-}" ] || kind=warm
{
  echo "# bash .ci/run ($kind) on a clone of $commit, $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo)"
  echo "# LAZYINIT_CACHE_DIR=$cache CARGO_TARGET_DIR=$target ($( [ "$kind" = cold ] && echo empty || echo 'kept from the last run'))"
} >"$out/run.txt"
# The machine's busy CPU-seconds (every process), to tell the run's own CPU
# from what else ran beside it: a measurement is the machine's only when
# the rest is near 0.
busy() { awk '/^cpu / {printf "%d", ($2 + $3 + $4 + $7 + $8 + $9) / 100}' /proc/stat; }
busy0=$(busy)
start=$(date +%s)
rc=0
(cd "$clone" && LAZYINIT_CACHE_DIR="$cache" CARGO_TARGET_DIR="$target" \
  LAZYINIT_CPU_LOG="$out/cpu.tsv" /usr/bin/time -v bash .ci/run) >>"$out/run.txt" 2>&1 || rc=$?
wall=$(( $(date +%s) - start ))
# cargo's report of the test build, crate by crate (scripts/test.sh --timings).
cp "$target/cargo-timings/cargo-timing.html" "$out/cargo-timing.html" 2>/dev/null || true
# nextest's JUnit report (.config/nextest.toml): each test's start and
# duration, as timeline.tsv (seconds from the first test's start, seconds,
# test; in start order): which tests ran beside which.
for j in "$target/nextest/default/junit.xml" "$clone/target/nextest/default/junit.xml"; do
  if [ -f "$j" ]; then
    cp "$j" "$out/junit.xml"
    python3 - "$j" >"$out/timeline.tsv" <<'PY'
import sys, xml.etree.ElementTree as ET
from datetime import datetime
cases = []
for tc in ET.parse(sys.argv[1]).getroot().iter("testcase"):
    t = datetime.fromisoformat(tc.get("timestamp"))
    cases.append((t, float(tc.get("time")), tc.get("classname") + " " + tc.get("name")))
t0 = min(c[0] for c in cases)
for t, d, n in sorted(cases):
    print(f"{(t - t0).total_seconds():.1f}\t{d:.1f}\t{n}")
PY
    break
  fi
done
machine=$(( $(busy) - busy0 ))
echo "rc=$rc wall=${wall}s" >>"$out/run.txt"
# Every test's time, slowest first.
grep -E '^ +(PASS|FAIL|SIGSEGV|SIGABRT|TIMEOUT|LEAK)[A-Z-]* \[' "$out/run.txt" \
  | sed -E 's/^ +([A-Z-]+) \[ *([0-9.]+)s\] \( *[0-9]+\/[0-9]+\) (.*)$/\2\t\1\t\3/' \
  | sort -rn >"$out/tests.tsv" || true
user=$(awk -F': ' '/User time \(seconds\)/ {print $2}' "$out/run.txt")
sys=$(awk -F': ' '/System time \(seconds\)/ {print $2}' "$out/run.txt")
cores=$(nproc)
{
  echo "commit $commit ($kind)"
  echo "exit $rc, wall $wall s ($((wall / 60)) min $((wall % 60)) s)"
  awk -v u="$user" -v s="$sys" -v c="$cores" -v w="$wall" 'BEGIN {
    printf "cpu: user %.0f s + sys %.0f s = %.0f s on %d cores\n", u, s, u + s, c
    printf "wall / (cpu / cores) = %.2f\n", w / ((u + s) / c) }'
  awk -v u="$user" -v s="$sys" -v m="$machine" 'BEGIN {
    printf "machine: %d CPU-s busy in all, %.0f of it not the run'"'"'s (other processes beside it; PostgreSQL and the twin'"'"'s guests are counted here)\n", m, m - u - s }' 
  echo "phases (scripts/test.sh):"
  grep -E '^test\.sh: \+' "$out/run.txt" | sed 's/^/  /'
  echo "kernels (scripts/ci-kernels.sh):"
  grep -E '^ci-kernels: ' "$out/run.txt" | sed 's/^/  /'
  grep -E '^ +Summary \[' "$out/run.txt" | sed 's/^ */nextest: /'
  echo "slowest tests:"
  head -n 15 "$out/tests.tsv" | sed 's/^/  /'
  if [ -s "$out/cpu.tsv" ]; then
    awk -F '\t' '{ s += $1 } END { printf "tests: %.0f CPU-s (scripts/cpu-runner.sh); most CPU:\n", s }' "$out/cpu.tsv"
    sort -t "$(printf '\t')" -k1,1 -rn "$out/cpu.tsv" | head -n 15 | sed 's/^/  /'
  fi
} >"$out/summary.txt"
cat "$out/summary.txt"
exit "$rc"
