# Cheap enough to run every few seconds: the thread's pid (empty once it
# exited) and how many groups it has zeroed so far (the instance buffer
# holds group events alone: in it, read + overwritten + present).
I=/sys/kernel/tracing/instances/lazyinit
echo "pid=$(grep -l '^ext4lazyinit$' /proc/[0-9]*/comm 2>/dev/null | cut -d/ -f3 | head -n1)"
echo "groups=$(cat $I/per_cpu/cpu*/stats 2>/dev/null | awk '/^entries:/ || /^overrun:/ || /^read events:/ {n += $NF} END {print n+0}')"
echo "overrun=$(cat /sys/kernel/tracing/per_cpu/cpu*/stats 2>/dev/null | awk '/^overrun:/ {n += $2} END {print n+0}')"
# While it runs, what it is doing: its state (D: waiting on a request) and
# the kernel function it waits in, for the error of a thread that outlives
# its deadline.
p=$(grep -l '^ext4lazyinit$' /proc/[0-9]*/comm 2>/dev/null | cut -d/ -f3 | head -n1)
if [ -n "$p" ]; then
  echo "state=$(sed 's/.*) //' /proc/$p/stat 2>/dev/null | cut -d' ' -f1)"
  echo "wchan=$(cat /proc/$p/wchan 2>/dev/null)"
fi
