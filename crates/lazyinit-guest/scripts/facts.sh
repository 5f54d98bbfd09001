# Prints what the guest is, one key=value per line. Run before anything else:
# the harness refuses to measure on a kernel that is not the one asked for.
echo "release=$(uname -r)"
echo "machine=$(uname -m)"
cfg() { zcat /proc/config.gz 2>/dev/null | grep "^$1=" | cut -d= -f2- | tr -d '"'; }
echo "hz=$(cfg CONFIG_HZ)"
echo "localversion=$(cfg CONFIG_LOCALVERSION)"
echo "clocksource=$(cat /sys/devices/system/clocksource/clocksource0/current_clocksource 2>/dev/null)"
echo "tracing=$([ -d /sys/kernel/tracing/events/ext4/ext4_lazy_itable_init ] && echo yes || echo no)"
echo "mkfs=$(mkfs.ext4 -V 2>&1 | head -n1)"
echo "uptime=$(cut -d' ' -f1 /proc/uptime)"
