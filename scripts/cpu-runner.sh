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
    child=$(tail -n 1 "$f")
    rm -f "$f"
    secs() { awk -v t="$1" 'BEGIN { split(t, p, "m"); sub("s", "", p[2]); printf "%.2f", p[1] * 60 + p[2] }'; }
    u=$(secs "${child% *}")
    s=$(secs "${child#* }")
    bin=$(basename "$1")
    printf '%s\t%s\t%s\n' "$(awk -v u="$u" -v s="$s" 'BEGIN { printf "%.1f", u + s }')" \
      "${bin%-*}" "$name" >>"$LAZYINIT_CPU_LOG"
  fi
fi
if [ "$rc" -gt 128 ] && [ "$rc" -lt 160 ]; then
  trap - "$((rc - 128))" 2>/dev/null || true
  kill -s "$((rc - 128))" $$
fi
exit "$rc"
