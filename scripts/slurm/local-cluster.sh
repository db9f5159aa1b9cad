#!/usr/bin/env bash
# A real Slurm on this machine for tests and trials: munged, slurmctld and two slurmd nodes
# (n1, n2) under one directory, on free loopback ports, so nothing of the host's own Slurm or
# munge (if any) is touched and `down` can stop exactly what `up` started.
#
#   scripts/slurm/local-cluster.sh up [DIR]     start it; prints `export SLURM_CONF=...`
#   scripts/slurm/local-cluster.sh down [DIR]   stop every job, daemon and process it started
#
# DIR defaults to $MLBENCH_SLURM_DIR, else a new temporary directory (up) / the last one
# `up` made (down, remembered in ${TMPDIR:-/tmp}/mlbench-slurm-last). Needs slurm-wlm and
# munge (make test-deps) and root (the daemons run as the invoking user: SlurmUser=root).
# Several slurmd on one host work because Debian builds Slurm with multiple-slurmd support:
# each node has NodeHostname=localhost, a Port of its own and `slurmd -N NAME`, and a TmpFS of
# its own (srun --mpi=pmix keeps each step's PMIx directory there, named by job and step
# only: with two nodes sharing /tmp, task launch fails).
set -euo pipefail

cmd="${1:-}"
last="${TMPDIR:-/tmp}/mlbench-slurm-last"
nodes=(n1 n2)

die() { echo "local-cluster: $*" >&2; exit 1; }

free_ports() {  # N free TCP ports on 127.0.0.1 (bound once, then released)
  python3 - "$1" <<'EOF'
import socket, sys
socks = [socket.socket() for _ in range(int(sys.argv[1]))]
for s in socks:
    s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in socks))
EOF
}

# Every process whose environment names this cluster's slurm.conf: the daemons (started
# with SLURM_CONF exported), their slurmstepd and every job process they started.
cluster_pids() {
  local conf="$1" pid
  for env in /proc/[0-9]*/environ; do
    pid="${env#/proc/}"; pid="${pid%/environ}"
    [ "$pid" = "$$" ] && continue
    if { tr '\0' '\n' <"$env"; } 2>/dev/null | grep -qx "SLURM_CONF=$conf"; then echo "$pid"; fi
  done
}

up() {
  local dir="$1"
  for prog in munged slurmctld slurmd sbatch; do
    command -v "$prog" >/dev/null || die "$prog not found: install slurm-wlm and munge (make test-deps)"
  done
  mkdir -p "$dir"/{munge,state,log,spool,run}
  chmod 700 "$dir" "$dir/munge"
  local conf="$dir/slurm.conf" cpus mem
  cpus="$(nproc)"
  mem=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 / ${#nodes[@]} / 2 ))
  read -r ctl_port p1 p2 < <(free_ports 3)
  local ports=("$p1" "$p2")

  # munge: a key of its own, a socket of its own.
  [ -f "$dir/munge/munge.key" ] || dd if=/dev/urandom of="$dir/munge/munge.key" bs=1024 count=1 status=none
  chmod 600 "$dir/munge/munge.key"
  munged --socket="$dir/munge/munge.socket" --key-file="$dir/munge/munge.key" \
    --pid-file="$dir/munge/munged.pid" --log-file="$dir/log/munged.log" \
    --seed-file="$dir/munge/munged.seed" --force

  {
    echo "ClusterName=mlbench-local"
    echo "SlurmctldHost=localhost(127.0.0.1)"
    echo "SlurmctldPort=$ctl_port"
    echo "SlurmUser=$(id -un)"
    echo "SlurmdUser=$(id -un)"
    echo "AuthType=auth/munge"
    echo "CredType=cred/munge"
    echo "AuthInfo=socket=$dir/munge/munge.socket"
    echo "StateSaveLocation=$dir/state"
    echo "SlurmdSpoolDir=$dir/spool/%n"
    echo "TmpFS=$dir/tmp/%n"
    echo "SlurmctldPidFile=$dir/run/slurmctld.pid"
    echo "SlurmdPidFile=$dir/run/slurmd-%n.pid"
    echo "SlurmctldLogFile=$dir/log/slurmctld.log"
    echo "SlurmdLogFile=$dir/log/slurmd-%n.log"
    echo "ProctrackType=proctrack/linuxproc"
    echo "TaskPlugin=task/none"
    echo "SelectType=select/cons_tres"
    echo "SelectTypeParameters=CR_CPU"
    echo "MpiDefault=none"
    echo "ReturnToService=2"
    echo "SchedulerType=sched/backfill"
    echo "AccountingStorageType=accounting_storage/none"
    echo "JobAcctGatherType=jobacct_gather/none"
    echo "JobCompType=jobcomp/none"
    echo "KillWait=2"
    echo "MinJobAge=600"
    echo "InactiveLimit=0"
    echo "SlurmdTimeout=60"
    for i in "${!nodes[@]}"; do
      echo "NodeName=${nodes[$i]} NodeHostname=localhost NodeAddr=127.0.0.1 Port=${ports[$i]} CPUs=$cpus RealMemory=$mem State=UNKNOWN"
    done
    echo "PartitionName=debug Nodes=$(IFS=,; echo "${nodes[*]}") Default=YES MaxTime=INFINITE State=UP"
  } >"$conf"
  for n in "${nodes[@]}"; do mkdir -p "$dir/spool/$n" "$dir/tmp/$n"; done

  export SLURM_CONF="$conf"
  slurmctld -f "$conf" -i
  for n in "${nodes[@]}"; do slurmd -f "$conf" -N "$n"; done
  echo "$dir" >"$last"

  # Ready when both nodes are idle (normally within a second or two).
  local deadline=$((SECONDS + 30)) idle
  while :; do
    idle="$(sinfo -h -N -o '%N %t' 2>/dev/null | awk '$2=="idle"' | wc -l || true)"
    [ "$idle" -ge "${#nodes[@]}" ] && break
    if [ $SECONDS -ge $deadline ]; then
      tail -n 20 "$dir"/log/*.log >&2 || true
      die "the nodes are not idle after 30 s (logs above; stop it with: $0 down $dir)"
    fi
    sleep 0.2
  done
  echo "export SLURM_CONF=$conf"
}

down() {
  local dir="$1" conf="$1/slurm.conf" pid
  [ -f "$conf" ] || die "no local cluster in $dir (no slurm.conf)"
  export SLURM_CONF="$conf"
  # Jobs first, so their processes end the way Slurm ends them; then what is left.
  if [ -f "$dir/run/slurmctld.pid" ] && kill -0 "$(cat "$dir/run/slurmctld.pid")" 2>/dev/null; then
    timeout 10 scancel --full --quiet --user="$(id -un)" 2>/dev/null || true
    for _ in $(seq 1 25); do
      [ -z "$(timeout 5 squeue -h -o %i -t PD,R,CG,S 2>/dev/null || true)" ] && break
      sleep 0.2
    done
  fi
  for f in "$dir"/run/slurmd-*.pid "$dir/run/slurmctld.pid" "$dir/munge/munged.pid"; do
    [ -f "$f" ] || continue
    pid="$(cat "$f")"
    kill "$pid" 2>/dev/null || true
  done
  for _ in $(seq 1 50); do
    [ -z "$(cluster_pids "$conf")" ] && [ ! -S "$dir/munge/munge.socket" ] && break
    sleep 0.1
  done
  for pid in $(cluster_pids "$conf"); do kill -9 "$pid" 2>/dev/null || true; done
  if [ -f "$dir/munge/munged.pid" ]; then kill -9 "$(cat "$dir/munge/munged.pid")" 2>/dev/null || true; fi
  [ "$(cat "$last" 2>/dev/null)" = "$dir" ] && rm -f "$last"
  echo "stopped the local Slurm in $dir"
}

case "$cmd" in
  up)
    dir="${2:-${MLBENCH_SLURM_DIR:-}}"
    [ -n "$dir" ] || dir="$(mktemp -d -t mlbench-slurm-XXXXXX)"
    up "$dir"
    ;;
  down)
    dir="${2:-${MLBENCH_SLURM_DIR:-$(cat "$last" 2>/dev/null || true)}}"
    [ -n "$dir" ] || die "which cluster? give its directory (none was started by up here)"
    down "$dir"
    ;;
  *)
    echo "usage: $0 up|down [DIR]" >&2
    exit 2
    ;;
esac
