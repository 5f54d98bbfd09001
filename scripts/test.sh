#!/usr/bin/env bash
# The test command: installs what the tests need (host packages, the
# virtualenvs of the EC2 API emulator and of the KCIDB validator), then runs
# every test of the workspace, including the ones that build kernels and
# boot QEMU guests. Expensive artifacts go to the content-keyed cache
# (~/.cache/lazyinit-bench), so a second run reuses them.
set -euo pipefail
cd "$(dirname "$0")/.."
# Root: guests' real-time priorities, the fault suite's tmpfs (a full host
# disk), dropbear's private mount namespace. A test that needs it fails
# without it rather than pass without checking.
if [ "$(id -u)" != 0 ]; then
  echo "error: scripts/test.sh runs as root (real-time priorities, tmpfs mounts in the fault suite): sudo scripts/test.sh" >&2
  exit 4
fi
# Where the time of a cold run goes (docs/ci.md): the two kernel trees are
# most of its CPU, so they start as soon as the harness is built and run
# beside everything else that does not boot a guest: the emulators' and
# checkers' installs, the fuzzing, cargo's build of the tests. The tests
# start when both are done.
# No incremental compilation unless asked: CI builds a fresh clone, so
# the incremental caches are written and never read (the workspace's own
# crates: 176 CPU-s without, against about 230 with, on this machine).
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"
work=$(mktemp -d "${TMPDIR:-/tmp}/lazyinit-test.XXXXXX") # private (0700)
kernels=
trap '[ -n "$kernels" ] && kill -- -"$kernels" 2>/dev/null; rm -rf "$work"' EXIT
t_start=$SECONDS
# The machine's busy CPU-seconds (all processes: /proc/stat's first line,
# idle and iowait left out), so that each phase's stamp says how much of
# two cores it used.
busy() { awk '/^cpu / {printf "%d", ($2 + $3 + $4 + $7 + $8 + $9) / 100}' /proc/stat; }
busy0=$(busy)
stamp() { echo "test.sh: +$((SECONDS - t_start)) s: $* (machine CPU +$(( $(busy) - busy0 )) s)"; }
# The harness (without the AWS SDK: 1.5 min, not 6) beside the host
# packages, when cargo has what it needs already (as scripts/first-run.sh).
if command -v cc >/dev/null 2>&1 && command -v pkg-config >/dev/null 2>&1 \
  && pkg-config --exists openssl 2>/dev/null; then
  cargo build -q -p lazyinit-bench >"$work/harness.log" 2>&1 &
  harness=$!
  bash scripts/setup-host.sh
  if ! wait "$harness"; then
    cat "$work/harness.log" >&2
    echo "error: cargo build -p lazyinit-bench failed (above)" >&2
    exit 3
  fi
else
  bash scripts/setup-host.sh
  cargo build -q -p lazyinit-bench
fi
stamp "host packages and the harness"
target="${CARGO_TARGET_DIR:-$PWD/target}"
# A copy: cargo replaces target/debug/lazyinit-bench when it builds the
# tests with the EC2 feature.
cp "$target/debug/lazyinit-bench" "$work/lazyinit-bench"
set -m
bash scripts/ci-kernels.sh "$work/lazyinit-bench" "$work" >"$work/kernels.out" 2>&1 &
kernels=$!
set +m
if [ -f scripts/ec2-emulator.sh ]; then
  bash scripts/ec2-emulator.sh
fi
# chromium: the dashboard's test opens the published site in it.
bash scripts/chromium.sh
# kcidb-io: the KCIDB export tests validate real exports with it.
bash scripts/kcidb-validator.sh >/dev/null
# check-jsonschema and kubernetes-validate: the job files in examples/
# are checked with them (crates/lazyinit-bench/tests/job_files.rs).
bash scripts/job-validators.sh >/dev/null
if ! command -v cargo-nextest >/dev/null 2>&1 && ! cargo nextest --version >/dev/null 2>&1; then
  cargo install --locked cargo-nextest
fi
# terraform/ offline checks (fmt, checkov); the registry is unreachable.
# A missing terraform fails the tests: the check never passes by not running.
if ! command -v terraform >/dev/null 2>&1; then
  echo "error: terraform is not installed, so terraform/check.sh (fmt, checkov) cannot run: install terraform >= 1.5 (https://developer.hashicorp.com/terraform/install)" >&2
  exit 4
fi
bash terraform/check.sh
# Fuzzing (docs/bad-input.md) is a test of the suite
# (crates/lazyinit-core/tests/fuzz_parsers.rs: scripts/fuzz.sh, 15 s a
# target, an unoptimised instrumented build), so that it runs beside the
# guest tests, whose cores are mostly idle, not beside the kernel trees.
# cargo-fuzz is installed here, while cargo's other builds run.
if ! command -v cargo-fuzz >/dev/null 2>&1; then
  cargo install -q --locked cargo-fuzz
fi
# The history's PostgreSQL backend is tested against a real server: a
# cluster of our own on loopback (scripts/history-postgres.sh). Its tests
# fail, never skip, without LAZYINIT_TEST_POSTGRES.
LAZYINIT_TEST_POSTGRES="$(bash scripts/history-postgres.sh)"
export LAZYINIT_TEST_POSTGRES
# The nightly's Slurm job files run on a real Slurm: a single node of our
# own on loopback (scripts/slurm.sh: slurmctld, slurmd, munge). Its test
# fails, never skips, without LAZYINIT_TEST_SLURM.
LAZYINIT_TEST_SLURM="$(bash scripts/slurm.sh)"
export LAZYINIT_TEST_SLURM
stamp "checkers, emulators, PostgreSQL, Slurm"
# --timings: cargo's report of what each crate cost (target/cargo-timings/;
# scripts/ci-cold.sh keeps it).
cargo nextest run --workspace --features lazyinit-bench/ec2 --no-run --timings
stamp "the tests built"
# The kernels: tests that boot guests measure CPU-timed things, so none
# starts while a kernel tree compiles.
kernels_rc=0
wait "$kernels" || kernels_rc=$?
kernels=
cat "$work/kernels.out"
if [ "$kernels_rc" != 0 ]; then
  echo "error: the kernels the tests boot did not build (above); the tests need them" >&2
  exit 3
fi
stamp "the kernels built"
# Debug builds: the AWS SDK takes ~4 min in debug and ~11 in release.
# The harness's EC2 provider is a feature (off for the local default); the
# tests build it, and its tests fail without it rather than skip.
# Every test's CPU (scripts/cpu-runner.sh, nextest's target runner): to
# $LAZYINIT_CPU_LOG when the caller names one (scripts/ci-cold.sh keeps
# it), and the tests that used most of it are printed at the end.
cpu_log="${LAZYINIT_CPU_LOG:-$work/cpu.tsv}"
: >"$cpu_log"
host=$(rustc -vV | awk '/^host:/ {print $2}' | tr 'a-z-' 'A-Z_')
rc=0
env LAZYINIT_CPU_LOG="$cpu_log" "CARGO_TARGET_${host}_RUNNER=$PWD/scripts/cpu-runner.sh" \
  cargo nextest run --workspace --features lazyinit-bench/ec2 --no-fail-fast "$@" || rc=$?
sort -t "$(printf '\t')" -k1,1 -rn "$cpu_log" | awk 'NR <= 20' | sed 's/^/test-cpu: /'
awk -F '\t' '{ s += $1; n++ } END { printf "test-cpu: %.0f CPU-s in %d tests\n", s, n }' "$cpu_log"
stamp "the tests ran (exit $rc)"
exit "$rc"
