#!/usr/bin/env bash
# Fuzzes the parsers that read user input (docs/bad-input.md): the spec
# parser, the results CSV reader, groups.csv with the tick counting and the
# estimator, the guest's trace parsers, the site's input (SiteData JSON,
# rendered into pages) and `--shard auto`'s environment. Each target runs
# FUZZ_SECONDS (default 30) from a corpus seeded with the repository's own
# specs, results, traces and sites; a crash fails the script (exit 1) and leaves
# its input under fuzz/artifacts/<target>/. Prints the runs per target.
#
#   bash scripts/fuzz.sh            # every target, 30 s each
#   FUZZ_SECONDS=600 bash scripts/fuzz.sh groups
set -euo pipefail
cd "$(dirname "$0")/.."
secs="${FUZZ_SECONDS:-30}"
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(spec results_csv groups trace sitedata shard_env)
if ! command -v cargo-fuzz >/dev/null 2>&1; then
  cargo install --locked cargo-fuzz
fi
# Stable toolchain: cargo-fuzz's flags are nightly-only; no sanitizer
# (-s none) keeps the build on stable rustc's features, overflow checks on.
export RUSTC_BOOTSTRAP=1
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}/fuzz"
# FUZZ_PROFILE=dev (what scripts/test.sh uses for its 15 s a target): an
# unoptimised instrumented build, a few minutes cold instead of ~12, at a
# tenth of the executions a second; release (the default) for campaigns.
profile=()
case "${FUZZ_PROFILE:-release}" in
  release) ;;
  dev) profile=(--dev) ;;
  *) echo "error: FUZZ_PROFILE=${FUZZ_PROFILE}: use release or dev" >&2; exit 2 ;;
esac
fuzz() { (cd fuzz && cargo fuzz "$1" -s none --codegen-units 16 "${profile[@]}" "${@:2}"); }
fuzz build
# Seeds: what the parsers read in real use.
corpus="$(mktemp -d)"
trap 'rm -rf "$corpus"' EXIT
mkdir -p "$corpus"/{spec,results_csv,groups,trace,sitedata,shard_env}
n=0
for f in specs/*.toml; do cp "$f" "$corpus/spec/$((n++))"; done
for f in results/*/results.csv crates/lazyinit-report/tests/fixtures/*/results.csv; do
  head -c 20000 "$f" >"$corpus/results_csv/$((n++))"
done
# groups target: a selector byte (HZ, prefix), then the file.
for f in $(find results crates -name groups.csv | head -20); do
  { printf 'x'; head -c 20000 "$f"; } >"$corpus/groups/$((n++))"
done
for f in $(find results -name groups.csv.gz | head -10); do
  { printf 'y'; (zcat "$f" 2>/dev/null || true) | head -c 20000; } >"$corpus/groups/$((n++))"
done
for f in $(find results -name trace.txt | head -10); do
  head -c 20000 "$f" >"$corpus/trace/$((n++))"
done
for f in crates/lazyinit-site/tests/fixtures/*.json; do cp "$f" "$corpus/sitedata/$((n++))"; done
# shard_env: NAME=VALUE lines, as each engine sets them.
for env in 'LAZYINIT_SHARD=2/4' \
  $'JOB_COMPLETION_INDEX=3\nLAZYINIT_SHARD_COUNT=4' \
  $'CI_NODE_INDEX=1\nCI_NODE_TOTAL=2' \
  $'SLURM_ARRAY_TASK_ID=7\nSLURM_ARRAY_TASK_COUNT=4\nSLURM_ARRAY_TASK_MIN=1\nSLURM_ARRAY_TASK_STEP=2' \
  $'JOB_COMPLETION_INDEX=18446744073709551615\nLAZYINIT_SHARD_COUNT=4'; do
  printf '%s\n' "$env" >"$corpus/shard_env/$((n++))"
done
status=0
for t in "${targets[@]}"; do
  log="$corpus/$t.log"
  if fuzz run "$t" "$corpus/$t" -- -max_total_time="$secs" -rss_limit_mb=2048 >"$log" 2>&1; then
    echo "fuzz $t: $(grep -oE 'Done [0-9]+ runs in [0-9]+ second' "$log" | tail -1), no crash"
  else
    echo "fuzz $t: CRASH (input under fuzz/artifacts/$t/):" >&2
    grep -E "panicked|SUMMARY|Test unit written" "$log" >&2 || tail -20 "$log" >&2
    status=1
  fi
done
exit $status
