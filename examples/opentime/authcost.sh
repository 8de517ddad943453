#!/bin/bash
# authcost.sh: the added cost of authentication on Open (issue 30's goal:
# ≤ 5%, paired). Open of N ranks (default 16) under ddrun with the job
# secret (the default: ddrun hands every rank DDSTORE_TOKEN, and every
# control connection proves it) against DDSTORE_INSECURE=1 (no proofs),
# PAIRS pairs alternating ABBA; one line per run (sec|ins, open_s, add_s:
# the slowest rank's Open and Add), then the medians and the median of the
# pairs' ratios secret/insecure.
#
# From prebuilt binaries (no Go needed; BIN holds ddrun and opentime):
#   make authcost-bins                    # here: bin/ddrun, bin/opentime
#   BIN=bin flock /tmp/ddstore-bench.lock bash examples/opentime/authcost.sh
# Without BIN it uses bin/ under the repository root, building what is
# missing with $GO (default go).
set -eo pipefail
cd "$(dirname "$0")/../.."
PAIRS=${PAIRS:-12}
N=${N:-16}
if [[ -z ${BIN:-} ]]; then
  BIN=bin
  [[ -x bin/ddrun && -x bin/opentime ]] || ${GO:-go} build -o bin/ ./cmd/ddrun ./examples/opentime
fi
for f in "$BIN/ddrun" "$BIN/opentime"; do
  [[ -x $f ]] || { echo "authcost.sh: $f missing: build it with 'make authcost-bins' (go build -o bin/ ./cmd/ddrun ./examples/opentime)" >&2; exit 2; }
done
command -v python3 >/dev/null || { echo "authcost.sh: python3 is needed to read opentime's JSON" >&2; exit 2; }
out=$(mktemp)
trap 'rm -f "$out"' EXIT
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg); $(nproc) CPUs; $N ranks, $PAIRS pairs"
for i in $(seq "$PAIRS"); do
  if (( i % 2 )); then order="sec ins"; else order="ins sec"; fi
  for m in $order; do
    e=(); [[ $m == ins ]] && e=(DDSTORE_INSECURE=1)
    env "${e[@]}" "$BIN/ddrun" -n "$N" "$BIN/opentime" 2>/dev/null |
      python3 -c "import json,sys; r=json.loads(sys.stdin.readline()); assert (r['secret']=='insecure')==('$m'=='ins') and r['world']==$N, r; print('$i $m', r['open_s'], r['add_s'], r['secret'])" |
      tee -a "$out"
  done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$out" <<'PY'
import statistics, sys
runs = {}
for line in open(sys.argv[1]):
    i, m, o, a, src = line.split()
    runs.setdefault(int(i), {})[m] = float(o)
pairs = [r["sec"] / r["ins"] for r in runs.values() if "sec" in r and "ins" in r]
sec = statistics.median(r["sec"] for r in runs.values() if "sec" in r)
ins = statistics.median(r["ins"] for r in runs.values() if "ins" in r)
print(f"median Open: secret {sec:.3f} s, insecure {ins:.3f} s; median of {len(pairs)} pairs' ratios "
      f"secret/insecure {statistics.median(pairs):.3f} (min {min(pairs):.3f}, max {max(pairs):.3f}); goal ≤ 1.05")
PY
