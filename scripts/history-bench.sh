#!/usr/bin/env bash
# The history's benchmark (docs/history.md, "Benchmarks"): import of every
# run under results/, and `changes` over a generated history of RUNS runs
# x 8 cells (default 10,000), on SQLite and on PostgreSQL, each `changes`
# under `/usr/bin/time -v` (wall time and peak RSS); the size of each
# database. Writes results/history-bench/history-bench.txt (and prints it).
# Usage: scripts/history-bench.sh [BINARY] (default: a release build);
# RUNS=1000 scripts/history-bench.sh for a shorter history.
# Needs the test PostgreSQL (scripts/history-postgres.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN="${1:-target/release/lazyinit-bench}"
RUNS="${RUNS:-10000}"
OUT=results/history-bench
mkdir -p "$OUT"
exec > >(tee "$OUT/history-bench.txt") 2>&1
PG_BASE="$(bash scripts/history-postgres.sh)"
PG_PREFIX="${PG_BASE%/*}"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
psql_pg() { psql "$PG_BASE" -qtAc "$1"; }
fresh_pg() { PGOPTIONS="-c client_min_messages=warning" psql_pg "DROP DATABASE IF EXISTS $1" >/dev/null; psql_pg "CREATE DATABASE $1" >/dev/null; echo "$PG_PREFIX/$1"; }
secs() { local t0 t1; t0=$(date +%s.%N); "$@" >/dev/null; t1=$(date +%s.%N); echo "$t1 - $t0" | bc; }
# `/usr/bin/time -v` of a command: its wall time and peak RSS on one line,
# the command's first output line after them.
timed() {
  /usr/bin/time -v -o "$WORK/time" "$@" >"$WORK/out"
  echo "$(grep 'Elapsed (wall clock)' "$WORK/time" | sed 's/.*: //') wall, $(grep 'Maximum resident set size' "$WORK/time" | sed 's/.*: //') KB peak RSS, exit $(grep 'Exit status' "$WORK/time" | sed 's/.*: //'): $(head -1 "$WORK/out")"
}
# Run folders: results.csv beside spec.toml (import refuses a folder
# without its spec, e.g. results/bisect-ci-17's, a bisect's own output).
mapfile -t RUNS_DIRS < <(find results -name results.csv -printf '%h\n' | sort | while read -r d; do [ -f "$d/spec.toml" ] && echo "$d"; done)
echo "\$ scripts/history-bench.sh $*   (RUNS=$RUNS, $(date -u +%Y-%m-%dT%H:%MZ), commit $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- crates || echo ' + uncommitted changes'))"
echo "binary: $BIN ($("$BIN" --version 2>/dev/null || echo unknown))"
echo "host: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "results/ run folders: ${#RUNS_DIRS[@]} (with a spec.toml; $(find results -name results.csv | wc -l) results.csv in all)"
for backend in sqlite postgres; do
  if [ $backend = sqlite ]; then
    ALL="sqlite:$WORK/all.sqlite"; GEN="sqlite:$WORK/gen.sqlite"
  else
    ALL="$(fresh_pg bench_all)"; GEN="$(fresh_pg bench_gen)"
  fi
  echo "== $backend"
  echo "import of all results/ (new database): $(secs "$BIN" history import --db "$ALL" "${RUNS_DIRS[@]}") s"
  echo "import of all results/ again (nothing new): $(secs "$BIN" history import --db "$ALL" "${RUNS_DIRS[@]}") s"
  echo "generate $RUNS runs x 8 cells: $(secs "$BIN" history generate --runs "$RUNS" --db "$GEN" 2>/dev/null) s"
  for i in 1 2 3; do
    echo "changes over $RUNS runs x 8 cells, try $i: $(timed "$BIN" history changes --db "$GEN")"
  done
  echo "\$ /usr/bin/time -v $BIN history changes --db $GEN"
  /usr/bin/time -v "$BIN" history changes --db "$GEN" 2>"$WORK/time"
  grep -E 'Elapsed|Maximum resident|User time|System time|Exit status' "$WORK/time"
  if [ $backend = sqlite ]; then
    echo "database size, $RUNS runs: $(stat -c %s "$WORK/gen.sqlite") bytes"
  else
    echo "database size, $RUNS runs: $(psql "$GEN" -qtAc "SELECT SUM(pg_total_relation_size(t)) FROM unnest(ARRAY['runs','result_rows','alerts','schema_migrations']) t") bytes in its tables and indexes"
  fi
done
