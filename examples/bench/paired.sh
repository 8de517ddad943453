#!/usr/bin/env bash
# Side-by-side ratio of two go benchmarks: runs A and B back to back, N
# times, each in its own invocation of one test binary, and prints the
# median of each and the median of the N per-pair ratios A/B. The figure
# compared is the us/row metric (METRIC=ns/op, GB/s, ... picks another).
#   examples/bench/paired.sh PKG N BENCHTIME A B
#   examples/bench/paired.sh ./fabric 7 20000x \
#     'BenchmarkRead/^prov=tcp$/^row=3072$/^inflight=128$' \
#     'BenchmarkReadBaselineC/^prov=tcp$/^row=3072$/^inflight=128$'
# A and B are -test.bench patterns that each select one benchmark.
set -euo pipefail
[ $# -eq 5 ] || { sed -n '2,9p' "$0" >&2; exit 2; }
pkg=$1 n=$2 benchtime=$3 a=$4 b=$5 metric=${METRIC:-us/row}
cd "$(dirname "$0")/../.."
bin=$(mktemp -d)/bench.test
trap 'rm -rf "$(dirname "$bin")"' EXIT
go test -c -o "$bin" "$pkg"
figure() { # the metric of the one benchmark line that pattern $1 selects
  local out v
  out=$(cd "$pkg" && "$bin" -test.run '^$' -test.bench "$1" -test.benchtime "$benchtime" 2>&1) || true
  v=$(awk -v m="$metric" '/^Benchmark/ { for (i = 1; i < NF; i++) if ($(i+1) == m) v = $i } END { print v }' <<<"$out")
  if [ -z "$v" ]; then printf 'no %s figure from %s:\n%s\n' "$metric" "$1" "$out" >&2; exit 1; fi
  echo "$v"
}
as=() bs=() rs=()
for i in $(seq "$n"); do
  x=$(figure "$a") y=$(figure "$b")
  as+=("$x") bs+=("$y") rs+=("$(awk -v x="$x" -v y="$y" 'BEGIN { printf "%.4f", x / y }')")
done
median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }'; }
printf 'A %s: %s %s (median of %d)\n' "$a" "$(median "${as[@]}")" "$metric" "$n"
printf 'B %s: %s %s\n' "$b" "$(median "${bs[@]}")" "$metric"
printf 'A/B: %s (median of per-pair ratios; all: %s)\n' "$(median "${rs[@]}")" "${rs[*]}"
