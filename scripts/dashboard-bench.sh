#!/usr/bin/env bash
# Publish time and size of the dashboard (docs/dashboard.md, "Cost"): for
# the committed history (every results/ folder with a spec.toml) and for a
# generated history of RUNS nightly runs (default 1000). A measurement, not
# a test: it prints the numbers. Usage: scripts/dashboard-bench.sh [BIN] [RUNS]
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-target/debug/lazyinit-bench}
runs=${2:-1000}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
folders=()
for d in results/*/; do
  [ -f "$d/spec.toml" ] && folders+=("${d%/}")
done
"$bin" history import --db "sqlite:$work/committed.sqlite" "${folders[@]}" >/dev/null
"$bin" history generate --db "sqlite:$work/generated.sqlite" --runs "$runs" 2>/dev/null
for h in committed generated; do
  start=$(date +%s%N)
  "$bin" history publish --db "sqlite:$work/$h.sqlite" --out "$work/$h-site" 2>/dev/null
  end=$(date +%s%N)
  bytes=$(du -sb "$work/$h-site" | cut -f1)
  files=$(find "$work/$h-site" -type f | wc -l)
  ms=$(((end - start) / 1000000))
  printf '%s: %d ms, %s bytes in %s files\n' "$h" "$ms" "$bytes" "$files"
done
