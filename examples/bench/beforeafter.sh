#!/usr/bin/env bash
# Before ÷ after, paired: the hot-path benchmarks of this checkout (after)
# against commit REV (before), alternating in one sitting. Each round runs
# every benchmark once with the after binary and once with the before
# binary (the order alternates between rounds); the ratio after/before of
# each round is taken, and the table prints the median of each side and of
# the per-round ratios (> 1: after is slower).
#   examples/bench/beforeafter.sh REV [ROUNDS]     (default 5 rounds)
# Run it alone on the machine. Benchmarks, by package:
#   engine:    BenchmarkGet (Reader path; tcp: the default read mode, which
#              gathers batches on tcp; shm; local: a mapped peer shard, next
#              to a plain memcpy of the same rows) and BenchmarkGetRanges;
#   telemetry: BenchmarkRecord (one call record).
set -euo pipefail
[ $# -ge 1 ] || { sed -n '2,14p' "$0" >&2; exit 2; }
rev=$1 rounds=${2:-5}
cd "$(dirname "$0")/../.."
tmp=$(mktemp -d)
trap 'git worktree remove --force "$tmp/before" >/dev/null 2>&1 || true; rm -rf "$tmp"' EXIT
git worktree add -q --detach "$tmp/before" "$rev"
for side in after before; do
  src=.
  [ $side = before ] && src=$tmp/before
  for pkg in engine telemetry; do
    (cd "$src" && go test -c -o "$tmp/$side-$pkg.test" ./$pkg)
  done
done
# name | package | -test.bench pattern | metric
benches=(
  "GetBatch(128) 3 KB tcp|engine|BenchmarkGet/^path=tcp$/^row=3072$/^batch=128$|us/row"
  "GetBatch(128) 1 MiB tcp|engine|BenchmarkGet/^path=tcp$/^row=1048576$/^batch=128$|us/row"
  "GetBatch(128) 3 KB shm|engine|BenchmarkGet/^path=shm$/^row=3072$/^batch=128$|us/row"
  "GetBatch(128) 1 MiB shm|engine|BenchmarkGet/^path=shm$/^row=1048576$/^batch=128$|us/row"
  "single Get 3 KB tcp|engine|BenchmarkGet/^path=tcp$/^row=3072$/^batch=1$|us/row"
  "local GetBatch(128) 3 KB|engine|BenchmarkGet/^path=local$/^row=3072$/^batch=128$|us/row"
  "memcpy 128 × 3 KB|engine|BenchmarkGet/^path=memcpy$/^row=3072$/^batch=128$|us/row"
  "GetRanges|engine|BenchmarkGetRanges/^how=ranges$|us/row"
  "telemetry record|telemetry|BenchmarkRecord$|ns/op"
)
benchtime() { case $1 in *1\ MiB*) echo 300x ;; *single*) echo 3000x ;; *record*) echo 2000000x ;; *) echo 2000x ;; esac; }
figure() { # side, package, pattern, metric, benchtime
  local out v
  out=$(cd "$2" && "$tmp/$1-$2.test" -test.run '^$' -test.bench "$3" -test.benchtime "$5" 2>&1) || true
  v=$(awk -v m="$4" '/^Benchmark/ { for (i = 1; i < NF; i++) if ($(i+1) == m) v = $i } END { print v }' <<<"$out")
  if [ -z "$v" ]; then printf 'no %s figure from %s %s:\n%s\n' "$4" "$2" "$3" "$out" >&2; exit 1; fi
  echo "$v"
}
median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }'; }
declare -A A B R
for i in $(seq "$rounds"); do
  for spec in "${benches[@]}"; do
    IFS='|' read -r name pkg pat metric <<<"$spec"
    bt=$(benchtime "$name")
    if [ $((i % 2)) = 1 ]; then
      x=$(figure after "$pkg" "$pat" "$metric" "$bt"); y=$(figure before "$pkg" "$pat" "$metric" "$bt")
    else
      y=$(figure before "$pkg" "$pat" "$metric" "$bt"); x=$(figure after "$pkg" "$pat" "$metric" "$bt")
    fi
    A[$name]+="$x " B[$name]+="$y " R[$name]+="$(awk -v x="$x" -v y="$y" 'BEGIN { printf "%.4f", x / y }') "
  done
  echo "round $i of $rounds done" >&2
done
printf '%s\n' "after $(git rev-parse --short HEAD)$( [ -n "$(git status --porcelain)" ] && echo '+changes') vs before $(git rev-parse --short "$rev"); $rounds rounds; load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
printf '| benchmark | metric | before (median) | after (median) | after ÷ before (median of rounds) | per round |\n|---|---|---:|---:|---:|---|\n'
for spec in "${benches[@]}"; do
  IFS='|' read -r name pkg pat metric <<<"$spec"
  # shellcheck disable=SC2086
  printf '| %s | %s | %s | %s | %s | %s |\n' "$name" "$metric" "$(median ${B[$name]})" "$(median ${A[$name]})" "$(median ${R[$name]})" "${R[$name]% }"
done
