#!/usr/bin/env bash
# The README's main job (make demo): examples/train as 4 ranks under ddrun on the
# embedded default config, with ddtop attached to their telemetry.
#   On a terminal: ddtop runs full screen; q stops ddtop and the job.
#   Without one:   the job runs to the end and a `ddtop --once` table taken
#                  during its last epochs is printed.
# RANKS, EPOCHS, ROWS_PER_RANK and SCALE change the job; extra arguments go to train.
set -euo pipefail
cd "$(dirname "$0")/.."
ranks=${RANKS:-4}
scale=${SCALE:-1}
interactive=0
if [ -t 0 ] && [ -t 1 ]; then interactive=1; fi
epochs=${EPOCHS:-$([ $interactive = 1 ] && echo 100 || echo 6)}
rows=${ROWS_PER_RANK:-8192}

teldir=$(mktemp -d "${TMPDIR:-/tmp}/ddstore-demo.XXXXXX")
log=$teldir/train.log
job=
cleanup() {
  if [ -n "$job" ] && kill -0 "$job" 2>/dev/null; then
    kill -TERM "$job" 2>/dev/null || true
    wait "$job" 2>/dev/null || true
  fi
  rm -rf "$teldir"
}
trap cleanup EXIT

echo "ddstore demo: $ranks ranks of examples/train (S=$scale, $epochs epochs), telemetry in $teldir"
DDSTORE_TELEMETRY_DIR=$teldir bin/ddrun -n "$ranks" -- \
  bin/train --epochs "$epochs" --rows-per-rank "$rows" --image-scale "$scale" --workers 1 --prefetch 2 --no-progress "$@" \
  >"$log" 2>&1 &
job=$!

if [ $interactive = 1 ]; then
  bin/ddtop --dir "$teldir"
  echo "ddtop closed; stopping the job. Its output:"
  kill -TERM "$job" 2>/dev/null || true
  wait "$job" 2>/dev/null || true
  job=
  tail -n 20 "$log"
  exit 0
fi

# No terminal: keep the latest snapshot while the job runs, print it at the end.
snap=$teldir/ddtop.txt
while kill -0 "$job" 2>/dev/null; do
  if bin/ddtop --once --dir "$teldir" --window 1s >"$snap.new" 2>/dev/null && grep -q live "$snap.new"; then
    mv "$snap.new" "$snap"
  fi
  sleep 1
done
rc=0
wait "$job" || rc=$?
job=
cat "$log"
echo
echo "ddtop --once, taken while the job ran:"
if [ -s "$snap" ]; then cat "$snap"; else echo "(the job ended before a snapshot was taken)"; fi
exit $rc
