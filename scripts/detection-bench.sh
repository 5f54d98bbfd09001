#!/usr/bin/env bash
# Detection on generated histories (docs/history.md, "Measured on generated
# histories"): crates/lazyinit-history/examples/detection_bench.rs over
# RUNS runs x 8 cells (default 10,000), uniform and heavy-tailed noise,
# seeds 1 2 3 (the tests use 11, 12 and 28): the false change points at
# the defaults, the planted changes, the detection delay of the gate and
# of `changes`, the gate's false failures; under `/usr/bin/time -v`.
# Writes results/history-bench/detection.txt (and prints it).
# Usage: scripts/detection-bench.sh [RUNS [SEED...]]
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=results/history-bench
mkdir -p "$OUT"
TARGET="${CARGO_TARGET_DIR:-target}"
CARGO_BUILD_JOBS="${CARGO_BUILD_JOBS:-1}" nice -n 19 cargo build -q --release -p lazyinit-history --example detection_bench
exec > >(tee "$OUT/detection.txt") 2>&1
echo "\$ scripts/detection-bench.sh $*   ($(date -u +%Y-%m-%dT%H:%MZ), commit $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- crates || echo ' + uncommitted changes'); host $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg))"
/usr/bin/time -v "$TARGET/release/examples/detection_bench" "$@" 2>"$OUT/.time" || { cat "$OUT/.time"; exit 1; }
grep -E 'Elapsed|Maximum resident|Exit status' "$OUT/.time"
rm -f "$OUT/.time"
