#!/usr/bin/env bash
# Makes a finished results folder publishable in the repository (and stages
# it: results/*/ is ignored otherwise): keeps what
# lets someone check every figure, compresses the per-group data, drops
# what is large and redundant, and writes the report beside it.
#
#   scripts/publish-run.sh results/<run>
#
# Kept per cell: groups.csv.gz (every group's trace time and zeroing time),
# calibration.csv and storage.txt (the storage calibration), facts.txt (what
# the guest said it is), qemu.cmdline, error.txt, and the last 60 lines of
# console.log (console-tail.log). Left out: trace.txt (the raw ftrace text:
# 5-6 MB per 3 TiB cell; groups.csv carries every group event and zeroing it
# holds), the full console.log (boot messages), qemu.stderr when empty,
# sockets, the run's .lock. Kept per run: results.csv, spec.toml, command.txt, run.log,
# events.jsonl, report.md, report.svg, report-cycles.svg.
set -euo pipefail
dir="${1:?usage: $0 RESULTS_DIR}"
[ -f "$dir/results.csv" ] || { echo "error: $dir/results.csv not found" >&2; exit 2; }
cd "$(dirname "$0")/.."
bin="${LAZYINIT_BENCH:-target/debug/lazyinit-bench}"
. scripts/publish-cell.sh
for cell in "$dir"/*/; do
  publish_cell "$cell"
done
# The run's lock holds the PID of a harness long gone.
rm -f "$dir/.lock"
"$bin" report "$dir/results.csv" --out "$dir/report.md" --svg "$dir/report.svg"
du -sh "$dir"
# results/*/ is ignored (scratch runs stay out of git); a published folder
# is added by name, so the commit that cites it carries it.
if git -C "$(dirname "$0")/.." rev-parse --git-dir >/dev/null 2>&1; then
  git add -f -- "$dir"
  echo "staged $dir (git add -f): commit it with its NOTES.md"
fi
