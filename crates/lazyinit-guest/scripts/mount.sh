# Mounts with markers in the trace, so mount time and everything after it
# are on the same guest clock as the group events.
set -e
T=/sys/kernel/tracing
dev="$1"; opts="$2"
mkdir -p /mnt/vol
echo lazyinit-mount-start > $T/trace_marker
if [ -n "$opts" ]; then mount -t ext4 -o "$opts" "$dev" /mnt/vol; else mount -t ext4 "$dev" /mnt/vol; fi
echo lazyinit-mount-done > $T/trace_marker
echo "pid=$(grep -l '^ext4lazyinit$' /proc/[0-9]*/comm 2>/dev/null | cut -d/ -f3 | head -n1)"
