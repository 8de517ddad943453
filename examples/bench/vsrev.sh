#!/usr/bin/env bash
# One go benchmark, this checkout against commit REV, paired: each of N
# rounds runs the benchmark once with each side's test binary (the order
# alternates between rounds) and takes the ratio here ÷ REV; prints the
# median of each side and of the per-round ratios (> 1: here is slower).
#   examples/bench/vsrev.sh REV PKG N BENCHTIME PATTERN [METRIC]
#   examples/bench/vsrev.sh 8f7cdb9 ./telemetry 9 2000000x 'BenchmarkRecord$' ns/op
# METRIC defaults to ns/op; cpu-ns/op is the CPU time (user + system, of
# examples/bench/cpuof) of a run of BENCHTIME (Nx) less that of a 1x run,
# over N: far steadier than wall time on a loaded machine. REV must be in
# the clone's history (not a shallow clone). Builds both binaries first, then runs; the last line
# names the commits and the load average.
set -euo pipefail
[ $# -ge 5 ] || { sed -n '2,10p' "$0" >&2; exit 2; }
rev=$1 pkg=$2 n=$3 benchtime=$4 pat=$5 metric=${6:-ns/op}
cd "$(dirname "$0")/../.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir "$tmp/rev"
git archive "$rev" | tar -x -C "$tmp/rev"
(cd "$tmp/rev" && go test -c -o "$tmp/rev.test" "$pkg")
go test -c -o "$tmp/here.test" "$pkg"
go build -o "$tmp/cpuof" ./examples/bench/cpuof
cpu() { # binary, source tree, benchtime: CPU µs of one run
  (cd "$2/$pkg" && "$tmp/cpuof" "$1" -test.run '^$' -test.bench "$pat" -test.benchtime "$3" 2>&1) | awk '/^cpuof:/ { print $2 }'
}
figure() { # binary, source tree: the metric of the one benchmark line
  local out v
  if [ "$metric" = cpu-ns/op ]; then
    local a b
    a=$(cpu "$1" "$2" 1x) b=$(cpu "$1" "$2" "$benchtime")
    awk -v a="$a" -v b="$b" -v n="${benchtime%x}" 'BEGIN { printf "%.1f\n", (b - a) * 1000 / (n - 1) }'
    return
  fi
  out=$(cd "$2/$pkg" && "$1" -test.run '^$' -test.bench "$pat" -test.benchtime "$benchtime" 2>&1) || true
  v=$(awk -v m="$metric" '/^Benchmark/ { for (i = 1; i < NF; i++) if ($(i+1) == m) v = $i } END { print v }' <<<"$out")
  if [ -z "$v" ]; then printf 'no %s figure from %s:\n%s\n' "$metric" "$1" "$out" >&2; exit 1; fi
  echo "$v"
}
median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }'; }
hs=() rs=() qs=()
for i in $(seq "$n"); do
  if [ $((i % 2)) = 1 ]; then
    x=$(figure "$tmp/here.test" .) y=$(figure "$tmp/rev.test" "$tmp/rev")
  else
    y=$(figure "$tmp/rev.test" "$tmp/rev") x=$(figure "$tmp/here.test" .)
  fi
  hs+=("$x") rs+=("$y") qs+=("$(awk -v x="$x" -v y="$y" 'BEGIN { printf "%.3f", x / y }')")
done
printf '%s %s: here %s, %s %s (medians of %d rounds)\n' "$pat" "$metric" "$(median "${hs[@]}")" "$rev" "$(median "${rs[@]}")" "$n"
printf 'here ÷ %s: %s (median of per-round ratios; all: %s)\n' "$rev" "$(median "${qs[@]}")" "${qs[*]}"
printf 'here %s%s vs %s; load average at the end: %s\n' "$(git rev-parse --short HEAD)" \
  "$( [ -n "$(git status --porcelain --untracked-files=no)" ] && echo '+changes')" "$(git rev-parse --short "$rev")" "$(cut -d' ' -f1-3 /proc/loadavg)"
