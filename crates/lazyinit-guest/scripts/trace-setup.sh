# Arms the tracepoints that give the ground truth: one event per group
# zeroed, and the ext4lazyinit thread's exit. Buffer sized for every group.
set -e
T=/sys/kernel/tracing
kb="$1"
echo 0 > $T/tracing_on
grep -q mono $T/trace_clock && echo mono > $T/trace_clock
echo "$kb" > $T/buffer_size_kb
echo > $T/trace
echo 1 > $T/events/ext4/ext4_lazy_itable_init/enable
if [ -d $T/events/sched/sched_process_exit ]; then
  echo 'comm == "ext4lazyinit"' > $T/events/sched/sched_process_exit/filter
  echo 1 > $T/events/sched/sched_process_exit/enable
fi
echo 1 > $T/tracing_on
echo "trace_clock=$(sed 's/.*\[\(.*\)\].*/\1/' $T/trace_clock)"
