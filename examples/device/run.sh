#!/usr/bin/env bash
# Everything ddstore checks on a lent GPU machine, from a bundle built
# elsewhere (make device-bundle: test binaries, bin/doctor, bin/ddtop,
# ddtopcost and libfabric.so.1 with its libraries; no Go, no CUDA toolkit
# and no libfabric package needed there). Each step has a time limit and
# writes its log to OUTDIR/<step>.log; the figures come out on stdout.
#
#   bash examples/device/run.sh BUNDLE OUTDIR [STEP...]
#
# Steps (all by default, in this order):
#   env       the machine: kernel, glibc, cores, memory, GPUs, memlock, /dev/shm
#   doctor    bin/doctor (table and --json): providers, memlock, MR cost,
#             two-process reads, interfaces, GPUs and their NUMA affinity
#   gpu       examples/gpu/check.sh: package gpu and the engine's device
#             path on the real driver, with their goals
#   telemetry BenchmarkTelemetryPaired (engine): telemetry on ÷ off for Get
#             and GetBatch of 128 local 3 KB rows; BenchmarkRecord (telemetry)
#   compare   doctor's reads against fabric's BenchmarkRead, alternating
#   ddtopcost ddtop's CPU share at 10 Hz over 64 synthetic ranks
# Environment: ROUNDS (compare, default 5), TEL_ROUNDS (default 300).
set -uo pipefail
cd "$(dirname "$0")/../.."
bundle=$(cd "${1:?bundle dir}" && pwd)
out=$(mkdir -p "${2:?out dir}" && cd "$2" && pwd)
shift 2
steps=${*:-env doctor gpu telemetry compare ddtopcost}
export LD_LIBRARY_PATH=$bundle/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
for d in /usr/local/nvidia/lib64 /usr/local/nvidia/lib; do
  [ -d "$d" ] && LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$d
done
status=0
step() { # step NAME SECONDS CMD...: run with a limit, log to $out/NAME.log, echo it too
  local name=$1 secs=$2 t0=$SECONDS rc
  shift 2
  echo "== $name (limit ${secs}s, load $(cut -d' ' -f1-3 /proc/loadavg))"
  timeout -k 5 "$secs" bash -c '"$@"' step "$@" >"$out/$name.log" 2>&1
  rc=$?
  cat "$out/$name.log"
  echo "== $name: exit $rc after $((SECONDS - t0)) s"
  [ $rc -eq 0 ] || status=1
}

machine() {
  uname -a; grep PRETTY /etc/os-release; ldd --version | head -1
  echo "cores: $(nproc)"; free -g | head -2
  echo "memlock: $(ulimit -l)"; df -h /dev/shm | tail -1
  command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total,pci.bus_id --format=csv
  for d in /sys/class/net/*; do echo "net ${d##*/}: $(cat "$d/operstate") mtu $(cat "$d/mtu")"; done
}
compare() {
  local i
  for i in $(seq "${ROUNDS:-5}"); do
    "$bundle/fabric.test" -test.run '^$' -test.bench 'BenchmarkRead$/prov=(tcp|shm)/row=3072/inflight=(1|128)$' \
      -test.benchtime=2000x >>"$out/compare-bench.txt" || return 1
    FABRIC_IFACE=lo "$bundle/doctor" --quiet --json --providers 'tcp;ofi_rxm,shm' >"$out/compare-doctor-$i.json" || return 1
  done
  cat "$out/compare-bench.txt"
}

export bundle out LD_LIBRARY_PATH
export -f machine compare
for s in $steps; do
  case $s in
  env) step env 30 machine ;;
  doctor)
    step doctor 60 "$bundle/doctor"
    timeout 60 "$bundle/doctor" --quiet --json >"$out/doctor.json" 2>"$out/doctor-json.err" || status=1 ;;
  gpu)
    step gpu ${GPU_LIMIT:-330} env GPU_CHECK_BIN="$bundle/gpu.test" ENGINE_CHECK_BIN="$bundle/engine.test" \
      BENCHTIME="${BENCHTIME:-300x}" ENGINE_BENCHTIME="${ENGINE_BENCHTIME:-30x}" bash examples/gpu/check.sh ;;
  telemetry)
    step telemetry 120 bash -c "cd engine && '$bundle/engine.test' -test.run '^\$' -test.bench 'BenchmarkTelemetryPaired' \
      -test.benchtime ${TEL_ROUNDS:-300}x && cd ../telemetry && '$bundle/telemetry.test' -test.run '^\$' \
      -test.bench 'BenchmarkRecord\$' -test.count 5 -test.benchtime 2000000x" ;;
  compare) step compare 150 compare ;;
  ddtopcost) step ddtopcost 90 "$bundle/ddtopcost" --ddtop "$bundle/ddtop" --for 20s ;;
  *) echo "unknown step $s" >&2; status=2 ;;
  esac
done
echo "== device run: $([ $status -eq 0 ] && echo PASS || echo FAIL)"
exit $status
