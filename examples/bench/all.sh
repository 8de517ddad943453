#!/usr/bin/env bash
# Reruns the figures of docs/BENCHMARKS.md that this machine can measure and
# writes them, with the machine, the commit and the load average before and
# after each step, to OUT (default docs/bench-runs/<UTC time>-<host>.md).
#   examples/bench/all.sh                 (make bench-all; 11 min on 2 vCPUs at load 3-10)
#   BENCH_ONLY='telemetry ddtop' examples/bench/all.sh    (some steps only)
# Steps (the section of docs/BENCHMARKS.md each one reruns):
#   fabric     Go against the C loop, 3 KB and 1 MiB, tcp and shm    (paired.sh, 5 pairs)
#   engine     local vs memcpy, tcp-rma vs fabric-tcp, single vs batch (paired.sh, 5 pairs)
#   telemetry  BenchmarkRecord here ÷ format v1 (8f7cdb9), by CPU time (vsrev.sh, 9 rounds);
#              BenchmarkTelemetryPaired (on ÷ off, local GetBatch of 128 × 3 KB)
#   tables     the seed's tables (bin/ddrun -n 2 bin/bench --quick)
#   ddtop      ddtop ranks view at 10 Hz and serve over 64 segments (bin/ddtopcost --for 15s)
#   refresh    BenchmarkRefresh/cost64 (CPU per refresh, in process)
#   replicas   BenchmarkStalledOwner (engine), BenchmarkStorageDeadRank (examples/train)
#   peer       the C++ peer (examples/peer/run.sh 1), only when PEER_GITDIR is set
# GPU figures need a GPU machine: `make gpu-check` there (see the gpu section).
# Run it alone (flock /tmp/ddstore-bench.lock make bench-all on a shared machine): every
# figure is a ratio of two things measured side by side, but load still moves them.
set -uo pipefail
cd "$(dirname "$0")/../.."
export PATH=$PATH:/usr/local/go/bin
only=${BENCH_ONLY:-fabric engine telemetry tables ddtop refresh replicas peer}
host=$(hostname -s)
out=${OUT:-docs/bench-runs/$(date -u +%Y-%m-%dT%H%M)-$host.md}
mkdir -p "$(dirname "$out")"
load() { cut -d' ' -f1-3 /proc/loadavg; }
{
  echo "# bench-all $(date -u '+%Y-%m-%d %H:%M UTC') on $host"
  echo
  echo "- commit: $(git rev-parse --short HEAD)$( [ -n "$(git status --porcelain --untracked-files=no)" ] && echo ' (+uncommitted changes)')"
  echo "- machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), $(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1), $(uname -sr)"
  echo "- go: $(go version | cut -d' ' -f3), libfabric: $(pkg-config --modversion libfabric 2>/dev/null || echo '?')"
  echo "- load average at the start: $(load)"
  echo "- steps: $only"
} >"$out"
echo "writing $out" >&2
start=$(date +%s)
step() { # name, command...: runs it, appends its output with timing and load
  local name=$1 t0 rc
  shift
  t0=$(date +%s)
  { echo; echo "## $name"; echo; echo "load before: $(load)"; echo; echo '```'; echo "\$ $*"; } >>"$out"
  bash -c "$*" >>"$out" 2>&1
  rc=$?
  { echo '```'; echo; echo "exit $rc, $(( $(date +%s) - t0 )) s, load after: $(load)"; } >>"$out"
  echo "$name: exit $rc, $(( $(date +%s) - t0 )) s" >&2
}
has() { [[ " $only " == *" $1 "* ]]; }
if has fabric; then
  for p in tcp shm; do for r in 3072:20000x 1048576:2000x; do
    step "fabric: Go ÷ C, $p, row ${r%%:*}, 128 in flight" \
      "METRIC=us/row examples/bench/paired.sh ./fabric 5 ${r#*:} 'BenchmarkRead/^prov=$p\$/^row=${r%%:*}\$/^inflight=128\$' 'BenchmarkReadBaselineC/^prov=$p\$/^row=${r%%:*}\$/^inflight=128\$' | tail -3"
  done; done
fi
if has engine; then
  step "engine: local GetBatch(128) ÷ memcpy, 3 KB" \
    "examples/bench/paired.sh ./engine 5 1s 'BenchmarkGet/^path=local\$/^row=3072\$/^batch=128\$' 'BenchmarkGet/^path=memcpy\$/^row=3072\$/^batch=128\$' | tail -3"
  step "engine: tcp-rma ÷ fabric-tcp, GetBatch(128), 3 KB" \
    "examples/bench/paired.sh ./engine 5 1s 'BenchmarkGet/^path=tcp-rma\$/^row=3072\$/^batch=128\$' 'BenchmarkGet/^path=fabric-tcp\$/^row=3072\$/^batch=128\$' | tail -3"
  step "engine: tcp single Get ÷ GetBatch(128) per row, 3 KB" \
    "examples/bench/paired.sh ./engine 5 1s 'BenchmarkGet/^path=tcp\$/^row=3072\$/^batch=1\$' 'BenchmarkGet/^path=tcp\$/^row=3072\$/^batch=128\$' | tail -3"
fi
if has telemetry; then
  step "telemetry: Record here ÷ format v1 (8f7cdb9), CPU ns a call" \
    "examples/bench/vsrev.sh 8f7cdb9 ./telemetry 9 4000000x 'BenchmarkRecord\$' cpu-ns/op"
  step "telemetry: on ÷ off, local Get and GetBatch(128) of 3 KB rows" \
    "go test ./engine -run '^\$' -bench BenchmarkTelemetryPaired -benchtime 400x | grep ^Benchmark"
fi
if has tables || has ddtop; then
  step "build" "make -s build && go build -o bin/ ./examples/ddtopcost"
fi
if has tables; then
  step "examples/bench: the seed's tables (--quick)" "bin/ddrun -n 2 bin/bench --quick"
fi
if has ddtop; then
  step "ddtop: ranks view at 10 Hz and serve, 64 segments" "bin/ddtopcost --ddtop bin/ddtop --for 15s"
fi
if has refresh; then
  step "ddtop: one refresh in process (BenchmarkRefresh/cost64)" \
    "go test ./ui -run '^\$' -bench 'BenchmarkRefresh/cost64' -benchtime 300x | grep ^Benchmark"
fi
if has replicas; then
  step "replicas: a stalled owner" "go test -run '^\$' -bench BenchmarkStalledOwner -benchtime 1x -count 3 ./engine | grep ^Benchmark"
  step "storage-only ranks: a dead storage rank" "go test -run '^\$' -bench BenchmarkStorageDeadRank -benchtime 1x -count 3 ./examples/train | grep ^Benchmark"
fi
if has peer; then
  if [ -n "${PEER_GITDIR:-}" ]; then
    step "the C++ peer against ours (one round)" "examples/peer/run.sh 1 | tail -20"
  else
    { echo; echo "## the C++ peer"; echo; echo "skipped: set PEER_GITDIR to a git dir of github.com/ORNL/DDStore (examples/peer/README.md)"; } >>"$out"
  fi
fi
echo >>"$out"
echo "total $(( $(date +%s) - start )) s; load average at the end: $(load)" >>"$out"
echo "wrote $out" >&2
