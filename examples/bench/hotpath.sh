#!/usr/bin/env bash
# The hot-path cost figures of issue 29, from prebuilt binaries, so that a
# machine without Go can rerun them:
#
#   examples/bench/hotpath.sh build DIR [PREV]   # here (needs Go and git): binaries into DIR
#   DIR/hotpath.sh run [ROUNDS] [PAIRS]          # there (no Go): prints every figure
#
# build makes, from this checkout: telemetry.test, engine.test, ddtop, ddtopcost, cpuof, and
# ddtop-base (this ddtop built with -tags ddtop_readall: it reads the rings on every page, as
# before format v4); from commit 8f7cdb9 (telemetry format v1): telemetry-v1.test; from PREV
# (default c126efe, telemetry format v3, the last before v4): telemetry-prev.test and
# engine-prev.test. (A ddtop older than v4 refuses v4 segments, so the ranks view's base is
# built from this checkout.) EXPERIMENTS=1 also makes engine-noring.test (this checkout's
# Record without any ring write).
#
# run, each step paired in one run, alternating, with the load average before and after:
#   1. telemetry Record, CPU ns a call (cpuof: a 4000000x run less a 1x run), here, v1 and PREV,
#      ROUNDS rounds (default 9): medians and the median of per-round ratios;
#   2. BenchmarkTelemetryPaired (engine: telemetry on ÷ off by thread CPU time, single Get and
#      local GetBatch of 128 × 3 KB, 1000 rounds of 64-call blocks), ROUNDS runs: median of each;
#      engine-prev (format v3) and the experiment build interleaved;
#   3. ddtopcost: ddtop ranks view at 10 Hz over 64 synthetic segments, ddtop ÷ ddtop-base,
#      PAIRS pairs (default 5) of 15 s steady runs, then ddtop serve once.
# Needs script(1) (util-linux) for step 3. Run it alone on the machine.
set -euo pipefail
cmd=${1:-}
case $cmd in
build)
  dir=${2:?usage: hotpath.sh build DIR [PREV]} base=${3:-c126efe}
  export PATH=$PATH:/usr/local/go/bin
  root=$(cd "$(dirname "$0")/../.." && pwd)
  mkdir -p "$dir"
  dir=$(cd "$dir" && pwd)
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  cd "$root"
  go test -c -o "$dir/telemetry.test" ./telemetry
  go test -c -o "$dir/engine.test" ./engine
  go build -o "$dir/" ./cmd/ddtop ./examples/ddtopcost ./examples/bench/cpuof
  go build -tags ddtop_readall -o "$dir/ddtop-base" ./cmd/ddtop
  for rev in 8f7cdb9 "$base"; do
    mkdir "$tmp/$rev"
    git archive "$rev" | tar -x -C "$tmp/$rev"
  done
  (cd "$tmp/8f7cdb9" && go test -c -o "$dir/telemetry-v1.test" ./telemetry)
  # stripped (-s -w): the same code, a smaller make device-bundle
  (cd "$tmp/$base" && go test -c -ldflags="-s -w" -o "$dir/telemetry-prev.test" ./telemetry &&
    go test -c -ldflags="-s -w" -o "$dir/engine-prev.test" ./engine)
  if [ "${EXPERIMENTS:-0}" = 1 ]; then
    for x in noring; do
      mkdir "$tmp/$x"
      git archive HEAD | tar -x -C "$tmp/$x"
      git diff HEAD -- telemetry | (cd "$tmp/$x" && git apply --allow-empty) # uncommitted telemetry changes too
      w=$tmp/$x/telemetry/writer.go
      if [ $x = noring ]; then
        perl -0pi -e 's/(\tvar status uint64\n\tif c\.Err \{)/\tif true {\n\t\treturn\n\t}\n$1/' "$w"
      else
        perl -0pi -e 's/\tp := atomic\.AddUint64\(m\.p\(hRingHead\), 1\) - 1\n\tslot := g\.slot\(p\)\n\tlock := 2\*p \+ 1\n\tseq := m\.load\(slot \+ rSeq\)\n\tif seq&1 != 0 \|\| seq >= lock \|\| !m\.cas\(slot\+rSeq, seq, lock\) \{\n\t\tw\.abandon\(slot, p\)\n\t\treturn\n\t\}\n/\tp := m.load(hRingHead)\n\tm.put(hRingHead, p+1)\n\tslot := g.slot(p & 63)\n\tlock := 2*p + 1\n\tm.put(slot+rSeq, lock)\n\t_ = atomic.AddUint64\n/' "$w"
      fi
      if cmp -s "$w" "$root/telemetry/writer.go"; then
        echo "hotpath.sh: the $x patch no longer applies to telemetry/writer.go" >&2
        exit 1
      fi
      (cd "$tmp/$x" && go test -c -o "$dir/engine-$x.test" ./engine)
    done
  fi
  cp "$0" "$dir/hotpath.sh"
  {
    echo "commit $(git rev-parse --short HEAD)$( [ -n "$(git status --porcelain --untracked-files=no)" ] && echo '+changes'), prev $(git rev-parse --short "$base"), v1 8f7cdb9"
    go version
  } >"$dir/BUILD"
  echo "built into $dir: $(ls "$dir" | tr '\n' ' ')"
  ;;
run)
  rounds=${2:-9} pairs=${3:-5}
  cd "$(dirname "$0")"
  load() { cut -d' ' -f1-3 /proc/loadavg; }
  median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }'; }
  echo "# hotpath.sh run $(date -u '+%Y-%m-%d %H:%M UTC') on $(hostname -s): $(nproc) cores, $(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1)"
  cat BUILD
  echo

  echo "## 1. telemetry Record, CPU ns a call, here vs format v1 ($rounds rounds; load $(load))"
  cpu() { ./cpuof "./$1" -test.run '^$' -test.bench 'BenchmarkRecord$' -test.benchtime "$2" 2>&1 | awk '/^cpuof:/ { print $2 }'; }
  nsop() { local a b; a=$(cpu "$1" 1x) b=$(cpu "$1" 4000000x); awk -v a="$a" -v b="$b" 'BEGIN { printf "%.1f\n", (b - a) * 1000 / 3999999 }'; }
  hs=() vs=() ps=() qs=() rs=()
  for i in $(seq "$rounds"); do
    if [ $((i % 2)) = 1 ]; then h=$(nsop telemetry.test) v=$(nsop telemetry-v1.test) p=$(nsop telemetry-prev.test)
    else p=$(nsop telemetry-prev.test) v=$(nsop telemetry-v1.test) h=$(nsop telemetry.test); fi
    hs+=("$h") vs+=("$v") ps+=("$p")
    qs+=("$(awk -v x="$h" -v y="$v" 'BEGIN { printf "%.3f", x / y }')") rs+=("$(awk -v x="$p" -v y="$v" 'BEGIN { printf "%.3f", x / y }')")
  done
  echo "here: $(median "${hs[@]}") ns (all: ${hs[*]}); v1: $(median "${vs[@]}") ns (all: ${vs[*]}); prev: $(median "${ps[@]}") ns (all: ${ps[*]})"
  echo "here ÷ v1: $(median "${qs[@]}") (median of per-round ratios; all: ${qs[*]}); prev ÷ v1: $(median "${rs[@]}") (all: ${rs[*]}); load at the end $(load)"
  echo

  bins=(engine engine-prev)
  for x in noring; do [ -x "engine-$x.test" ] && bins+=("engine-$x"); done
  echo "## 2. telemetry on ÷ off by thread CPU time (BenchmarkTelemetryPaired, 1000 rounds; $rounds runs of: ${bins[*]}; load $(load))"
  declare -A r1 r128
  for i in $(seq "$rounds"); do
    for b in "${bins[@]}"; do
      out=$("./$b.test" -test.run '^$' -test.bench BenchmarkTelemetryPaired -test.benchtime 1000x 2>&1) || { echo "$out"; exit 1; }
      r1[$b]+=" $(awk '/batch=1[^0-9]/ { for (i = 1; i < NF; i++) if ($(i+1) == "on/off-cpu") print $i }' <<<"$out")"
      r128[$b]+=" $(awk '/batch=128/ { for (i = 1; i < NF; i++) if ($(i+1) == "on/off-cpu") print $i }' <<<"$out")"
    done
  done
  for b in "${bins[@]}"; do
    # shellcheck disable=SC2086
    echo "$b: single Get on ÷ off $(median ${r1[$b]}) (all:${r1[$b]}); GetBatch of 128 on ÷ off $(median ${r128[$b]}) (all:${r128[$b]})"
  done
  echo "load at the end $(load)"
  echo

  echo "## 3. ddtop ranks view at 10 Hz over 64 segments, ddtop ÷ ddtop-base, $pairs pairs (load $(load))"
  ./ddtopcost --ddtop ./ddtop --base ./ddtop-base --pairs "$pairs" --for 15s --warmup 3s --serve=false
  echo
  echo "## 3b. ddtop serve, 1 scrape/s (load $(load))"
  ./ddtopcost --ddtop ./ddtop --ranks=false --for 15s --warmup 3s
  ;;
*)
  sed -n '2,24p' "$0" >&2
  exit 2
  ;;
esac
