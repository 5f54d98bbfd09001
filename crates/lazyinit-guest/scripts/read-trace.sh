# The whole trace, twice: as text (each event's fields, its timestamp in
# whole microseconds), then, after a line that says so, raw (each event's
# pid, CPU and timestamp in nanoseconds, nothing else), in the same order.
# The harness pairs them line by line (parse.rs, trace_events), so that z1
# and the cycles are read to the nanosecond: on the virtual clock they are
# exact to well under a microsecond. Reading does not stop tracing; the raw
# read, made second, may hold later events, and only its first lines pair.
T=/sys/kernel/tracing
cat $T/trace
echo "# lazyinit-bench: the same events, raw"
echo 1 > $T/options/raw
cat $T/trace
rc=$?
echo 0 > $T/options/raw
exit $rc
