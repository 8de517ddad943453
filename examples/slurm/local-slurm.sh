#!/usr/bin/env bash
# local-slurm.sh: a one-machine Slurm (munged, slurmctld, slurmd on this
# host) for tests, started without systemd and without cgroups, as root.
#   examples/slurm/local-slurm.sh start DIR   # writes DIR/slurm.conf, starts the daemons, waits for the node
#   examples/slurm/local-slurm.sh stop DIR    # stops them (the pids in DIR)
# Then: export SLURM_CONF=DIR/slurm.conf; srun -n 4 ./prog
# Everything lives in DIR (config, state, spool, logs, munge socket and key);
# the ports are picked free at start. It needs slurm-wlm and munge (make deps).
set -euo pipefail
cmd=${1:-} dir=${2:-}
[[ -n "$cmd" && -n "$dir" ]] || { sed -n '2,9p' "$0" >&2; exit 2; }
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)

stop() {
  for p in slurmd slurmctld munged; do
    if [[ -f "$dir/$p.pid" ]]; then
      pid=$(cat "$dir/$p.pid")
      kill "$pid" 2>/dev/null || true
      for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      kill -9 "$pid" 2>/dev/null || true
      rm -f "$dir/$p.pid"
    fi
  done
}

freeport() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

case $cmd in
stop) stop; exit 0 ;;
start) ;;
*) echo "unknown command $cmd" >&2; exit 2 ;;
esac

for c in slurmctld slurmd munged srun sinfo; do
  command -v "$c" >/dev/null || { echo "local-slurm: $c not found: install slurm-wlm and munge (make deps)" >&2; exit 3; }
done
[[ $(id -u) == 0 ]] || { echo "local-slurm: needs root (slurmd runs jobs as their user)" >&2; exit 3; }
stop
mkdir -p "$dir/state" "$dir/spool" "$dir/munge"
host=$(hostname -s)
cpus=$(nproc)
(( cpus < 16 )) && cpus=16 # ranks may outnumber cores in tests (config_overrides)
mem=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 / 2 ))

# munge: a private key, socket and daemon.
[[ -f "$dir/munge/munge.key" ]] || dd if=/dev/urandom of="$dir/munge/munge.key" bs=1024 count=1 status=none
chmod 0400 "$dir/munge/munge.key"
chmod 0700 "$dir/munge"
munged --force --key-file="$dir/munge/munge.key" --socket="$dir/munge/munge.sock" \
  --pid-file="$dir/munged.pid" --log-file="$dir/munged.log" --seed-file="$dir/munge/seed"

cat >"$dir/slurm.conf" <<EOF
ClusterName=ddtest
SlurmctldHost=$host
SlurmUser=root
SlurmdUser=root
SlurmctldPort=$(freeport)
SlurmdPort=$(freeport)
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$dir/munge/munge.sock
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
MpiDefault=none
ReturnToService=2
SchedulerType=sched/builtin
InactiveLimit=0
KillWait=5
MinJobAge=5
Waittime=0
NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=test Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
EOF
export SLURM_CONF=$dir/slurm.conf
slurmctld -f "$SLURM_CONF" -i
slurmd -f "$SLURM_CONF"
for _ in $(seq 100); do
  if sinfo -h -o '%t' 2>/dev/null | grep -qx 'idle'; then
    echo "local-slurm: node $host idle (SLURM_CONF=$SLURM_CONF)"
    exit 0
  fi
  sleep 0.2
done
echo "local-slurm: the node did not come up; logs:" >&2
tail -n 20 "$dir"/slurmctld.log "$dir"/slurmd.log "$dir"/munged.log >&2 || true
sinfo >&2 || true
stop
exit 1
