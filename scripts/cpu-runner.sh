#!/usr/bin/env bash
# nextest's target runner in scripts/test.sh: runs one test binary, then
# appends the CPU it used (user + sys seconds of the test process and of
# every process it waited for: the harness, its guests, make) to
# $LAZYINIT_CPU_LOG as `seconds<TAB>binary<TAB>test`, so that a run says
# where its CPU went, not only its wall time (docs/ci.md). The listing
# runs (`--list`) are not logged; the exit status and a fatal signal are
# passed on as they were.
"$@"
rc=$?
if [ -n "${LAZYINIT_CPU_LOG:-}" ]; then
  name=
  prev=
  for a in "$@"; do
    [ "$prev" = --exact ] && name=$a
    prev=$a
  done
  if [ -n "$name" ]; then
    # times: this shell's user and sys, then its children's. Run in this
    # shell (a pipe or $(...) would run it in a subshell, whose children
    # are none), into a private file.
    f=$(mktemp "${TMPDIR:-/tmp}/cpu-runner.XXXXXX")
    times >"$f"
    # Its last line: the children's user and sys, as `1m2.345s 0m0.678s`.
    cpu=$(awk 'END { split($1 $2, t, /[ms]/); printf "%.1f", t[1] * 60 + t[2] + t[3] * 60 + t[4] }' "$f")
    rm -f "$f"
    bin=$(basename "$1")
    printf '%s\t%s\t%s\n' "$cpu" "${bin%-*}" "$name" >>"$LAZYINIT_CPU_LOG"
  fi
fi
if [ "$rc" -gt 128 ] && [ "$rc" -lt 160 ]; then
  trap - "$((rc - 128))" 2>/dev/null || true
  kill -s "$((rc - 128))" $$
fi
exit "$rc"
