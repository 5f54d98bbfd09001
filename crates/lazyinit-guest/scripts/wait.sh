# The virtual clock's wait for the ext4lazyinit thread: in the guest, on
# the guest's own clock (its sleeps are timers of QEMU's virtual clock), so
# that what runs beside the thread runs at the same guest moments on every
# host. One sleep of $1 seconds first (the model's time for what is left,
# with a margin: nothing of the wait's own then runs during the thread,
# whose cycles stay to the microsecond), then a look every 10 s. The
# poll's lines follow once it has exited.
sleep "$1"
while grep -qx ext4lazyinit /proc/[0-9]*/comm 2>/dev/null; do
  sleep 10
done
