#!/usr/bin/env bash
# How much does ddtop, attached at 10 Hz, change a trainer's rows/s?
# Runs examples/train (4 ranks under ddrun, S=1, 1 worker, prefetch 2) PAIRS
# times without and with `ddtop --interval 100ms` (or $INTERVAL) open in a tmux pane on the
# job's telemetry, alternating, and prints each run's rows/s (per rank, epochs
# after the first) and the median with/without ratios. Build first: make build.
# ddtop lowers its own priority (--nice, default 19).
set -euo pipefail
cd "$(dirname "$0")/../.."
pairs=${PAIRS:-5}
epochs=${EPOCHS:-4}
rows=${ROWS_PER_RANK:-8192}
session=ddtop-overhead-$$
command -v tmux >/dev/null || { echo "needs tmux" >&2; exit 1; }

# rows/s of one run: mean over ranks and epochs >= 1 of rows/(fetch_s+compute_s).
rate() {
  awk -F'[:,}]' '{
      for (i = 1; i < NF; i++) { k = $i; gsub(/[ "{]/, "", k); v[k] = $(i+1) }
      if (v["epoch"] >= 1) { s += v["rows"] / (v["fetch_s"] + v["compute_s"]); n++ }
    } END { if (n) printf "%.0f\n", s / n; else print "nan" }'
}

run() {
  local dir; dir=$(mktemp -d)
  if [ "$1" = with ]; then
    tmux new-session -d -s "$session" -x 120 -y 40 "bin/ddtop --dir $dir --interval ${INTERVAL:-100ms}"
  fi
  DDSTORE_TELEMETRY_DIR=$dir bin/ddrun -n 4 bin/train --epochs "$epochs" --rows-per-rank "$rows" \
    --workers 1 --prefetch 2 --json --no-progress 2>/dev/null | rate
  tmux kill-session -t "$session" 2>/dev/null || true
  rm -rf "$dir"
}

without=() with=() ratios=()
for i in $(seq "$pairs"); do
  a=$(run without); b=$(run with)
  without+=("$a"); with+=("$b"); ratios+=("$(awk -v a="$a" -v b="$b" 'BEGIN { printf "%.4f", b / a }')")
  echo "pair $i: rows/s per rank without ddtop $a, with ddtop every ${INTERVAL:-100ms} $b"
done
median() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
mw=$(median "${without[@]}"); mh=$(median "${with[@]}")
awk -v a="$mw" -v b="$mh" -v r="$(median "${ratios[@]}")" 'BEGIN { printf "median rows/s per rank: without %s, with %s; with/without: %.4f (ratio of medians), %.4f (median of pair ratios)\n", a, b, b/a, r }'
