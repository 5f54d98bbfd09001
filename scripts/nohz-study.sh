#!/usr/bin/env bash
# Should the guest kernels be tickless (CONFIG_NO_HZ_IDLE, as Debian's and
# Amazon Linux's kernels are)? Issue 51, item 7 (docs/virtual-clock.md,
# "A periodic tick or a tickless kernel"):
#   scripts/nohz-study.sh OUT [BIN]
#   NOHZ_PART=virtual|cost|real scripts/nohz-study.sh OUT [BIN]   # a part
#     (the real clock's runs and the host cost's 2 TiB runs want a quiet
#     host; `cost` runs the 2 TiB runs again, replacing those OUT holds;
#     the table covers every run OUT holds)
# The same cells with the harness's kernel (a periodic tick: allnoconfig
# plus kernels/fragments) and with that kernel's own resolved config with
# only the tick changed (NO_HZ_IDLE), given to `run --kernel-config`:
# - on the virtual clock: 64 GiB with and without the fix on x86_64
#   HZ=250 and arm64 HZ=100 (L, z1, the cycle), and 2 TiB without the fix
#   (the longest idle stretches: what each idle tick costs the host);
# - on the real clock (TCG): the same 64 GiB cells.
# Every run's host CPU-seconds (user + sys of `run` and its QEMU) come from
# /usr/bin/time. OUT gets one results folder per run (groups compressed),
# the two tickless configs (configs/), commands.txt, cpu.tsv and table.md.
# BIN: a lazyinit-bench binary (default: cargo's debug build).
# The comparison is of the harness's periodic kernel with its tickless
# twin: since the harness's kernels became tickless themselves (issue 51,
# with QEMU patch 0004), run it with a BIN built before that change, whose
# kernel still has the periodic tick to turn off (the script refuses one
# that has none).
set -euo pipefail
out=${1:?usage: scripts/nohz-study.sh OUT [BIN]}
cd "$(dirname "$0")/.."
bin=$(realpath "${2:-target/debug/lazyinit-bench}")
mkdir -p "$out/configs"
out=$(cd "$out" && pwd)
touch "$out/commands.txt"
[ -f "$out/cpu.tsv" ] || printf 'run\tclock\ttick\tcpu_s\twall_s\n' >"$out/cpu.tsv"
# The tickless config of a kernel: its resolved config, periodic tick off.
tickless() {
  local arch=$1 hz=$2 manifest cfg
  manifest=$("$bin" kernel build --arch "$arch" --hz "$hz" --variant fix --json \
    | python3 -c 'import json, sys; print(json.load(sys.stdin)["manifest_path"])')
  cfg=$(dirname "$manifest")/config
  sed -e 's/^CONFIG_HZ_PERIODIC=y$/# CONFIG_HZ_PERIODIC is not set/' \
    -e 's/^# CONFIG_NO_HZ_IDLE is not set$/CONFIG_NO_HZ_IDLE=y/' "$cfg" \
    >"$out/configs/nohz-$arch-hz$hz.config"
  grep -qx 'CONFIG_NO_HZ_IDLE=y' "$out/configs/nohz-$arch-hz$hz.config" || {
    echo "error: $cfg has no periodic tick to turn off" >&2
    exit 1
  }
}
tickless x86_64 250
tickless arm64 100
# run NAME CLOCK TICK ARGS...: one run into $out/NAME, its command and
# CPU-seconds kept.
run() {
  local name=$1 clock=$2 tick=$3
  shift 3
  local extra=()
  if [ "$tick" = nohz ]; then
    local arch hz
    arch=$(sed -E 's/.*--arch ([^ ]+).*/\1/' <<<"$*")
    hz=$(sed -E 's/.*--hz ([^ ]+).*/\1/' <<<"$*")
    extra=(--kernel-config "$out/configs/nohz-$arch-hz$hz.config")
  fi
  echo "$bin run --clock $clock $* ${extra[*]} --out $out/$name" >>"$out/commands.txt"
  local t0=$SECONDS
  if ! /usr/bin/time -f '%U %S' -o "$out/.time" "$bin" run --clock "$clock" "$@" "${extra[@]}" \
    --out "$out/$name" --no-report >"$out/$name.log" 2>&1; then
    echo "error: $name failed (log: $out/$name.log)" >&2
    tail -n 20 "$out/$name.log" >&2
    return 1
  fi
  printf '%s\t%s\t%s\t%s\t%s\n' "$name" "$clock" "$tick" \
    "$(awk '{printf "%.1f", $1 + $2}' "$out/.time")" "$((SECONDS - t0))" >>"$out/cpu.tsv"
  rm -f "$out/.time"
  find "$out/$name" -name 'groups.csv' -exec gzip -f {} +
  echo "$name: $((SECONDS - t0)) s" >&2
}
x86="--arch x86_64 --hz 250"
arm="--arch arm64 --hz 100"
# Every kernel built before any run is timed, so that a run's CPU-seconds
# are its own (a build would be counted in them).
for a in "x86_64 250" "arm64 100"; do
  set -- $a
  for v in fix nofix; do
    "$bin" kernel build --arch "$1" --hz "$2" --variant "$v" >/dev/null
    "$bin" kernel build --arch "$1" --hz "$2" --variant "$v" \
      --config "$out/configs/nohz-$1-hz$2.config" >/dev/null
  done
done
# The two kernels of a cell one after the other, so that on the real
# clock both see the same host.
part=${NOHZ_PART:-all}
if [ "$part" = cost ]; then
  rm -rf "$out"/virtual-*-2TiB-*
  grep -v -- '-2TiB-' "$out/cpu.tsv" >"$out/cpu.tsv.new" && mv "$out/cpu.tsv.new" "$out/cpu.tsv"
fi
case "$part" in real) ;; *) for a in x86 arm; do
  [ "$part" = cost ] || for v in fix nofix; do
    for tick in periodic nohz; do
      run "virtual-$a-$v-64GiB-$tick" virtual "$tick" ${!a} --size 64GiB --variant "$v"
    done
  done
  # Three of each: a run's CPU-seconds move with what else the host runs.
  for i in 1 2 3; do
    for tick in periodic nohz; do
      run "virtual-$a-nofix-2TiB-$tick-$i" virtual "$tick" ${!a} --size 2TiB --variant nofix
    done
  done
done ;; esac
case "$part" in virtual | cost) ;; *) for a in x86 arm; do
  for v in fix nofix; do
    for tick in periodic nohz; do
      run "real-$a-$v-64GiB-$tick" real "$tick" ${!a} --size 64GiB --variant "$v"
    done
  done
done ;; esac
python3 - "$out" <<'PY'
import csv, glob, gzip, os, statistics, sys
from collections import Counter
out = sys.argv[1]
cpu = {r["run"]: r for r in csv.DictReader(open(os.path.join(out, "cpu.tsv")), delimiter="\t")}
lines = ["| run | kernel | L | z1 ms | ms/group | cycles: most common ms, share within 2 us of it, range us | lazyinit s | host CPU-s | wall s |",
         "|---|---|---:|---:|---:|---|---:|---:|---:|"]
rows = {}
for d in sorted(glob.glob(os.path.join(out, "*/results.csv"))):
    name = os.path.basename(os.path.dirname(d))
    for r in csv.DictReader(open(d)):
        if r["status"] != "ok":
            lines.append(f"| {name} | {r['kernel_release']} | {r['status']}: {r['error']} | | | | | {cpu[name]['cpu_s'] if name in cpu else ''} | |")
            continue
        g = glob.glob(os.path.join(os.path.dirname(d), r["cell_id"], "groups.csv*"))
        cyc = ""
        if g:
            opener = gzip.open if g[0].endswith(".gz") else open
            t = [float(x["t_s"]) for x in csv.DictReader(opener(g[0], "rt"))]
            # The first group's interval starts at the mount, not a wake.
            c = [round((b - a) * 1e6) for a, b in zip(t[1:], t[2:])]
            top = Counter(c).most_common(1)[0][0]
            near = sum(abs(x - top) <= 2 for x in c)
            cyc = f"{top / 1000:.3f}, {100 * near / len(c):.1f}% of {len(c)}, {min(c) - top:+d} to {max(c) - top:+d}"
        rows[name] = r
        z1 = f"{float(r['z1_ms']):.3f}" if r["z1_ms"] else ""
        lines.append(f"| {name} | {r['kernel_release']} | {r['sleep_ticks']} | {z1} | {float(r['ms_per_group']):.3f} | {cyc} | {float(r['lazyinit_s']):.3f} | {cpu[name]['cpu_s']} | {cpu[name]['wall_s']} |")
lines += ["", "What an idle tick costs the host on the virtual clock (2 TiB without",
          "the fix, the thread asleep most of the time, three runs of each",
          "kernel): the periodic kernel's extra CPU-seconds over the tickless",
          "one's (means), per tick of the periodic thread's time.", "",
          "| cell | HZ | thread s | ticks | CPU-s periodic | CPU-s tickless | us of host per idle tick |",
          "|---|---:|---:|---:|---|---|---:|"]
for a, hz in (("x86", 250), ("arm", 100)):
    p = sorted(n for n in rows if n.startswith(f"virtual-{a}-nofix-2TiB-periodic"))
    q = sorted(n for n in rows if n.startswith(f"virtual-{a}-nofix-2TiB-nohz"))
    if p and q:
        s = statistics.mean(float(rows[n]["lazyinit_s"]) for n in p)
        cp = [float(cpu[n]["cpu_s"]) for n in p]
        cq = [float(cpu[n]["cpu_s"]) for n in q]
        dc = statistics.mean(cp) - statistics.mean(cq)
        lines.append(f"| {a} 2 TiB nofix | {hz} | {s:.1f} | {s * hz:.0f} | {', '.join(map(str, cp))} | {', '.join(map(str, cq))} | {dc / (s * hz) * 1e6:.1f} |")
open(os.path.join(out, "table.md"), "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
PY
