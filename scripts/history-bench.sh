#!/usr/bin/env bash
# The history's benchmark (docs/history.md, "Benchmarks"): import of every
# run under results/, and `changes` over a generated history of 1,000 runs
# x 8 cells, on SQLite and on PostgreSQL; the size of each database.
# Usage: scripts/history-bench.sh [BINARY] (default: a release build).
# Needs the test PostgreSQL (scripts/history-postgres.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN="${1:-target/release/lazyinit-bench}"
PG_BASE="$(bash scripts/history-postgres.sh)"
PG_PREFIX="${PG_BASE%/*}"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
psql_pg() { psql "$PG_BASE" -qtAc "$1"; }
fresh_pg() { psql "$PG_BASE" -qtAc "SET client_min_messages = warning; DROP DATABASE IF EXISTS $1" >/dev/null; psql_pg "CREATE DATABASE $1" >/dev/null; echo "$PG_PREFIX/$1"; }
secs() { local t0 t1; t0=$(date +%s.%N); "$@" >/dev/null; t1=$(date +%s.%N); echo "$t1 - $t0" | bc; }
mapfile -t RUNS < <(find results -name results.csv -printf '%h\n' | sort)
echo "binary: $BIN ($("$BIN" --version 2>/dev/null || echo unknown))"
echo "host: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores"
echo "results/ run folders: ${#RUNS[@]}"
for backend in sqlite postgres; do
  if [ $backend = sqlite ]; then
    ALL="sqlite:$WORK/all.sqlite"; GEN="sqlite:$WORK/gen.sqlite"
  else
    ALL="$(fresh_pg bench_all)"; GEN="$(fresh_pg bench_gen)"
  fi
  echo "== $backend"
  echo "import of all results/ (new database): $(secs "$BIN" history import --db "$ALL" "${RUNS[@]}") s"
  echo "import of all results/ again (nothing new): $(secs "$BIN" history import --db "$ALL" "${RUNS[@]}") s"
  echo "generate 1000 runs x 8 cells: $(secs "$BIN" history generate --runs 1000 --db "$GEN") s"
  for i in 1 2 3; do
    echo "changes over 1000 runs x 8 cells, try $i: $(secs "$BIN" history changes --db "$GEN") s"
  done
  "$BIN" history changes --db "$GEN" | head -1
  if [ $backend = sqlite ]; then
    echo "database size, 1000 runs: $(stat -c %s "$WORK/gen.sqlite") bytes"
  else
    echo "database size, 1000 runs: $(psql "$GEN" -qtAc "SELECT SUM(pg_total_relation_size(t)) FROM unnest(ARRAY['runs','result_rows','alerts','schema_migrations']) t") bytes in its tables and indexes"
  fi
done
