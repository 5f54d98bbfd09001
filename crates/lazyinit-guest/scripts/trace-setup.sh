# Arms the tracepoints that give the ground truth: one event per group
# zeroed, the lazy-init thread's journal start before each (so each
# zeroing is timed), the sleep it arms after each, and the thread's exit. Buffer sized for every group.
# An instance buffer carries the group events alone, for wait-groups.sh.
set -e
T=/sys/kernel/tracing
I=$T/instances/lazyinit
kb="$1"
[ -d $I ] || mkdir $I
echo 0 > $T/tracing_on
# Reading `trace` mid-run (the early stop) must not pause recording.
if [ -f $T/options/pause-on-trace ]; then echo 0 > $T/options/pause-on-trace; fi
grep -q mono $T/trace_clock && echo mono > $T/trace_clock
echo "$kb" > $T/buffer_size_kb
echo > $T/trace
echo > $I/trace
echo 1 > $T/events/ext4/ext4_lazy_itable_init/enable
echo 1 > $I/events/ext4/ext4_lazy_itable_init/enable
echo 1 > $I/tracing_on
for e in ext4_journal_start ext4_journal_start_sb; do
  if [ -d $T/events/ext4/$e ]; then echo 1 > $T/events/ext4/$e/enable; fi
done
if [ -d $T/events/sched/sched_process_exit ]; then
  echo 'comm == "ext4lazyinit"' > $T/events/sched/sched_process_exit/filter
  echo 1 > $T/events/sched/sched_process_exit/enable
fi
# The sleep the thread arms after each zeroing, in ticks: the kernel's L.
if [ -d $T/events/timer/timer_start ]; then
  echo 'comm == "ext4lazyinit"' > $T/events/timer/timer_start/filter
  echo 1 > $T/events/timer/timer_start/enable
fi
echo 1 > $T/tracing_on
echo "trace_clock=$(sed 's/.*\[\(.*\)\].*/\1/' $T/trace_clock)"
