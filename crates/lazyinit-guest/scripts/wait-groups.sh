# Blocks until the lazy-init thread has zeroed K groups since the trace was
# armed (or a group takes longer than T seconds): the span in which the sleep
# between groups is set. A blocking read on an instance's trace_pipe, so
# nothing runs in the guest meanwhile. Prints how many were seen.
I=/sys/kernel/tracing/instances/lazyinit
k="$1"; t="$2"; n=0
exec 3< $I/trace_pipe
while [ $n -lt "$k" ] && read -t "$t" line <&3; do
  n=$((n + 1))
done
echo "seen=$n"
