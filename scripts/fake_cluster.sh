#!/usr/bin/env bash
# A cluster of N hosts on this machine, for trying multi-node runs and their
# failures without one (root needed): each host a network namespace cabled by
# a veth pair to a switch (a bridge in a namespace of its own), and this
# shell's namespace on the switch too, as the head node mpirun and srun start
# from. Every process a launcher starts on a host runs in that host's
# namespace, with the host's name (a UTS namespace), and in a CPU cgroup of
# its own, so a host can be cut off the network or slowed down.
#
#   eval "$(scripts/fake_cluster.sh up 3)"      # 3 hosts; prints the exports mpirun needs
#   eval "$(scripts/fake_cluster.sh up 3 --slurm)"   # ... and slurmctld + a slurmd per host (SLURM_CONF)
#   mpirun -np 3 --map-by node build/trainer train configs/demo.toml --set parallel.tp=1 --set parallel.pp=1
#   scripts/fake_cluster.sh hosts               # their names, one a line
#   scripts/fake_cluster.sh cut HOST            # its link down
#   scripts/fake_cluster.sh slow HOST PERCENT   # its processes capped at PERCENT of one core
#   scripts/fake_cluster.sh restore HOST        # link up, no cap
#   scripts/fake_cluster.sh down                # everything `up` made is gone (also after a failure)
#
# `up` options: --slots S (ranks per host in the hostfile, default 1),
# --slurm. The other commands find the cluster through FAKE_CLUSTER_DIR,
# which `up` exports. Exit codes: 0 done, 2 bad use, 77 this machine cannot
# make namespaces or is not root (what a test then skips on), 1 anything else.
set -euo pipefail

die() { echo "fake_cluster: $*" >&2; exit "${code:-1}"; }
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2; exit 2; }

# The CPU cgroup hierarchy: v2's cpu.max, or v1's cpu controller.
cgroup_root() {
  if [[ -f /sys/fs/cgroup/cgroup.controllers ]] && grep -qw cpu /sys/fs/cgroup/cgroup.controllers; then
    echo "v2 /sys/fs/cgroup"
  elif [[ -f /sys/fs/cgroup/cpu/cpu.cfs_quota_us ]]; then
    echo "v1 /sys/fs/cgroup/cpu"
  elif [[ -f /sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us ]]; then
    echo "v1 /sys/fs/cgroup/cpu,cpuacct"
  fi
}

# cap HOST PERCENT|max: the CPU limit of the host's cgroup.
cap() {
  local dir="$CG/$1"
  [[ -d $dir ]] || die "no CPU cgroup for $1 (this machine has none to offer)"
  if [[ $CG_KIND == v2 ]]; then
    if [[ $2 == max ]]; then echo "max 100000" >"$dir/cpu.max"; else echo "$(($2 * 1000)) 100000" >"$dir/cpu.max"; fi
  else
    echo 100000 >"$dir/cpu.cfs_period_us"
    if [[ $2 == max ]]; then echo -1 >"$dir/cpu.cfs_quota_us"; else echo "$(($2 * 1000))" >"$dir/cpu.cfs_quota_us"; fi
  fi
}

load() {
  [[ -n ${FAKE_CLUSTER_DIR:-} && -f ${FAKE_CLUSTER_DIR}/state ]] ||
    die "no fake cluster: run 'eval \"\$(scripts/fake_cluster.sh up N)\"' first (FAKE_CLUSTER_DIR is not set or names none)"
  # shellcheck disable=SC1091
  . "$FAKE_CLUSTER_DIR/state"
}

host_index() {
  local i
  for i in "${!HOSTS[@]}"; do [[ ${HOSTS[$i]} == "$1" ]] && { echo "$i"; return; }; done
  code=2 die "$1 is not a host of this cluster (scripts/fake_cluster.sh hosts lists them)"
}

up() {
  local n="" slots=1 slurm=0
  while (($#)); do
    case $1 in
      --slots) slots=${2:?--slots needs a number}; shift 2 ;;
      --slurm) slurm=1; shift ;;
      *) [[ -z $n && $1 =~ ^[0-9]{1,3}$ ]] || usage; n=$1; shift ;;
    esac
  done
  [[ -n $n && $n -ge 1 && $n -le 200 ]] || code=2 die "up needs a number of hosts, 1 to 200"
  # Written into the hostfile as "HOST slots=S": a whole number or nothing.
  [[ $slots =~ ^[0-9]{1,4}$ && $slots -ge 1 ]] || code=2 die "--slots $slots: want ranks per host, a whole number 1 to 9999"
  [[ $(id -u) == 0 ]] || code=77 die "needs root to make network namespaces"
  command -v ip >/dev/null || code=77 die "ip (iproute2) is not installed: no network namespaces to make hosts of"
  local tag=$(($$ % 100000)) dir
  dir=$(mktemp -d "${TMPDIR:-/tmp}/fake_cluster.XXXXXX")
  local net="10.$((200 + tag % 50)).$((tag % 250))"
  local sw="fcsw$tag" head="fchd$tag" hosts=() links=()
  local i
  for ((i = 0; i < n; i++)); do hosts+=("fch${i}n$tag"); links+=("fcv${i}n$tag"); done  # no "_": ORTE cannot route to such names
  read -r cg_kind cg_root <<<"$(cgroup_root)" || true
  local cg=""
  [[ -n ${cg_root:-} ]] && cg="$cg_root/fake_cluster_$tag"
  {
    echo "TAG=$tag NET=$net SWITCH=$sw HEAD=$head CG=${cg@Q} CG_KIND=${cg_kind:-}"
    echo "HOSTS=(${hosts[*]})"
    echo "LINKS=(${links[*]})"
  } >"$dir/state"
  export FAKE_CLUSTER_DIR=$dir
  # A failure half-way leaves nothing behind.
  made=0
  trap '((made)) || down >/dev/null 2>&1 || true' EXIT
  ip netns add "$sw" 2>/dev/null || code=77 die "network namespaces cannot be made here"
  ip -n "$sw" link add br0 type bridge
  ip -n "$sw" link set br0 up
  ip -n "$sw" link set lo up
  ip -n "$sw" addr add "$net.254/24" dev br0  # the Slurm controller's address
  # The head node: this namespace on the switch.
  ip link add "$head" type veth peer name "fcph$tag"
  ip link set "fcph$tag" netns "$sw"
  ip -n "$sw" link set "fcph$tag" master br0 up
  ip addr add "$net.253/24" dev "$head"
  ip link set "$head" up
  [[ -n $cg ]] && mkdir -p "$cg"
  mkdir -p "$dir/tmp"
  for i in "${!hosts[@]}"; do
    local h=${hosts[$i]}
    ip netns add "$h"
    ip link add "${links[$i]}" type veth peer name "fcp${i}n$tag"
    ip link set "fcp${i}n$tag" netns "$sw"
    ip -n "$sw" link set "fcp${i}n$tag" master br0 up
    ip link set "${links[$i]}" netns "$h"
    ip -n "$h" addr add "$net.$((i + 1))/24" dev "${links[$i]}"
    ip -n "$h" link set "${links[$i]}" up
    ip -n "$h" link set lo up
    [[ -n $cg ]] && mkdir -p "$cg/$h"
    mkdir -p "$dir/tmp/$h"  # each host its own /tmp, as real hosts have (Open MPI's session files)
    echo "$h slots=$slots" >>"$dir/hostfile"
  done
  # How a launcher reaches a host: into its cgroup, then its namespaces (the
  # network, and a host name of its own: what gethostname() says there).
  cat >"$dir/agent" <<EOF
#!/bin/sh
# Open MPI's plm_rsh_agent for the fake cluster in $dir: HOST COMMAND...
host=\$1; shift
[ -n "$cg" ] && [ -d "$cg/\$host" ] && echo \$\$ >"$cg/\$host/cgroup.procs"
exec unshare --uts sh -c 'hostname "\$0" && exec ip netns exec "\$0" env TMPDIR="$dir/tmp/\$0" sh -c "\$1"' "\$host" "\$*"
EOF
  chmod +x "$dir/agent"
  if ((slurm)); then start_slurm "$dir" "$net" "$sw" "$cg" "${hosts[@]}"; fi
  made=1
  echo "export FAKE_CLUSTER_DIR=$dir"
  echo "export OMPI_MCA_plm_rsh_agent=$dir/agent OMPI_MCA_orte_default_hostfile=$dir/hostfile"
  echo "export OMPI_MCA_oob_tcp_if_include=$net.0/24 OMPI_MCA_btl_tcp_if_include=$net.0/24 OMPI_MCA_btl=self,tcp"
  echo "export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1"
  ((slurm)) && echo "export SLURM_CONF=$dir/slurm/slurm.conf"
  echo "# fake cluster: ${#hosts[@]} hosts (${hosts[*]}) on $net.0/24, this shell the head node ($net.253)" >&2
  return 0
}

# slurmctld in the switch's namespace, a slurmd per host (in the host's
# namespace and cgroup); waits until every node is idle.
start_slurm() {
  local dir=$1 net=$2 sw=$3 cg=$4
  shift 4
  local hosts=("$@") h i missing=()
  for t in slurmctld slurmd srun sinfo nsenter; do command -v "$t" >/dev/null || missing+=("$t"); done
  [[ -x /usr/sbin/munged ]] || missing+=(munged)
  ((${#missing[@]} == 0)) || code=77 die "Slurm is not installed here (${missing[*]} missing)"
  if ! pgrep -x munged >/dev/null; then
    mkdir -p /run/munge && chown munge:munge /run/munge
    [[ -f /etc/munge/munge.key ]] || runuser -u munge -- /usr/sbin/mungekey --create
    runuser -u munge -- /usr/sbin/munged
  fi
  local s="$dir/slurm"
  mkdir -p "$s/state"
  {
    echo "ClusterName=fakecluster"
    echo "SlurmctldHost=$(hostname -s)($net.254)"
    printf '%s\n' SlurmUser=root AuthType=auth/munge ProctrackType=proctrack/linuxproc TaskPlugin=task/none \
      SelectType=select/cons_tres SelectTypeParameters=CR_CPU MpiDefault=pmix JobRequeue=1 MailProg=/bin/true \
      ReturnToService=2 SlurmdParameters=config_overrides AccountingStorageType=accounting_storage/none \
      JobCompType=jobcomp/none SlurmctldPort=16817 SlurmdPort=16818
    echo "StateSaveLocation=$s/state"
    echo "SlurmdSpoolDir=$s/spool/%n"
    echo "SlurmctldPidFile=$s/slurmctld.pid"
    echo "SlurmdPidFile=$s/slurmd.%n.pid"
    echo "SlurmctldLogFile=$s/slurmctld.log"
    echo "SlurmdLogFile=$s/slurmd.%n.log"
    for i in "${!hosts[@]}"; do echo "NodeName=${hosts[$i]} NodeAddr=$net.$((i + 1)) CPUs=4 State=UNKNOWN"; done
    echo "PartitionName=hosts Nodes=$(IFS=,; echo "${hosts[*]}") Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES"
  } >"$s/slurm.conf"
  nsenter --net="/run/netns/$sw" slurmctld -f "$s/slurm.conf"
  for h in "${hosts[@]}"; do
    mkdir -p "$s/spool/$h" "$s/tmp_$h"
    sed "s|^StateSaveLocation|TmpFS=$s/tmp_$h\nStateSaveLocation|" "$s/slurm.conf" >"$s/slurm_$h.conf"
    # Into the host's cgroup first: the jobs slurmd starts inherit it.
    sh -c "[ -n '$cg' ] && echo \$\$ >'$cg/$h/cgroup.procs'; exec unshare --uts sh -c 'hostname $h && exec nsenter --net=/run/netns/$h slurmd -f $s/slurm_$h.conf -N $h'"
  done
  for ((i = 0; i < 240; i++)); do
    [[ $(SLURM_CONF="$s/slurm.conf" sinfo -h -o %T 2>/dev/null) == idle ]] && return 0
    sleep 0.25
  done
  die "the Slurm nodes did not become idle in 60 s (see $s/*.log)"
}

down() {
  load
  local pf h
  for pf in "$FAKE_CLUSTER_DIR"/slurm/*.pid; do [[ -f $pf ]] && kill "$(cat "$pf")" 2>/dev/null || true; done
  for h in "${HOSTS[@]}" "$SWITCH"; do
    if ip netns list | grep -qw "$h"; then
      ip netns pids "$h" 2>/dev/null | xargs -r kill -9 2>/dev/null || true
      ip netns del "$h" 2>/dev/null || true
    fi
  done
  ip link del "$HEAD" 2>/dev/null || true
  if [[ -n $CG && -d $CG ]]; then
    for h in "$CG"/*/; do [[ -d $h ]] && rmdir "$h" 2>/dev/null || true; done
    rmdir "$CG" 2>/dev/null || true
  fi
  rm -rf "$FAKE_CLUSTER_DIR"
  echo "fake cluster $TAG removed" >&2
}

cmd=${1:-}
(($#)) && shift
case $cmd in
  up) up "$@" ;;
  hosts) load; printf '%s\n' "${HOSTS[@]}" ;;
  cut) (($# == 1)) || usage; load; i=$(host_index "$1"); ip -n "$1" link set "${LINKS[$i]}" down ;;
  slow) (($# == 2)) && [[ $2 =~ ^[0-9]+$ && $2 -ge 1 && $2 -le 100 ]] || usage; load; host_index "$1" >/dev/null; cap "$1" "$2" ;;
  restore) (($# == 1)) || usage; load; i=$(host_index "$1"); ip -n "$1" link set "${LINKS[$i]}" up; [[ -z $CG ]] || cap "$1" max ;;
  down) down ;;
  *) usage ;;
esac
