#!/usr/bin/env bash
# The README's first command on a bare machine, as near as this host allows:
# QEMU purged (and apt's package cache emptied, so it is downloaded again),
# a fresh clone, an empty kernel/image cache and state dir, an empty cargo
# home (the registry is downloaded again from crates.io) and target. The
# toolchain (rustup) and the other host packages stay.
set -u
rm -rf /work/bare /work/bare-cache /work/bare-state /work/bare-cargo
git clone -q /work/main /work/bare
mkdir -p /work/bare-cargo/bin
export DEBIAN_FRONTEND=noninteractive
apt-get purge -y -q qemu-system-x86 qemu-system-arm qemu-utils qemu-system-common qemu-system-data qemu-block-extra qemu-system-gui qemu-system-modules-opengl qemu-system-modules-spice > /work/logs/bare-purge.log 2>&1
apt-get clean
command -v qemu-system-x86_64 && echo "qemu still there" >&2
cd /work/bare
export LAZYINIT_CACHE_DIR=/work/bare-cache LAZYINIT_STATE_DIR=/work/bare-state
export CARGO_HOME=/work/bare-cargo RUSTUP_HOME=/root/.rustup PATH=/root/.cargo/bin:$PATH
start=$(date +%s.%N)
/usr/bin/time -v bash scripts/first-run.sh > /work/logs/bare-first.log 2>&1
rc=$?
end=$(date +%s.%N)
echo "rc=$rc wall=$(echo "$end - $start" | bc)s" >> /work/logs/bare-first.log
