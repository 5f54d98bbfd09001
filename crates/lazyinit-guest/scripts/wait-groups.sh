# Blocks until the lazy-init thread's sleep between groups is set: until two
# consecutive group events are at least GAP_US apart (a cycle that slept;
# before the sleep is set, groups run back to back), or MAX groups were seen,
# or a group takes longer than T seconds. A blocking read on an instance's
# trace_pipe, so nothing runs in the guest meanwhile. Shell builtins only.
# Prints how many groups were seen and the gap that ended the wait.
I=/sys/kernel/tracing/instances/lazyinit
max="$1"; gap_us="$2"; t="$3"
n=0; prev=; gap=0
exec 3< $I/trace_pipe
while [ $n -lt "$max" ] && read -t "$t" line <&3; do
  n=$((n + 1))
  ts=
  for f in $line; do
    case $f in [0-9]*.[0-9]*:) ts=${f%:}; break ;; esac
  done
  [ -n "$ts" ] || continue
  # Seconds with six decimals -> microseconds (integer arithmetic).
  frac=${ts#*.}
  while [ ${#frac} -lt 6 ]; do frac="${frac}0"; done
  us=$(( ${ts%.*} * 1000000 + 1${frac%"${frac#??????}"} - 1000000 ))
  if [ -n "$prev" ]; then
    gap=$((us - prev))
    [ $gap -ge "$gap_us" ] && break
  fi
  prev=$us
done
echo "seen=$n"
echo "gap_us=$gap"
