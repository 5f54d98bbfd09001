#!/usr/bin/env bash
# The kernels the test suite boots, built into the content-keyed cache
# before the tests start, while cargo builds the tests (scripts/test.sh):
#   scripts/ci-kernels.sh BIN LOG_DIR
# BIN is a lazyinit-bench binary (a copy: cargo may replace its own while
# this runs). One build tree per arch (Debian's 6.1: x86_64 at HZ=250,
# arm64 at HZ=100), the two trees side by side; in each, the QEMU profile
# without the fix, then with it (the released source, so the tree that the
# bisect test's git-tree slot is seeded from, crates/lazyinit-kernel/src/
# seed.rs, needs no variant switch when this script built it; after a
# first command, which builds the fix first, it is left at no fix and the
# seed switches: the tests make no assumption on the order). The cloud profile (the EC2 twin's
# kernels) is a delta on copies of the same trees that the twin tests build while
# other guest tests wait on their guests (.config/nextest.toml). A warm
# cache makes each line a cache hit of a second or less.
# Beside them, the bisect test's git history and a 7.x tree (seven()). Prints one line per kernel
# (and the history) with its wall time; on a failure, the failing
# build's output, exit 3.
set -euo pipefail
bin=$1 logs=$2
mkdir -p "$logs"
tree() {
  local arch=$1 hz=$2 log="$logs/kernels-$1.log"
  : >"$log"
  for pv in "qemu nofix" "qemu fix"; do
    set -- $pv
    local t0=$SECONDS
    if ! "$bin" kernel build --arch "$arch" --hz "$hz" --profile "$1" --variant "$2" >>"$log" 2>&1; then
      echo "error: building the $arch HZ=$hz $1 $2 kernel failed (log: $log):" >&2
      tail -n 40 "$log" >&2
      return 3
    fi
    echo "ci-kernels: $arch HZ=$hz $1 $2: $((SECONDS - t0)) s"
  done
}
# The bisect test's git history (crates/lazyinit-bench/tests/bisect_e2e.rs:
# Debian's 6.1 committed as 17 commits, culprit 11, commit 8 unbuildable;
# the same path and arguments, so that the test finds it made): the
# source unpacked and hashed into git, about 100 s that a cold run spent at
# the start of its longest test, here beside the trees' compilers.
history() {
  local t0=$SECONDS cache="${LAZYINIT_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/lazyinit-bench}"
  if ! nice -n 10 bash "$(dirname "$0")/bisect-history.sh" "$cache/bisect-ci/linux-17" 17 11 8 >"$logs/bisect-history.log" 2>&1; then
    echo "error: scripts/bisect-history.sh failed (log: $logs/bisect-history.log):" >&2
    tail -n 40 "$logs/bisect-history.log" >&2
    return 3
  fi
  echo "ci-kernels: the bisect test's 17-commit history: $((SECONDS - t0)) s"
}
# The QEMU of the virtual clock (lazyinit-bench qemu build: Debian's
# QEMU 10.0.2 source and the project's patches, two targets), which the
# virtual-clock tests boot; beside the trees, in the same cache.
emulator() {
  local t0=$SECONDS log="$logs/qemu-build.log"
  if ! nice -n 5 "$bin" qemu build >"$log" 2>&1; then
    echo "error: building the virtual clock's QEMU failed (log: $log):" >&2
    tail -n 40 "$log" >&2
    return 3
  fi
  echo "ci-kernels: the virtual clock's QEMU: $((SECONDS - t0)) s"
}
# A 7.x kernel from Debian's archive (the newest 7.x series there, its
# newest package: what crates/lazyinit-bench/tests/vclock_e2e.rs's 7.x
# test picks the same way), x86_64 at HZ=250 as released (the fix, timed
# with ktime_get_ns()): a third tree, niced below the two 6.1 trees that
# most tests wait on.
seven() {
  local t0=$SECONDS log="$logs/kernels-7.x.log" source
  if ! source=$("$bin" kernel sources --json 2>"$log" | python3 -c '
import json, sys
offers = json.load(sys.stdin)
num = lambda o: tuple(int(x) for x in o["series"].split("."))
seven = [o for o in offers if num(o)[0] >= 7]
newest = max(num(o) for o in seven)
print(next(o["source"] for o in seven if num(o) == newest))'); then
    echo "error: no 7.x kernel in Debian's archive's list (log: $log):" >&2
    tail -n 40 "$log" >&2
    return 3
  fi
  if ! nice -n 3 "$bin" kernel build --arch x86_64 --hz 250 --source "$source" --variant fix >>"$log" 2>&1; then
    echo "error: building the x86_64 HZ=250 $source fix kernel failed (log: $log):" >&2
    tail -n 40 "$log" >&2
    return 3
  fi
  echo "ci-kernels: x86_64 HZ=250 $source fix: $((SECONDS - t0)) s"
}
emulator &
q=$!
seven &
s=$!
tree x86_64 250 &
x=$!
tree arm64 100 &
a=$!
history &
h=$!
rc=0
wait "$x" || rc=$?
wait "$a" || rc=$?
wait "$h" || rc=$?
wait "$q" || rc=$?
wait "$s" || rc=$?
exit "$rc"
