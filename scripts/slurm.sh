#!/usr/bin/env bash
# A single-node Slurm of the project's own for the job-file test
# (crates/lazyinit-bench/tests/slurm_e2e.rs), as scripts/history-postgres.sh
# starts PostgreSQL: Debian's slurm-wlm (slurmctld, slurmd) and munge, on
# loopback at ports of its own, its state, spool, logs and munge key under
# a private directory (root's, 0700: made here, or refused when it is not). Idempotent: a running cluster that answers is
# kept. Prints the path of its slurm.conf (scripts/test.sh exports it as
# LAZYINIT_TEST_SLURM; a client reads it as SLURM_CONF).
#
#   scripts/slurm.sh          start (or keep) it, print SLURM_CONF's path
#   scripts/slurm.sh stop     stop the daemons it started (a pid is signalled
#                             only while it is the process recorded at start)
set -euo pipefail
DIR="${LAZYINIT_SLURM_DIR:-/var/tmp/lazyinit-slurm}"
CTLD_PORT="${LAZYINIT_SLURMCTLD_PORT:-56817}"
SLURMD_PORT="${LAZYINIT_SLURMD_PORT:-56818}"
conf="$DIR/slurm.conf"
export SLURM_CONF="$conf"

# The folder is root's alone (issue 52): made here 0700, or refused when
# it is a link, not a folder, another user's or open to others (a
# predictable name under /var/tmp that another user could have made first,
# to have root kill the pids, reuse the key or write through the links it
# holds). Everything under it is then root's.
private_dir() {
  if [ ! -e "$DIR" ] && [ ! -L "$DIR" ]; then
    mkdir -m 700 "$DIR" 2>/dev/null || true
  fi
  if [ -L "$DIR" ] || [ ! -d "$DIR" ] || [ "$(stat -c '%u %a' "$DIR")" != "0 700" ]; then
    echo "error: $DIR is not a private folder of root (a link, not a folder, another user's, or open to others): remove it, or set LAZYINIT_SLURM_DIR to a new path, then rerun" >&2
    exit 2
  fi
}

# Each daemon this script started, as `name pid start-time` (the start
# time in clock ticks since boot, /proc/PID/stat's 22nd field): stop
# signals a pid only when it is still that process.
started="$DIR/started"
start_time() { awk '{print $22}' "/proc/$1/stat" 2>/dev/null || true; }
# `pid start comm` of the process field 2 names in /proc, for stop.
is_ours() {
  local pid="$1" start="$2" comm="$3"
  [ -n "$pid" ] && [ "$(start_time "$pid")" = "$start" ] \
    && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$comm" ]
}
record() {
  : >"$started.new"
  for name in munged slurmctld slurmd; do
    pid=$(cat "$DIR/$name.pid" 2>/dev/null || true)
    case "$pid" in '' | *[!0-9]*) continue ;; esac
    echo "$name $pid $(start_time "$pid")" >>"$started.new"
  done
  mv -f "$started.new" "$started"
}

stop() {
  [ -f "$started" ] || return 0
  local ours=()
  while read -r name pid start; do
    if is_ours "$pid" "$start" "$name"; then
      kill "$pid" 2>/dev/null || true
      ours+=("$name $pid $start")
    else
      echo "slurm.sh: $name (pid $pid) is not running any more: nothing signalled" >&2
    fi
  done <"$started"
  # Each is gone within 10 s, or killed (still the same process).
  for o in "${ours[@]}"; do
    read -r name pid start <<<"$o"
    for _ in $(seq 100); do is_ours "$pid" "$start" "$name" || break; sleep 0.1; done
    if is_ours "$pid" "$start" "$name"; then kill -9 "$pid" 2>/dev/null || true; fi
  done
  rm -f "$started" "$DIR/slurmd.pid" "$DIR/slurmctld.pid" "$DIR/munged.pid"
}
if [ "${1:-}" = stop ]; then
  [ "$(id -u)" = 0 ] || { echo "error: scripts/slurm.sh runs as root" >&2; exit 4; }
  private_dir
  stop
  exit 0
fi
[ "$(id -u)" = 0 ] || { echo "error: scripts/slurm.sh runs as root (slurmd starts jobs as their users)" >&2; exit 4; }

if ! command -v slurmctld >/dev/null 2>&1 || ! command -v slurmd >/dev/null 2>&1 \
  || ! command -v sbatch >/dev/null 2>&1 || ! command -v munged >/dev/null 2>&1; then
  pkgs=(slurmctld slurmd slurm-client munge)
  # Debian's packages would start their own daemons on the default ports.
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y --no-install-recommends "${pkgs[@]}" >&2 \
    || { apt-get update >&2 && apt-get install -y --no-install-recommends "${pkgs[@]}" >&2; }
fi

private_dir
# Already up and answering: kept.
if [ -f "$conf" ] && scontrol ping 2>/dev/null | grep -q 'is UP' \
  && sinfo -h -o '%T' 2>/dev/null | grep -qE '^(idle|mixed|allocated)'; then
  echo "$conf"
  exit 0
fi
stop
mkdir -p "$DIR/state" "$DIR/spool" "$DIR/munge"
# A key of this start's own (none reused), written where no link can be.
rm -f "$DIR/munge/munge.key"
(umask 077 && set -C && head -c 1024 /dev/urandom >"$DIR/munge/munge.key")
chmod 700 "$DIR/munge"
chmod 400 "$DIR/munge/munge.key"
socket="$DIR/munge/munge.socket"
# munged as root, with its key, socket, seed and log of its own.
munged --force --key-file="$DIR/munge/munge.key" --socket="$socket" \
  --pid-file="$DIR/munged.pid" --log-file="$DIR/munged.log" \
  --seed-file="$DIR/munge/munge.seed" >&2

host=$(hostname -s)
cpus=$(nproc)
mem_mb=$(awk '/MemTotal/ {printf "%d", $2 / 1024 * 0.9}' /proc/meminfo)
rm -f "$conf"
(set -C && cat >"$conf") <<CONF
# Written by scripts/slurm.sh: one node, loopback only, no accounting.
ClusterName=lazyinit
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$socket
CredType=cred/munge
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmdPidFile=$DIR/slurmd.pid
SlurmctldLogFile=$DIR/slurmctld.log
SlurmdLogFile=$DIR/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SwitchType=switch/none
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=2,bf_interval=2
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
MinJobAge=600
NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem_mb State=UNKNOWN
PartitionName=main Nodes=$host Default=YES MaxTime=INFINITE State=UP
CONF
slurmctld -i -f "$conf" >&2
slurmd -f "$conf" >&2
# Up when the node is idle (at most 60 s).
for _ in $(seq 120); do
  if sinfo -h -o '%T' 2>/dev/null | grep -qE '^(idle|mixed|allocated)'; then
    record
    echo "$conf"
    exit 0
  fi
  sleep 0.5
done
echo "error: Slurm did not come up in 60 s; its logs: $DIR/slurmctld.log, $DIR/slurmd.log" >&2
tail -n 20 "$DIR/slurmctld.log" "$DIR/slurmd.log" >&2 || true
exit 3
