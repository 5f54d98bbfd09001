# mkfs on the guest's block device, as the report did (DESIGN §3: never on a
# host sparse file). Prints seconds taken, then the geometry and how many
# groups already have their inode table zeroed (should be none or few).
set -e
dev="$1"; shift
t0=$(cut -d' ' -f1 /proc/uptime)
mkfs.ext4 -F -q "$@" "$dev" >/tmp/mkfs.out 2>&1 || { cat /tmp/mkfs.out >&2; exit 1; }
t1=$(cut -d' ' -f1 /proc/uptime)
echo "mkfs_s=$(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.2f", b-a}')"
dumpe2fs -h "$dev" 2>/dev/null | awk -F: '
  /^Block count/ {gsub(/ /,"",$2); print "blocks=" $2}
  /^Blocks per group/ {gsub(/ /,"",$2); print "blocks_per_group=" $2}
  /^Block size/ {gsub(/ /,"",$2); print "block_size=" $2}
  /^Inode size/ {gsub(/ /,"",$2); print "inode_size=" $2}
  /^Inodes per group/ {gsub(/ /,"",$2); print "inodes_per_group=" $2}'
echo "zeroed=$(dumpe2fs "$dev" 2>/dev/null | grep -c ITABLE_ZEROED || true)"
