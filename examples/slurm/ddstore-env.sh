#!/bin/bash
# ddstore-env.sh: per-task wrapper for Slurm steps on Slingshot machines.
#   srun ... ./ddstore-env.sh ./train --epochs 8
#
# 1. NIC: pins each rank to a NIC of its node through FABRIC_IFACE (hsnN;
#    the engine maps it to the libfabric domain cxiN). DDSTORE_NICS_PER_NODE
#    (default 4) and the ranks per node decide how ranks share NICs.
# 2. VNI: Slurm gives every step SLINGSHOT_VNIS="<step VNI>,<job VNI>" when
#    the job asks --network=job_vni; the job VNI is always LAST. Steps that
#    read each other (a trainer and a second step, colocated with
#    srun --overlap) only see each other on the shared job VNI, so the
#    wrapper selects it. Single-node steps without SLINGSHOT_* variables
#    fall back to cxi's default service; nothing is set then.
# Nothing here is needed to start: plain `srun ./train` works too.
set -euo pipefail

nics=${DDSTORE_NICS_PER_NODE:-4}
local_id=${SLURM_LOCALID:-0}
# Tasks on this node: SLURM_NTASKS_PER_NODE when given, else this node's
# entry of the compressed SLURM_STEP_TASKS_PER_NODE ("8(x2)", "4,3"); the
# first entry is good enough for the NIC split.
tasks_per_node=${SLURM_NTASKS_PER_NODE:-}
if [[ -z "$tasks_per_node" ]]; then
  tpn=${SLURM_STEP_TASKS_PER_NODE:-${SLURM_TASKS_PER_NODE:-1}}
  tasks_per_node=${tpn%%[(,]*}
fi
[[ "$tasks_per_node" =~ ^[0-9]+$ ]] && (( tasks_per_node >= 1 )) || tasks_per_node=1
# Only on Slingshot nodes (hsnN interfaces); elsewhere the engine picks the
# interface that reaches the other nodes.
if [[ -z "${FABRIC_IFACE:-}" && -e /sys/class/net/hsn0 ]]; then
  per_nic=$(( (tasks_per_node + nics - 1) / nics ))
  (( per_nic < 1 )) && per_nic=1
  export FABRIC_IFACE="hsn$(( local_id / per_nic % nics ))"
fi

if [[ -n "${SLINGSHOT_VNIS:-}" ]]; then
  export FI_CXI_DEFAULT_VNI="${SLINGSHOT_VNIS##*,}"   # job VNI: the last entry
fi

# torchrun-style variables for trainers that read them. ddstore itself reads
# Slurm's and, with nothing else set, meets at a rendezvous that every task
# derives from SLURM_STEP_NODELIST, SLURM_JOB_ID and SLURM_STEP_ID (set
# MASTER_ADDR/MASTER_PORT to choose it yourself).
export RANK=${SLURM_PROCID:-0} WORLD_SIZE=${SLURM_NTASKS:-1}
export LOCAL_RANK=$local_id LOCAL_WORLD_SIZE=$tasks_per_node

exec "$@"
