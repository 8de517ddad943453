#!/usr/bin/env bash
# Package gpu against the REAL driver, on a GPU machine (about a minute on
# one H200; at most 4 minutes even when every step runs to its timeout).
#
#   1. probe:       runtime, device, name, PCI bus id, compute capability,
#                   driver version, the library loaded
#   2. correctness: every behaviour test of package gpu, on the real driver
#                   (rows copied in and back, every byte checked; odd sizes
#                   and offsets; batches larger than the staging buffer;
#                   a busy default stream does not delay a reader stream
#                   and does delay a context sync; waits sleep; streams
#                   probed for queue sharing; no allocation per call)
#   3. benchmark:   BenchmarkSync, the gpu_sync phase per call (a 384 KiB
#                   batch copy and its wait), default stream busy (2 ms PTX
#                   spin per call) ÷ idle, measured side by side, medians:
#                   sync=stream goal ≤ 1.5, sync=device goal ≥ 10
#
# Usage (from anywhere in the repository):
#   examples/gpu/check.sh                  builds bin/gpu-check/gpu.test (needs Go), runs it
#   GPU_CHECK_BIN=bin/gpu-check/gpu.test examples/gpu/check.sh
#                                          runs a binary built elsewhere (make gpu-check-build),
#                                          for machines without Go; no CUDA toolkit is needed
#   DDSTORE_GPU_RUNTIME=cuda|hip DDSTORE_GPU_INDEX=N
#                                          picks the device (default: CUDA, else HIP; device 0)
#   BENCHTIME=500x                         iterations of each benchmark
# Exit status: 0 when every test passes and both goals are met.
set -uo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
bin=${GPU_CHECK_BIN:-}
if [ -z "$bin" ]; then
  bin=bin/gpu-check/gpu.test
  PATH=$PATH:/usr/local/go/bin
  command -v go >/dev/null || { echo "check.sh: no Go here; build with 'make gpu-check-build' elsewhere and set GPU_CHECK_BIN" >&2; exit 2; }
  go test -c -o "$bin" ./gpu || exit 2
fi
case $bin in /*) ;; *) bin=$root/$bin ;; esac
[ -x "$bin" ] || { echo "check.sh: $bin is not an executable test binary" >&2; exit 2; }

# Containers often mount the driver outside the loader's default path.
for d in /usr/local/nvidia/lib64 /usr/local/nvidia/lib /opt/rocm/lib; do
  [ -d "$d" ] && LD_LIBRARY_PATH=${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$d
done
export LD_LIBRARY_PATH DDSTORE_GPU_REAL=1
cd gpu # the tests read testdata/ from the package directory

status=0
echo "== gpu check on $(hostname), $(date -u +%Y-%m-%dT%H:%M:%SZ)"
command -v nvidia-smi >/dev/null && nvidia-smi -L

echo "== 1. probe"
out=$(timeout 60 "$bin" -test.run '^TestProbe$/^real$' -test.v -test.count=1 2>&1)
rc=$?
grep '^GPU PROBE:' <<<"$out" || { echo "$out"; echo "FAIL: no probe (exit $rc)"; exit 1; }

echo "== 2. correctness against the real driver"
timeout 150 "$bin" -test.run '/^real$' -test.v -test.count=1 -test.timeout 140s 2>&1 |
  grep -E '^(=== RUN|--- |\s+--- |\s+\S+_test\.go:|PASS|FAIL|ok|panic)' | grep -v '^=== RUN'
rc=${PIPESTATUS[0]}
if [ "$rc" -ne 0 ]; then echo "FAIL: correctness tests (exit $rc)"; status=1; else echo "PASS: correctness tests"; fi

echo "== 3. BenchmarkSync: gpu_sync per call, default stream busy ÷ idle"
out=$(timeout 120 "$bin" -test.run '^$' -test.bench '^BenchmarkSync$' -test.benchtime "${BENCHTIME:-500x}" -test.v 2>&1)
rc=$?
echo "$out" | grep -E '^(Benchmark|\s+bench_test\.go)'
metric() { # metric $2 of the benchmark line matching $1
  awk -v b="$1" -v m="$2" '$1 ~ b { for (i = 2; i < NF; i++) if ($(i+1) == m) print $i }' <<<"$out"
}
goal() { # goal NAME PATTERN OP LIMIT
  local v
  v=$(metric "$2" busy/idle)
  if [ -z "$v" ]; then echo "FAIL: $1: no figure (benchmark exit $rc)"; status=1; return; fi
  if awk -v v="$v" -v l="$4" -v op="$3" 'BEGIN { exit !(op == "<=" ? v <= l : v >= l) }'; then
    echo "PASS: $1: busy/idle = $v (goal $3 $4)"
  else
    echo "FAIL: $1: busy/idle = $v (goal $3 $4)"; status=1
  fi
}
goal "sync=stream (per-reader stream sync)" '^BenchmarkSync/sync=stream' '<=' 1.5
goal "sync=device (context-wide sync, the seed's)" '^BenchmarkSync/sync=device' '>=' 10

echo "== result: $([ $status -eq 0 ] && echo PASS || echo FAIL)"
exit $status
