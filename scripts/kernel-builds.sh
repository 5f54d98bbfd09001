#!/usr/bin/env bash
# Kernel builds, one after another, measured: wall time, CPU-seconds of the
# build's processes (the manifest's build_cpu_seconds: getrusage of make
# and its children) and what ccache did, one line each:
#   scripts/kernel-builds.sh OUT ARCH:HZ:SOURCE:VARIANT...
#   e.g. scripts/kernel-builds.sh results/kernel-builds/series-cold \
#          x86_64:250:debian:7.3:fix x86_64:250:debian:7.3:nofix
# With LAZYINIT_CACHE_DIR set to an empty folder, the first build of each
# tree is cold (nothing in ccache either): that is how the point-release
# measurement is made (docs/kernel-series.md, "Building them").
# Writes OUT/builds.tsv (a header, then a line a build), OUT/<n>-<...>.json
# (the build's manifest, as `kernel build --json` prints it) and
# OUT/<n>-<...>.log (its steps). Exit 1 when a build failed (the others
# still run; the line says FAILED).
set -uo pipefail
bin=${LAZYINIT_BENCH:-target/debug/lazyinit-bench}
out=${1:?usage: scripts/kernel-builds.sh OUT ARCH:HZ:SOURCE:VARIANT...}
shift
mkdir -p "$out"
tsv="$out/builds.tsv"
[ -f "$tsv" ] || printf 'arch\thz\tsource\tpackage\tvariant\twall_s\tcpu_s\tccache_hits\tccache_misses\n' >"$tsv"
rc=0 n=$(($(wc -l <"$tsv")))
for b in "$@"; do
  IFS=: read -r arch hz kind ver variant <<<"$b"
  src="$kind:$ver"
  [ -z "$variant" ] && { src=$kind; variant=$ver; }
  name=$(printf '%02d-%s-%s-%s' "$n" "$arch" "${src//[:\/]/_}" "$variant")
  n=$((n + 1))
  if "$bin" kernel build --arch "$arch" --hz "$hz" --source "$src" --variant "$variant" --json \
      >"$out/$name.json" 2>"$out/$name.log"; then
    python3 - "$out/$name.json" "$arch" "$hz" "$src" "$variant" >>"$tsv" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))["manifest"]
c = m.get("ccache") or {}
cpu = m.get("build_cpu_seconds")
print("\t".join([sys.argv[2], sys.argv[3], sys.argv[4], m.get("debian_package") or "-",
                 sys.argv[5], f'{m["build_seconds"]:.0f}', "-" if cpu is None else f"{cpu:.0f}",
                 str(c.get("hits", "-")), str(c.get("misses", "-"))]))
PY
  else
    printf '%s\t%s\t%s\t-\t%s\tFAILED\t-\t-\t-\n' "$arch" "$hz" "$src" "$variant" >>"$tsv"
    echo "FAILED: $b (see $out/$name.log)" >&2
    rc=1
  fi
  tail -n 1 "$tsv"
done
exit "$rc"
