#!/usr/bin/env bash
# Commit Debian's 6.1 source as a git history for bisect tests and demos:
#   scripts/bisect-history.sh DIR COMMITS CULPRIT BROKEN [CULPRIT_PATCH]
# commit 0 is the source as released (with the ext4 lazy-init fix); commits
# 1..COMMITS-1 each add one comment line to a file of fs/ext4 (a one-file
# rebuild each); commit CULPRIT also applies CULPRIT_PATCH, a file of
# kernels/patches/ (default debian-6.1-revert-fix.patch, the project's revert
# of the fix; debian-6.1-one-ms-per-group.patch moves the time by a few
# percent at HZ=1000 and leaves the sleep L alone), commit BROKEN adds an
# `#error` to fs/ext4/inode.c and the next commit takes it out. Names, emails
# and dates are fixed, so the same arguments give the same hashes: a warm
# cache then holds the builds. An existing DIR made with the same arguments
# is kept.
set -euo pipefail
dir=$1 n=$2 culprit=$3 broken=$4 culprit_patch=${5:-debian-6.1-revert-fix.patch}
here=$(cd "$(dirname "$0")/.." && pwd)
. "$here/scripts/history-base.sh"
patch_file="$here/kernels/patches/$culprit_patch"
[ -f "$patch_file" ] || { echo "error: $patch_file is missing: name a file of kernels/patches/" >&2; exit 2; }
stamp="commits=$n culprit=$culprit broken=$broken"
# The default history keeps its old stamp (a warm cache keeps its builds).
[ "$culprit_patch" = debian-6.1-revert-fix.patch ] || stamp="$stamp patch=$culprit_patch"
history_kept "$dir" "$stamp" && exit 0
history_base "$dir" 2026-01-01
files=(balloc.c bitmap.c dir.c file.c fsync.c hash.c ialloc.c ioctl.c namei.c page-io.c resize.c symlink.c sysfs.c xattr.c)
for i in $(seq 1 $((n - 1))); do
  at "$i"
  f=fs/ext4/${files[$(( i % ${#files[@]} ))]}
  echo "/* bisect history: commit $i */" >> "$f"
  msg="ext4: note $i in $(basename "$f")"
  if [ "$i" = "$culprit" ]; then
    patch -s -p1 -F0 < "$patch_file"
    case "$culprit_patch" in
      debian-6.1-revert-fix.patch) msg="ext4: time the first zeroing in jiffies again (reverts 39fec6889d15)" ;;
      debian-6.1-one-ms-per-group.patch) msg="ext4: wait 1 ms after each group's zeroing" ;;
      *) msg="ext4: apply $culprit_patch" ;;
    esac
  fi
  if [ "$i" = "$broken" ]; then
    echo '#error "bisect history: this commit does not build"' >> fs/ext4/inode.c
    msg="ext4: a change that does not build"
  fi
  if [ "$i" = "$((broken + 1))" ]; then
    sed -i '/bisect history: this commit does not build/d' fs/ext4/inode.c
    msg="$msg; build again"
  fi
  git add -f -A fs/ext4
  git commit -q -m "$msg"
done
echo "$stamp" > .git/lazyinit-history
