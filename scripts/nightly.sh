#!/usr/bin/env bash
# A nightly in one command, for a host without a job engine (docs/history.md,
# "The nightly job"): run the spec, import the run into the history, judge it
# (the gate), look for change points, publish the site; exit as the gate does.
#
#   scripts/nightly.sh --db URL --site DIR [--spec SPEC] [--out FOLDER]
#                      [--junit FILE] [--results FOLDER] [-- RUN_ARGS...]
#
# --db       the history (sqlite:PATH or postgres://...; default: $LAZYINIT_HISTORY)
# --site     the site's folder (created, or replaced if a site was published there)
# --spec     the spec or preset to run (default: nightly)
# --out      the run's folder (default: results/nightly-<UTC date>)
# --junit    also write the gate's report as JUnit XML to FILE
# --results  judge this finished run folder instead of running one (no guest is
#            started: a rerun of the gate, or a run made elsewhere)
# after --   more arguments for `run` (e.g. --shard 1/2, --concurrency 4)
#
# Exit: the gate's (0 pass or unknown, 1 a fail or an error, 2 bad input).
# A run whose cells failed (run exits 1) still goes through the gate, which
# names the failed cells as errors (exit 1). A step that cannot be done (the
# run could not start, an import, changes or publish failed) stops the
# nightly with that step's exit code and says which step. The binary is
# $LAZYINIT_BENCH, else lazyinit-bench on PATH.
set -uo pipefail

bin="${LAZYINIT_BENCH:-lazyinit-bench}"
db="${LAZYINIT_HISTORY:-}"
site="" spec="nightly" out="" junit="" results=""
bad() { echo "nightly: $*" >&2; exit 2; }
while [ $# -gt 0 ]; do
  case "$1" in
    --db|--site|--spec|--out|--junit|--results)
      [ $# -ge 2 ] && [ -n "$2" ] || bad "$1 needs a value"
      case "$1" in
        --db) db="$2" ;; --site) site="$2" ;; --spec) spec="$2" ;;
        --out) out="$2" ;; --junit) junit="$2" ;; --results) results="$2" ;;
      esac
      shift 2 ;;
    --) shift; break ;;
    -h|--help) sed -n '2,24p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) bad "unknown argument \`$1\`: see $0 --help" ;;
  esac
done
[ -n "$db" ] || bad "give the history: --db sqlite:PATH or postgres://... (or set LAZYINIT_HISTORY)"
[ -n "$site" ] || bad "give the site's folder: --site DIR"
if [ -n "$results" ]; then
  [ -z "$out" ] && [ $# -eq 0 ] || bad "--results judges a finished run: --out and run arguments are for a new run"
  [ -f "$results/results.csv" ] || bad "--results $results: no results.csv there; give a run folder"
  folder="$results"
else
  folder="${out:-results/nightly-$(date -u +%Y-%m-%d)}"
fi
command -v "$bin" >/dev/null || bad "no $bin: build it (cargo build --release -p lazyinit-bench) and set LAZYINIT_BENCH to it"

step() { # NAME COMMAND...: runs it; stops the nightly on a code above OK.
  local name="$1"; shift
  echo "nightly: $name: $*" >&2
  "$@"
}

if [ -z "$results" ]; then
  step run "$bin" run "$spec" --out "$folder" "$@"
  code=$?
  # 1: some cell failed; its rows are there and the gate names them.
  if [ $code -ne 0 ] && { [ $code -ne 1 ] || [ ! -f "$folder/results.csv" ]; }; then
    echo "nightly: run exited $code: nothing to judge" >&2
    exit $code
  fi
fi
step import "$bin" history import --db "$db" "$folder" || { code=$?; echo "nightly: import exited $code" >&2; exit $code; }
check_args=(history check --db "$db" "$folder")
[ -n "$junit" ] && check_args+=(--format junit --out "$junit")
step check "$bin" "${check_args[@]}"
gate=$?
step changes "$bin" history changes --db "$db" || { code=$?; echo "nightly: changes exited $code" >&2; exit $code; }
step publish "$bin" history publish --db "$db" --out "$site" || { code=$?; echo "nightly: publish exited $code" >&2; exit $code; }
echo "nightly: the gate exited $gate" >&2
exit $gate
