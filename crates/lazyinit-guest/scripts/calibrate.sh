# Calibration and warm-up on the scratch disk: N mounts, each waiting for the
# lazy-init thread's first zeroing, then unmounting. Each mount is a new
# lazy-init request, so each first zeroing is timed like the measured one's
# z1 (with a flush), on the same driver path and with the same hold. The
# first also pays for TCG translating that code, so the measured zeroing
# does not. The waits poll an instance buffer's event count every 0.1 s with
# shell builtins: no process starts in the guest while a zeroing is timed,
# and no trace-pipe reader is woken inside it (see wait-groups.sh). Prints
# the trace (journal starts and group events) for the harness to time each
# zeroing.
set -e
T=/sys/kernel/tracing
I=$T/instances/lazyinit
dev="$1"; n="$2"; opts="$3"
[ -d $I ] || mkdir $I
echo 0 > $T/tracing_on
grep -q mono $T/trace_clock && echo mono > $T/trace_clock
grep -q mono $I/trace_clock && echo mono > $I/trace_clock
for e in ext4_journal_start ext4_journal_start_sb; do
  if [ -d $T/events/ext4/$e ]; then echo 1 > $T/events/ext4/$e/enable; fi
done
echo 1 > $T/events/ext4/ext4_lazy_itable_init/enable
echo 1 > $I/events/ext4/ext4_lazy_itable_init/enable
echo > $T/trace
echo > $I/trace
echo 1 > $T/tracing_on
echo 1 > $I/tracing_on
[ -p /tmp/lazyinit-tick ] || mkfifo /tmp/lazyinit-tick
exec 4<>/tmp/lazyinit-tick
i=0
while [ $i -lt "$n" ]; do
  # Before an umount ends, a short sleep can let a second group run: only
  # the first zeroing after each marker is a first zeroing (with a flush).
  echo lazyinit-cal-mount > $T/trace_marker
  # Without the fix, zeroings shorter than a tick run back to back: more
  # than one group per mount. Only what this mount zeroes is counted.
  echo > $I/trace
  if [ -n "$opts" ]; then mount -t ext4 -o "$opts" "$dev" /mnt/warmup; else mount -t ext4 "$dev" /mnt/warmup; fi
  w=0; seen=0
  while [ "$seen" -lt 1 ]; do
    if [ $w -ge 300 ]; then
      umount /mnt/warmup
      echo "no lazy-init zeroing on $dev within 30 s of mount $i (scratch disk out of uninitialised groups?)" >&2
      exit 1
    fi
    read -t 0.1 x <&4 || true
    w=$((w + 1))
    seen=0
    for f in $I/per_cpu/cpu*/stats; do
      read -r key v < "$f"
      seen=$((seen + v))
    done
  done
  umount /mnt/warmup
  i=$((i + 1))
done
exec 4<&-
# Read twice, as text, then raw (nanoseconds), as read-trace.sh does: the
# guest's part, and so the hold, to the nanosecond, not to ftrace's
# rounded microsecond.
cat $T/trace
echo "# lazyinit-bench: the same events, raw"
echo 1 > $T/options/raw
cat $T/trace
echo 0 > $T/options/raw
