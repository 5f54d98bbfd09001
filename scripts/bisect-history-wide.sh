#!/usr/bin/env bash
# A bisect history shaped like a real one (issue 38 item 6): Debian's 6.1
# source committed, then 31 more commits, each touching 12 files across the
# tree (drivers, fs, kernel, mm, net, lib: files both the arm64 and the
# x86_64 QEMU kernels compile), so that every step rebuilds dozens of
# objects and relinks, as a real range does:
#   scripts/bisect-history-wide.sh DIR
# The 32 commits: m0 the source as released (with the fix); m1..m28 on
# main; a side branch s1..s3 from m12, merged into main with --no-ff as
# m18; m5 and m6 do not build (an #error in fs/ext4/inode.c, m7 takes it
# out); m25, four commits from the bad end, reverts the lazy-init fix
# (kernels/patches/debian-6.1-revert-fix.patch). Names, emails and dates
# are fixed, so the same script gives the same hashes (a warm cache holds
# the builds); an existing DIR made by this script is kept.
# Prints nothing; `git -C DIR log --graph --oneline` shows it.
set -euo pipefail
dir=$1
here=$(cd "$(dirname "$0")/.." && pwd)
. "$here/scripts/history-base.sh"
revert="$here/kernels/patches/debian-6.1-revert-fix.patch"
stamp="wide-32 v1"
history_kept "$dir" "$stamp" && exit 0
# Files both QEMU kernels compile (every 10th of the 945 their trees had
# objects for; fs/ext4/super.c and inode.c left to the culprit and the
# #error).
files=(
  block/bio.c
  block/blk-mq-sched.c
  block/disk-events.c
  crypto/ahash.c
  drivers/acpi/acpi_lpat.c
  drivers/acpi/acpica/dsinit.c
  drivers/acpi/acpica/dswscope.c
  drivers/acpi/acpica/evregion.c
  drivers/acpi/acpica/excreate.c
  drivers/acpi/acpica/exoparg3.c
  drivers/acpi/acpica/exstorob.c
  drivers/acpi/acpica/hwvalid.c
  drivers/acpi/acpica/nsload.c
  drivers/acpi/acpica/nswalk.c
  drivers/acpi/acpica/psscope.c
  drivers/acpi/acpica/rsio.c
  drivers/acpi/acpica/tbfind.c
  drivers/acpi/acpica/utbuffer.c
  drivers/acpi/acpica/utids.c
  drivers/acpi/acpica/utpredef.c
  drivers/acpi/acpica/utxfmutex.c
  drivers/acpi/nvs.c
  drivers/acpi/resource.c
  drivers/base/component.c
  drivers/base/firmware_loader/main.c
  drivers/base/trace.c
  drivers/input/input.c
  drivers/md/dm-stats.c
  drivers/pci/bus.c
  drivers/pci/pci-sysfs.c
  drivers/pci/setup-bus.c
  drivers/pnp/interface.c
  drivers/tty/pty.c
  drivers/tty/tty_ioctl.c
  drivers/tty/vt/selection.c
  drivers/virtio/virtio_ring.c
  fs/d_path.c
  fs/ext4/bitmap.c
  fs/ext4/hash.c
  fs/ext4/namei.c
  fs/ext4/xattr_trusted.c
  fs/fs_pin.c
  fs/iomap/iter.c
  fs/kernfs/dir.c
  fs/namespace.c
  fs/proc/cpuinfo.c
  fs/proc/page.c
  fs/proc/uptime.c
  fs/seq_file.c
  fs/sysfs/file.c
  init/do_mounts_initrd.c
  io_uring/filetable.c
  io_uring/openclose.c
  io_uring/uring_cmd.c
  kernel/dma/direct.c
  kernel/futex/requeue.c
  kernel/irq/dummychip.c
  kernel/kallsyms.c
  kernel/locking/rtmutex_api.c
  kernel/printk/printk.c
  kernel/rcu/update.c
  kernel/smp.c
  kernel/time/clockevents.c
  kernel/time/tick-broadcast.c
  kernel/time/vsyscall.c
  kernel/trace/trace_events.c
  kernel/trace/trace_seq.c
  lib/bcd.c
  lib/cpu_rmap.c
  lib/crypto/utils.c
  lib/earlycpio.c
  lib/iomap_copy.c
  lib/list_sort.c
  lib/math/reciprocal_div.c
  lib/percpu_counter.c
  lib/seq_buf.c
  lib/syscall.c
  lib/zlib_inflate/inflate_syms.c
  lib/zstd/decompress/zstd_decompress.c
  mm/folio-compat.c
  mm/memory.c
  mm/mremap.c
  mm/rmap.c
  mm/vmscan.c
  net/core/filter.c
  net/core/net-traces.c
  net/core/sock_reuseport.c
  net/ipv4/af_inet.c
  net/ipv4/igmp.c
  net/ipv4/ip_output.c
  net/ipv4/route.c
  net/ipv4/tcp_offload.c
  net/ipv6/addrconf_core.c
  net/netlink/genetlink.c
  net/unix/sysctl_net_unix.c
)
history_base "$dir" 2026-02-01
# Appends a line to 12 files for commit $1: main's commits take theirs
# from the first 80 files, the side branch's from the last 15, so that the
# merge has no conflict.
touch_files() {
  local n=$1 k f
  for k in $(seq 0 11); do
    if [ "$n" -gt 100 ]; then
      f=${files[$(( 80 + (n * 12 + k) % 15 ))]}
    else
      f=${files[$(( (n * 12 + k) % 80 ))]}
    fi
    echo "/* bisect history (wide): commit $n */" >> "$f"
  done
}
commit() {
  local n=$1 msg=$2
  at "$n"
  git add -f -A
  git commit -q -m "$msg"
}
for i in $(seq 1 28); do
  if [ "$i" = 13 ]; then
    # The side branch, from m12: three commits of its own.
    git checkout -q -b side
    for j in 1 2 3; do
      touch_files $(( 100 + j ))
      commit $(( 100 + j )) "side $j: 12 files across the tree"
    done
    git checkout -q main
  fi
  if [ "$i" = 18 ]; then
    at 18
    git merge -q --no-ff -m "m18: merge branch 'side'" side
    continue
  fi
  touch_files "$i"
  msg="m$i: 12 files across the tree"
  case "$i" in
    5)
      echo '#error "bisect history: this commit does not build"' >> fs/ext4/inode.c
      msg="m5: 12 files across the tree; does not build"
      ;;
    6) msg="m6: 12 files across the tree; still does not build" ;;
    7)
      sed -i '/bisect history: this commit does not build/d' fs/ext4/inode.c
      msg="m7: 12 files across the tree; builds again"
      ;;
    25)
      patch -s -p1 -F0 < "$revert"
      msg="m25: 12 files across the tree; time the first zeroing in jiffies again (reverts 39fec6889d15)"
      ;;
  esac
  commit "$i" "$msg"
done
git branch -q -D side
echo "$stamp" > .git/lazyinit-history
