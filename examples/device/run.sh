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
#   getdevice GetBatch of 128 rows into device ÷ host memory (3 KB and 1 MiB,
#             tcp) under the default settings, no polling (-bench.gpu.spin)
#             and 64 MiB staging halves (-bench.gpu.stage), alternating,
#             GETDEV_ROUNDS rounds (2)
#   telemetry BenchmarkTelemetryPaired (engine): telemetry on ÷ off for Get
#             and GetBatch of 128 local 3 KB rows; BenchmarkRecord (telemetry)
#   hotpath   examples/bench/hotpath.sh run: Record ÷ format v1, telemetry
#             on ÷ off, ddtop at 10 Hz ÷ the ddtop before pacing
#             (HOT_ROUNDS 3, HOT_PAIRS 2)
#   compare   examples/doctor/compare.sh: doctor's reads against fabric's
#             BenchmarkRead, alternating (ROUNDS, default 5)
#   authcost  examples/opentime/authcost.sh: Open of 16 ranks with the job
#             secret ÷ insecure, ABBA pairs (PAIRS, default 6)
#   ctrl      the control planes: all-reduce of 800 KB, tree ÷ plain TCP ring
#             ÷ mesh at 4 ranks (BenchmarkTreeVsTCPRing), then Open + 1
#             epoch of 16 ranks under ddrun, mesh against tree
#             (examples/opentime/control.sh, CTRL_REPS pairs, default 3)
#   ddtopcost ddtop's CPU share at 10 Hz over 64 synthetic ranks
# Environment: TEL_ROUNDS (telemetry, default 300).
set -uo pipefail
cd "$(dirname "$0")/../.."
bundle=$(cd "${1:?bundle dir}" && pwd)
out=$(mkdir -p "${2:?out dir}" && cd "$2" && pwd)
shift 2
steps=${*:-env doctor gpu getdevice hotpath compare authcost ctrl}
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
getdevice() { # GetBatchDevice ÷ GetBatch, three settings alternating
  local i cfg
  cd engine || return 1
  for i in $(seq "${GETDEV_ROUNDS:-2}"); do
    for cfg in default -bench.gpu.spin=-1ns -bench.gpu.stage=67108864; do
      echo "# round $i: $cfg"
      local set=()
      [ "$cfg" = default ] || set=("$cfg")
      DDSTORE_GPU_REAL=1 "$bundle/engine.test" -test.run '^$' "${set[@]}" \
        -test.bench 'BenchmarkGetDevice/path=tcp/row=(3072|1048576)$' -test.benchtime 50x 2>&1 | grep -E '^Benchmark.*row=' || return 1
    done
  done
}

export bundle out LD_LIBRARY_PATH
export -f machine getdevice
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
  getdevice) step getdevice 150 getdevice ;;
  hotpath) step hotpath 200 bash "$bundle/hotpath.sh" run "${HOT_ROUNDS:-3}" "${HOT_PAIRS:-2}" ;;
  compare) step compare 150 env BIN="$bundle" ROUNDS="${ROUNDS:-5}" bash examples/doctor/compare.sh ;;
  authcost) step authcost 150 env BIN="$bundle" PAIRS="${PAIRS:-6}" bash examples/opentime/authcost.sh ;;
  ctrl) step ctrl 150 bash -c "cd engine/mesh && '$bundle/mesh.test' -test.run '^\$' -test.bench TreeVsTCPRing \
      -test.benchtime 20x -test.count 3 && cd ../.. && BIN='$bundle' REPS=${CTRL_REPS:-3} bash examples/opentime/control.sh" ;;
  ddtopcost) step ddtopcost 90 "$bundle/ddtopcost" --ddtop "$bundle/ddtop" --for 20s ;;
  *) echo "unknown step $s" >&2; status=2 ;;
  esac
done
echo "== device run: $([ $status -eq 0 ] && echo PASS || echo FAIL)"
exit $status
