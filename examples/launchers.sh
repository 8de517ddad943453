#!/usr/bin/env bash
# launchers.sh: the same jobs under every launcher present, side by side.
#
#   1. Open: examples/opentime on OPEN_RANKS ranks (default 16): the
#      slowest rank's Open, median of REPS runs per launcher.
#   2. Train: examples/train on 4 ranks, 2048 rows per rank, EPOCHS epochs
#      (default 3): the epoch time (the slowest rank's step_s, epochs ≥ 1),
#      median over REPS runs, its ratio to ddrun's, and the per-epoch
#      losses, which must be identical under every launcher (exit 1 if not).
#
# Launchers: ddrun (always), MPICH mpiexec.mpich (when on PATH), srun (a running
# Slurm, else, as root, a one-machine Slurm started for the run by
# examples/slurm/local-slurm.sh; SRUN_ARGS adds flags, e.g. --mpi=pmi2). The runs
# alternate launchers within each repetition, so that all see the same load.
#   examples/launchers.sh            # REPS=5 OPEN_RANKS=16 EPOCHS=3
set -euo pipefail
cd "$(dirname "$0")/.."
REPS=${REPS:-5} OPEN_RANKS=${OPEN_RANKS:-16} EPOCHS=${EPOCHS:-3} ROWS=${ROWS:-2048}
go build -o bin/ ./cmd/ddrun ./examples/train ./examples/opentime
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

. examples/launch-lib.sh
find_launchers

for rep in $(seq "$REPS"); do
  for l in "${launchers[@]}"; do
    DDSTORE_LAUNCH_NS=$(date +%s%N) launch "$l" "$OPEN_RANKS" bin/opentime >>"$tmp/open-$l" 2>>"$tmp/err"
    launch "$l" 4 bin/train --epochs "$EPOCHS" --rows-per-rank "$ROWS" --json >"$tmp/train-$l-$rep" 2>>"$tmp/err"
  done
done

python3 - "$tmp" "$REPS" "${launchers[@]}" <<'EOF'
import json, statistics, sys
tmp, reps, launchers = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
rows, losses, epoch = {}, {}, {}
for l in launchers:
    opens = [json.loads(x) for x in open(f"{tmp}/open-{l}")]
    times, loss = [], None
    for rep in range(1, reps + 1):
        recs = [json.loads(x) for x in open(f"{tmp}/train-{l}-{rep}") if x.startswith("{")]
        by = {}
        for r in recs:
            by.setdefault(r["epoch"], []).append(r)
        times += [max(r["step_s"] for r in by[e]) for e in by if e >= 1]
        run_loss = [by[e][0]["loss"] for e in sorted(by)]
        for e in by:
            if len({r["loss"] for r in by[e]}) != 1:
                sys.exit(f"{l}: ranks disagree on the loss of epoch {e}")
        if loss is not None and run_loss != loss:
            sys.exit(f"{l}: losses differ between runs: {loss} vs {run_loss}")
        loss = run_loss
    losses[l], epoch[l] = loss, statistics.median(times)
    rows[l] = (statistics.median(o["open_s"] for o in opens), statistics.median(o["launch_to_open_s"] for o in opens),
               opens[0]["world"])
print(f"{'launcher':9} {'open_s':>8} {'launch→open_s':>14} {'ranks':>5} {'epoch_s':>8} {'÷ ddrun':>8}")
for l in launchers:
    o, lo, w = rows[l]
    print(f"{l:9} {o:8.3f} {lo:14.3f} {w:5d} {epoch[l]:8.3f} {epoch[l] / epoch['ddrun']:8.3f}")
same = all(losses[l] == losses["ddrun"] for l in launchers)
print("losses per epoch:", losses["ddrun"], "identical under every launcher" if same else "DIFFER:")
if not same:
    for l in launchers:
        print(f"  {l}: {losses[l]}")
    sys.exit(1)
EOF
