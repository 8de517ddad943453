#!/usr/bin/env bash
# Package gpu and the engine's device read path against the REAL driver, on
# a GPU machine (a few minutes on one H200; at most 9 minutes even when
# every step runs to its timeout).
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
#   4. engine:      the engine's device path on the real driver, real ranks
#                   over tcp;ofi_rxm and mapped shards (TestDeviceRead: every
#                   row copied back and checked, odd sizes, batches larger
#                   than the staging halves, async form, no allocation per
#                   call; TestDeviceSyncBusy; TestDeviceLoader)
#   5. engine benchmarks, side by side in one run, medians where noted:
#                   BenchmarkGetDevice: GetBatch of 128 rows into device ÷
#                   into host memory, goals ≤ 1.3 at 3 KB and 12.5 KB, ≤ 1.1
#                   at 1 MiB (path=tcp; path=local printed too);
#                   BenchmarkGPUSync: the telemetry gpu_sync phase per call,
#                   default stream busy ÷ idle: stream ≤ 1.5, device ≥ 10
#
# Usage (from anywhere in the repository):
#   examples/gpu/check.sh                  builds bin/gpu-check/{gpu,engine}.test (needs Go), runs them
#   GPU_CHECK_BIN=bin/gpu-check/gpu.test ENGINE_CHECK_BIN=bin/gpu-check/engine.test examples/gpu/check.sh
#                                          runs binaries built elsewhere (make gpu-check-build),
#                                          for machines without Go; no CUDA toolkit is needed
#                                          (the engine steps need libfabric.so.1 at run time)
#   DDSTORE_GPU_RUNTIME=cuda|hip DDSTORE_GPU_INDEX=N
#                                          picks the device (default: CUDA, else HIP; device 0);
#                                          the engine steps get DDSTORE_GPU_DEVICE=runtime:N from them
#   BENCHTIME=500x ENGINE_BENCHTIME=50x    iterations of each benchmark (gpu; engine)
# Exit status: 0 when every test passes and both goals are met.
set -uo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
bin=${GPU_CHECK_BIN:-}
ebin=${ENGINE_CHECK_BIN:-}
if [ -z "$bin" ] || [ -z "$ebin" ]; then
  PATH=$PATH:/usr/local/go/bin
  command -v go >/dev/null || { echo "check.sh: no Go here; build with 'make gpu-check-build' elsewhere and set GPU_CHECK_BIN and ENGINE_CHECK_BIN" >&2; exit 2; }
fi
if [ -z "$bin" ]; then
  bin=bin/gpu-check/gpu.test
  go test -c -o "$bin" ./gpu || exit 2
fi
if [ -z "$ebin" ]; then
  ebin=bin/gpu-check/engine.test
  go test -c -o "$ebin" ./engine || exit 2
fi
case $bin in /*) ;; *) bin=$root/$bin ;; esac
case $ebin in /*) ;; *) ebin=$root/$ebin ;; esac
[ -x "$bin" ] || { echo "check.sh: $bin is not an executable test binary" >&2; exit 2; }
[ -x "$ebin" ] || { echo "check.sh: $ebin is not an executable test binary" >&2; exit 2; }

# Containers often mount the driver outside the loader's default path.
for d in /usr/local/nvidia/lib64 /usr/local/nvidia/lib /opt/rocm/lib; do
  [ -d "$d" ] && LD_LIBRARY_PATH=${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$d
done
export LD_LIBRARY_PATH DDSTORE_GPU_REAL=1
if [ -z "${DDSTORE_GPU_DEVICE:-}" ] && [ -n "${DDSTORE_GPU_RUNTIME:-}${DDSTORE_GPU_INDEX:-}" ]; then
  export DDSTORE_GPU_DEVICE=${DDSTORE_GPU_RUNTIME:-auto}:${DDSTORE_GPU_INDEX:-0}
fi
cd gpu

status=0
run_tests() { # run_tests NAME SECONDS FILTER BINARY ARGS...: show the lines matching FILTER, judge by the exit status
  local name=$1 secs=$2 filter=$3
  shift 3
  timeout "$secs" "$@" 2>&1 | grep -E "$filter"
  local rc=${PIPESTATUS[0]}
  if [ "$rc" -ne 0 ]; then echo "FAIL: $name (exit $rc)"; status=1; else echo "PASS: $name"; fi
}
run_bench() { # run_bench SECONDS FILTER BINARY ARGS...: the output into $out and the exit status into $rc (for goal); show the lines matching FILTER
  local secs=$1 filter=$2
  shift 2
  out=$(timeout "$secs" "$@" 2>&1)
  rc=$?
  echo "$out" | grep -E "$filter"
}
metric() { # metric $2 of the benchmark line matching $1
  awk -v b="$1" -v m="$2" '$1 ~ b { for (i = 2; i < NF; i++) if ($(i+1) == m) print $i }' <<<"$out"
}
goal() { # goal NAME PATTERN METRIC OP LIMIT: metric of the last benchmark run ($out, $rc)
  local v
  v=$(metric "$2" "$3")
  if [ -z "$v" ]; then echo "FAIL: $1: no figure (benchmark exit $rc)"; status=1; return; fi
  if awk -v v="$v" -v l="$5" -v op="$4" 'BEGIN { exit !(op == "<=" ? v <= l : v >= l) }'; then
    echo "PASS: $1: $3 = $v (goal $4 $5)"
  else
    echo "FAIL: $1: $3 = $v (goal $4 $5)"; status=1
  fi
}

echo "== gpu check on $(hostname), $(date -u +%Y-%m-%dT%H:%M:%SZ)"
command -v nvidia-smi >/dev/null && nvidia-smi -L

echo "== 1. probe"
out=$(timeout 60 "$bin" -test.run '^TestProbe$/^real$' -test.v -test.count=1 2>&1)
rc=$?
grep '^GPU PROBE:' <<<"$out" || { echo "$out"; echo "FAIL: no probe (exit $rc)"; exit 1; }

echo "== 2. correctness against the real driver"
run_tests "correctness tests" 150 '^(--- |\s+--- |\s+\S+_test\.go:|PASS|FAIL|ok|panic)' \
  "$bin" -test.run '/^real$' -test.v -test.count=1 -test.timeout 140s

echo "== 3. BenchmarkSync: gpu_sync per call, default stream busy ÷ idle"
run_bench 120 '^(Benchmark|\s+bench_test\.go)' \
  "$bin" -test.run '^$' -test.bench '^BenchmarkSync$' -test.benchtime "${BENCHTIME:-500x}" -test.v
goal "sync=stream (per-reader stream sync)" '^BenchmarkSync/sync=stream' busy/idle '<=' 1.5
goal "sync=device (context-wide sync, the seed's)" '^BenchmarkSync/sync=device' busy/idle '>=' 10

# Engine steps: real ranks are this binary re-executed; the fabric loads
# libfabric.so.1 at run time (dlopen), which the tcp cases need.
cd "$root/engine"
have_fabric=0
ldconfig -p 2>/dev/null | grep -q 'libfabric\.so\.1 ' && have_fabric=1
for d in ${LD_LIBRARY_PATH//:/ }; do [ -e "$d/libfabric.so.1" ] && have_fabric=1; done
if [ $have_fabric -eq 0 ]; then
  echo "FAIL: engine steps: libfabric.so.1 not found (ldconfig -p, LD_LIBRARY_PATH); install libfabric1"; status=1
else
  echo "== 4. engine device path against the real driver"
  run_tests "engine device tests" 240 '^(--- |\s+--- |\s+\S+_test\.go:|\s+rank [0-9]+: (FAIL|device)|\s+GPU BUSY|PASS|FAIL|ok|panic)' \
    "$ebin" -test.run '^(TestDeviceRead|TestDeviceSyncBusy|TestDeviceLoader)$' -test.v -test.count=1 -test.timeout 230s

  echo "== 5. engine benchmarks: GetBatch 128 rows device ÷ host; gpu_sync busy ÷ idle"
  run_bench 180 '^(Benchmark|\s+device_bench_test\.go|--- SKIP)' \
    "$ebin" -test.run '^$' -test.bench '^(BenchmarkGetDevice|BenchmarkGPUSync)$' -test.benchtime "${ENGINE_BENCHTIME:-50x}" -test.v
  goal "GetBatch 128 × 3 KB, tcp" '^BenchmarkGetDevice/path=tcp/row=3072' gpu/host '<=' 1.3
  goal "GetBatch 128 × 12.5 KB, tcp" '^BenchmarkGetDevice/path=tcp/row=12800' gpu/host '<=' 1.3
  goal "GetBatch 128 × 1 MiB, tcp" '^BenchmarkGetDevice/path=tcp/row=1048576' gpu/host '<=' 1.1
  goal "engine gpu_sync, sync=stream" '^BenchmarkGPUSync/sync=stream' busy/idle '<=' 1.5
  goal "engine gpu_sync, sync=device" '^BenchmarkGPUSync/sync=device' busy/idle '>=' 10
fi

echo "== result: $([ $status -eq 0 ] && echo PASS || echo FAIL)"
exit $status
