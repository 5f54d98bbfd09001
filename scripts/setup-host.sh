#!/usr/bin/env bash
# Installs every host package lazyinit-bench needs on Debian 12 (bookworm).
# Idempotent: a second run on a ready machine only checks and exits.
# QEMU comes from bookworm-backports because qemu-utils 10 from backports
# conflicts with bookworm's qemu-system 7.2 (docs/design.md §3, pitfalls).
set -euo pipefail

if [ "$(id -u)" -ne 0 ]; then
  SUDO=sudo
else
  SUDO=
fi

PKGS=(
  qemu-system-x86 qemu-system-arm        # guests (backports, see below)
  qemu-utils                             # qemu-io (NBD server tests; backports)
  linux-source-6.1 linux-source-6.12     # kernel sources (debian-5.10 is Debian 11's:
                                         # the harness downloads it into its cache
                                         # with a private apt configuration, see
                                         # kernels/README.md; nothing is added here)
  build-essential gcc-aarch64-linux-gnu  # native and cross compilers
  flex bison bc libelf-dev libssl-dev cpio xz-utils zstd kmod rsync
  dwarves openssl git                    # a user's distro config (--config): pahole for
                                         # DEBUG_INFO_BTF, module signing keys; git trees
  e2fsprogs busybox-static dropbear-bin openssh-client
  ccache                                 # kernel objects kept across trees: the next
                                         # point release compiles what changed
                                         # (crates/lazyinit-kernel/src/build/ccache.rs)
  python3-venv                           # EC2 API emulator (moto) for tests; the
                                         # meson of the virtual clock's QEMU build
  ninja-build libglib2.0-dev libfdt-dev  # the QEMU of the virtual clock, built from
  libslirp-dev libpixman-1-dev patch     # Debian's source with the project's patches
                                         # (lazyinit-bench qemu build)
)

# The host-wide token's directory (crates/lazyinit-orchestrator/src/token.rs):
# root's and sticky like /tmp, so every user's runs share one token and no
# user can replace another's lock file; made again at each boot (/run is a
# tmpfs) by systemd-tmpfiles where there is systemd.
if [ ! -d /run/lazyinit-bench ] || [ -L /run/lazyinit-bench ]; then
  $SUDO rm -f /run/lazyinit-bench
  $SUDO install -d -m 1777 -o root -g root /run/lazyinit-bench
fi
if [ -d /etc/tmpfiles.d ] && [ ! -f /etc/tmpfiles.d/lazyinit-bench.conf ]; then
  echo 'd /run/lazyinit-bench 1777 root root -' | $SUDO tee /etc/tmpfiles.d/lazyinit-bench.conf >/dev/null
fi

need=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || need+=("$p")
done
if ! dpkg --print-foreign-architectures | grep -qx arm64; then
  need+=(arch-arm64)
fi
if [ ${#need[@]} -eq 0 ]; then
  echo "setup-host: all packages present"
  exit 0
fi
echo "setup-host: installing: ${need[*]}"

. /etc/os-release
codename=${VERSION_CODENAME:-bookworm}
if ! grep -rqs "${codename}-backports" /etc/apt/sources.list /etc/apt/sources.list.d/; then
  $SUDO tee /etc/apt/sources.list.d/lazyinit-backports.sources >/dev/null <<SRC
Types: deb
URIs: http://deb.debian.org/debian
Suites: ${codename}-backports
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
fi
# Foreign-arch packages are only downloaded and unpacked (guest images), never run.
$SUDO dpkg --add-architecture arm64
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q -t "${codename}-backports" qemu-system-x86 qemu-system-arm qemu-utils
rest=()
for p in "${PKGS[@]}"; do
  case "$p" in qemu-system-* | qemu-utils) ;; *) rest+=("$p") ;; esac
done
$SUDO apt-get install -y -q --no-install-recommends "${rest[@]}"
echo "setup-host: done"
