# Waits until the lazy-init thread has zeroed K groups in all since the
# trace was armed (or T seconds pass without a new one): the span in which the sleep
# between groups is set. Polls the instance buffer's event count every 0.1 s
# with shell builtins only: no process starts in the guest, and no reader
# waits on a trace pipe (a waiting reader is woken by the group event
# itself, and that wake-up ran in the kernel's own measurement of z1,
# before it read the clock: 0.1-0.3 ms more than the trace shows, measured
# with W=100). Prints how many groups were seen.
I=/sys/kernel/tracing/instances/lazyinit
k="$1"; t="$2"
[ -p /tmp/lazyinit-tick ] || mkfifo /tmp/lazyinit-tick
exec 4<>/tmp/lazyinit-tick
n=0; last=0; quiet=0
while :; do
  n=0
  for f in $I/per_cpu/cpu*/stats; do
    # entries: and overrun: (an instance buffer that wrapped still counts)
    { read -r key v; read -r key o; } < "$f"
    n=$((n + v + o))
  done
  [ "$n" -ge "$k" ] && break
  if [ "$n" -ne "$last" ]; then last=$n; quiet=0; else quiet=$((quiet + 1)); fi
  [ $quiet -ge $((t * 10)) ] && break
  read -t 0.1 x <&4
done
echo "seen=$n"
