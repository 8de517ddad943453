#!/usr/bin/env bash
# noclose-runs.sh: only the no-close part of life-test.sh, under one control
# plane: Go (examples/train --exit-without-close) and Python (noclose.py)
# programs that never close their store, RUNS times each under
# mpiexec.mpich -n 4 and ddrun -n 4 (no Slurm), each run required to exit 0
# with 4 ranks' output. Prints "<lang> no-close under <launcher>: K of RUNS".
#   CONTROL=tree RUNS=20 examples/life/noclose-runs.sh   (make life-noclose)
set -euo pipefail
cd "$(dirname "$0")/../.."
RUNS=${RUNS:-20}
export DDSTORE_CONTROL=${CONTROL:-tree} PYTHONPATH=$PWD/python
work=$(mktemp -d /tmp/ddstore-noclose.XXXXXX)
trap 'rm -rf "$work"' EXIT
export DDSTORE_TELEMETRY_DIR=$work/tel
go build -o bin/ ./cmd/ddrun ./examples/train
go build -buildmode=c-shared -o bin/libddstore.so ./python/libddstore
bad=0
for l in "mpiexec.mpich -n 4" "bin/ddrun -n 4"; do
  for lang in Go Python; do
    ok=0
    for _ in $(seq "$RUNS"); do
      if [[ $lang == Go ]]; then
        cmd=(bin/train --epochs 1 --rows-per-rank 256 --json --exit-without-close) want='^{'
      else
        cmd=(/usr/bin/python3 examples/life/noclose.py) want='^ok '
      fi
      if timeout 120 $l "${cmd[@]}" >"$work/out" 2>"$work/err" && [[ $(grep -c "$want" "$work/out") == 4 ]]; then
        ok=$((ok + 1))
      else
        tail -2 "$work/err" >&2
      fi
    done
    echo "$lang no-close under $l ($DDSTORE_CONTROL): $ok of $RUNS"
    ((ok == RUNS)) || bad=1
  done
done
exit $bad
