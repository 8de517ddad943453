#!/usr/bin/env bash
# local-test.sh: the example trainer under a real Slurm on this machine.
# Starts a one-machine Slurm (local-slurm.sh), runs examples/train as
# 4 ranks under `srun -n 4` (the engine derives its rendezvous from the
# step's node list and ids, nothing else set), under `srun --mpi=pmi2 -n 4`
# (Slurm's PMI-2 wire protocol) and under ddrun, and fails unless every
# epoch's loss is bit-identical across the three. Stops Slurm on exit.
#   examples/slurm/local-test.sh        (root; make deps installs slurm-wlm and munge)
set -euo pipefail
cd "$(dirname "$0")/../.."
EPOCHS=${EPOCHS:-2} ROWS=${ROWS:-512}
dir=$(mktemp -d /tmp/ddstore-slurm.XXXXXX)
trap 'examples/slurm/local-slurm.sh stop "$dir"; rm -rf "$dir"' EXIT
go build -o bin/ ./cmd/ddrun ./examples/train ./examples/opentime
examples/slurm/local-slurm.sh start "$dir"
export SLURM_CONF=$dir/slurm.conf

run() { # name launcher...: the per-epoch losses, checked equal on every rank
  local name=$1
  shift
  timeout 300 "$@" bin/train --epochs "$EPOCHS" --rows-per-rank "$ROWS" --json >"$dir/$name.jsonl" 2>"$dir/$name.err" ||
    { echo "local-test: $name failed:" >&2; cat "$dir/$name.err" >&2; exit 1; }
  python3 - "$dir/$name.jsonl" "$name" <<'EOF'
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
by = {}
for r in recs:
    by.setdefault(r["epoch"], set()).add(r["loss"])
ranks = {r["rank"] for r in recs}
if ranks != {0, 1, 2, 3} or any(len(v) != 1 for v in by.values()):
    sys.exit(f"{sys.argv[2]}: ranks {sorted(ranks)}, losses per epoch {by}")
print(" ".join(repr(next(iter(by[e]))) for e in sorted(by)))
EOF
}

# Which bootstrap each srun variant used (the derived tcp rendezvous, or
# Slurm's PMI-2 store) and the job id (the step's, "slurm-<job>.<step>").
# The job's secret (README "Security"): the token file with the derived
# tcp rendezvous, rank 0's random one through the PMI-2 store; every
# control connection proved it (Open succeeded).
boot() { timeout 120 "$@" bin/opentime | python3 -c 'import json,sys; r=json.load(sys.stdin); print(r["bootstrap"], r["job"], r["secret"])'; }
read -r tcpboot tcpjob tcpsecret < <(boot srun -n 4)
read -r pmiboot pmijob pmisecret < <(boot srun --mpi=pmi2 -n 4)
echo "srun -n 4 bootstrapped by $tcpboot as job $tcpjob, secret from $tcpsecret; srun --mpi=pmi2 -n 4 by $pmiboot as job $pmijob, secret from $pmisecret"
[[ $tcpboot == tcp && $pmiboot == pmi2 && $tcpjob == slurm-* && $pmijob == slurm-* ]] ||
  { echo "local-test: unexpected bootstrap" >&2; exit 1; }
[[ $tcpsecret == tokenfile && $pmisecret == launcher ]] || { echo "local-test: unexpected job secret" >&2; exit 1; }

ddrun=$(run ddrun bin/ddrun -n 4)
srun=$(run srun srun -n 4)
pmi2=$(run srun-pmi2 srun --mpi=pmi2 -n 4)
echo "ddrun:            $ddrun"
echo "srun -n 4:        $srun"
echo "srun --mpi=pmi2:  $pmi2"
if [[ "$ddrun" != "$srun" || "$ddrun" != "$pmi2" ]]; then
  echo "local-test: losses differ between launchers" >&2
  exit 1
fi
echo "local-test: srun, srun --mpi=pmi2 and ddrun give the same loss"
