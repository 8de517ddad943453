#!/usr/bin/env bash
# control.sh: Open + 1 epoch of RANKS ranks (default 16) of examples/train
# under every launcher present (ddrun, mpiexec.mpich, srun: a running Slurm,
# else, as root, a one-machine one), with the mesh control plane against
# the tree (DDSTORE_CONTROL), REPS pairs per launcher alternating ABBA. Per
# run: the wall time from the launch to the last rank's exit (processes
# start, Open, one epoch, Close). Prints medians, the median of the pairs'
# ratios tree ÷ mesh, and checks that both planes print the same losses.
# Run under flock /tmp/ddstore-bench.lock.
#   examples/opentime/control.sh            # REPS=5 RANKS=16
#   BIN=DIR examples/opentime/control.sh    # prebuilt DIR/ddrun and DIR/train, no Go
set -euo pipefail
cd "$(dirname "$0")/../.."
REPS=${REPS:-5} RANKS=${RANKS:-16} ROWS=${ROWS:-512}
if [[ -z ${BIN:-} ]]; then
  BIN=bin
  go build -o bin/ ./cmd/ddrun ./examples/train
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
. examples/launch-lib.sh
find_launchers
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
for rep in $(seq "$REPS"); do
  for l in "${launchers[@]}"; do
    if (( rep % 2 )); then order="mesh tree"; else order="tree mesh"; fi
    for c in $order; do
      t0=$(date +%s%N)
      DDSTORE_CONTROL=$c launch "$l" "$RANKS" "$BIN/train" --epochs 1 --rows-per-rank "$ROWS" --json >"$tmp/out" 2>>"$tmp/err" ||
        { echo "$l $c failed:"; tail -5 "$tmp/err"; exit 1; }
      t1=$(date +%s%N)
      loss=$(python3 -c "import json,sys; print([json.loads(x)['loss'] for x in open(sys.argv[1]) if x.startswith('{')][0])" "$tmp/out")
      echo "$l $c $rep $(( (t1 - t0) / 1000000 )) $loss" >>"$tmp/runs"
    done
  done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$tmp/runs" <<'PY'
import statistics, sys
runs = [l.split() for l in open(sys.argv[1])]
print(f"{'launcher':9} {'mesh_s':>7} {'tree_s':>7} {'tree÷mesh':>10} {'pairs':>5}  losses")
for l in dict.fromkeys(r[0] for r in runs):
    t = {(r[1], r[2]): int(r[3]) / 1000 for r in runs if r[0] == l}
    loss = {r[4] for r in runs if r[0] == l}
    reps = sorted({r[2] for r in runs if r[0] == l})
    ratios = [t["tree", k] / t["mesh", k] for k in reps]
    print(f"{l:9} {statistics.median(t['mesh', k] for k in reps):7.2f} {statistics.median(t['tree', k] for k in reps):7.2f} "
          f"{statistics.median(ratios):10.3f} {len(reps):5d}  {'identical' if len(loss) == 1 else 'DIFFER: ' + str(loss)}")
    if len(loss) != 1:
        sys.exit(1)
PY
