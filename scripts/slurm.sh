#!/usr/bin/env bash
# A single-node Slurm of the project's own for the job-file test
# (crates/lazyinit-bench/tests/slurm_e2e.rs), as scripts/history-postgres.sh
# starts PostgreSQL: Debian's slurm-wlm (slurmctld, slurmd) and munge, on
# loopback at ports of its own, its state, spool, logs and munge key under
# a private directory (0700). Idempotent: a running cluster that answers is
# kept. Prints the path of its slurm.conf (scripts/test.sh exports it as
# LAZYINIT_TEST_SLURM; a client reads it as SLURM_CONF).
#
#   scripts/slurm.sh          start (or keep) it, print SLURM_CONF's path
#   scripts/slurm.sh stop     stop its daemons
set -euo pipefail
DIR="${LAZYINIT_SLURM_DIR:-/var/tmp/lazyinit-slurm}"
CTLD_PORT="${LAZYINIT_SLURMCTLD_PORT:-56817}"
SLURMD_PORT="${LAZYINIT_SLURMD_PORT:-56818}"
conf="$DIR/slurm.conf"
export SLURM_CONF="$conf"

stop() {
  for pidfile in "$DIR/slurmd.pid" "$DIR/slurmctld.pid" "$DIR/munged.pid"; do
    if [ -s "$pidfile" ]; then
      kill "$(cat "$pidfile")" 2>/dev/null || true
    fi
  done
  # Each is gone within 10 s, or killed.
  for pidfile in "$DIR/slurmd.pid" "$DIR/slurmctld.pid" "$DIR/munged.pid"; do
    [ -s "$pidfile" ] || continue
    pid=$(cat "$pidfile")
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
    rm -f "$pidfile"
  done
}
if [ "${1:-}" = stop ]; then
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

# Already up and answering: kept.
if [ -f "$conf" ] && scontrol ping 2>/dev/null | grep -q 'is UP' \
  && sinfo -h -o '%T' 2>/dev/null | grep -qE '^(idle|mixed|allocated)'; then
  echo "$conf"
  exit 0
fi
stop
mkdir -p "$DIR"
chmod 700 "$DIR"
mkdir -p "$DIR/state" "$DIR/spool" "$DIR/munge"
if [ ! -s "$DIR/munge/munge.key" ]; then
  (umask 077 && head -c 1024 /dev/urandom >"$DIR/munge/munge.key")
fi
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
cat >"$conf" <<CONF
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
    echo "$conf"
    exit 0
  fi
  sleep 0.5
done
echo "error: Slurm did not come up in 60 s; its logs: $DIR/slurmctld.log, $DIR/slurmd.log" >&2
tail -n 20 "$DIR/slurmctld.log" "$DIR/slurmd.log" >&2 || true
exit 3
