#!/usr/bin/env bash
# Issue 51 item 7, the adoption: the tickless kernel on the virtual clock
# with QEMU patch 0004 (x-net-pace), before the harness's kernels turn
# tickless. BIN: a build with patch 0004 and the periodic base.config
# (the tickless kernels come from ../configs via --kernel-config, as in
# the study). Every run's CPU-seconds (user + sys of `run` and its QEMU)
# and wall seconds go to cpu.tsv.
#   bash results/nohz-study/pace/run.sh BIN
set -euo pipefail
bin=$(realpath "${1:?usage: run.sh BIN}")
here=$(cd "$(dirname "$0")" && pwd)
cfgs=$here/../configs
[ -f "$here/cpu.tsv" ] || printf 'run\ttick\tcpu_s\twall_s\n' >"$here/cpu.tsv"
run() {
  local name=$1 tick=$2
  shift 2
  local extra=()
  [ "$tick" = nohz ] && extra=(--kernel-config "$cfgs/$CFG")
  echo "$bin run --clock virtual $* ${extra[*]} --out $here/$name --no-report" >>"$here/commands.txt"
  local t0=$SECONDS rc=0
  /usr/bin/time -f '%U %S' -o "$here/.time" "$bin" run --clock virtual "$@" "${extra[@]}" \
    --out "$here/$name" --no-report >"$here/$name.log" 2>&1 || rc=$?
  printf '%s\t%s\t%s\t%s\trc=%s\n' "$name" "$tick" \
    "$(awk '{printf "%.1f", $1 + $2}' "$here/.time")" "$((SECONDS - t0))" "$rc" >>"$here/cpu.tsv"
  rm -f "$here/.time"
  find "$here/$name" -name 'groups.csv' -exec gzip -f {} +
  find "$here/$name" -name '.lock' -delete
  echo "$name: rc=$rc $((SECONDS - t0)) s" >&2
}
arm="--arch arm64 --hz 100"
x86="--arch x86_64 --hz 250"
CFG=nohz-arm64-hz100.config
for i in 1 2 3; do run "arm-fix-64GiB-nohz-$i" nohz $arm --variant fix --size 64GiB; done
run arm-nofix-64GiB-nohz nohz $arm --variant nofix --size 64GiB
run arm-nofix-2TiB-nohz nohz $arm --variant nofix --size 2TiB
run arm-nofix-2TiB-periodic periodic $arm --variant nofix --size 2TiB
CFG=nohz-x86_64-hz250.config
run x86-fix-64GiB-nohz nohz $x86 --variant fix --size 64GiB
run x86-fix-64GiB-periodic periodic $x86 --variant fix --size 64GiB
