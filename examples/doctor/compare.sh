#!/usr/bin/env bash
# The doctor's read figures against package fabric's own benchmark, run
# alternately in one session (paired, ROUNDS rounds, ABBA order, medians):
# single 3 KB read latency (BenchmarkRead inflight=1) and 128-in-flight
# batches of 1024 rows (inflight=128), on tcp;ofi_rxm over lo and on shm.
# Both read exactly N rows per figure (-test.benchtime=Nx; doctor
# --read-count N: offsets drawn before, rows checked after the timed loop),
# from the same target (fabric.ServeTarget), the same provider and domain
# (lo), the same window (128), adaptive progress on both. Prints both
# medians, their ratio, and the load average.
#
# From prebuilt binaries (no Go needed; BIN holds doctor and fabric.test):
#   make doctor-compare-bins            # here: bin/doctor, bin/fabric.test
#   BIN=bin flock /tmp/ddstore-bench.lock bash examples/doctor/compare.sh
# Without BIN it builds them with $GO (default go) into a temporary folder.
set -euo pipefail
ROUNDS=${ROUNDS:-5}
N=${N:-2000}
GO=${GO:-go}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if [[ -n ${BIN:-} ]]; then
  doctor=$BIN/doctor fabric=$BIN/fabric.test
  for f in "$doctor" "$fabric"; do
    [[ -x $f ]] || { echo "compare.sh: $f missing: build it with 'make doctor-compare-bins' (go test -c -o bin/fabric.test ./fabric; go build -o bin/ ./cmd/doctor)" >&2; exit 2; }
  done
else
  $GO test -c -o "$tmp/fabric.test" ./fabric
  $GO build -o "$tmp/doctor" ./cmd/doctor
  doctor=$tmp/doctor fabric=$tmp/fabric.test
fi
command -v python3 >/dev/null || { echo "compare.sh: python3 is needed for the summary" >&2; exit 2; }
bench() {
  "$fabric" -test.run '^$' -test.bench 'BenchmarkRead$/prov=(tcp|shm)/row=3072/inflight=(1|128)$' \
    -test.benchtime="${N}x" >>"$tmp/bench.txt"
}
doc() {
  FABRIC_IFACE=lo "$doctor" --quiet --json --providers 'tcp;ofi_rxm,shm' --read-count "$N" >"$tmp/doctor-$1.json"
}
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg); $(nproc) CPUs; $N rows per figure, $ROUNDS rounds"
for i in $(seq "$ROUNDS"); do
  if (( i % 2 )); then bench; doc "$i"; else doc "$i"; bench; fi
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$tmp" "$ROUNDS" <<'PY'
import json, re, statistics, sys
d, n = sys.argv[1], int(sys.argv[2])
bench = {}
for line in open(d + "/bench.txt"):
    m = re.match(r"BenchmarkRead/prov=(\w+)/row=3072/inflight=(\d+)\S*\s+\d+\s+[\d.]+ ns/op.*?([\d.]+) us/row", line)
    if m:
        bench.setdefault((m[1], int(m[2])), []).append(float(m[3]))
doc = {}
for i in range(1, n + 1):
    for r in json.load(open(f"{d}/doctor-{i}.json"))["reads"]:
        if r.get("error"):
            print("doctor round", i, r["provider"], "error:", r["error"])
            continue
        p = "tcp" if r["provider"].startswith("tcp") else r["provider"]
        doc.setdefault((p, 1), []).append(r["latency_us"])
        doc.setdefault((p, 128), []).append(r["batch_us_per_row"])
print(f"{'provider':8} {'in flight':>9} {'fabric µs/row':>14} {'doctor µs/row':>14} {'doctor/fabric':>14}  (per round: doctor/fabric)")
for k in sorted(bench):
    b, o = statistics.median(bench[k]), statistics.median(doc.get(k, [float('nan')]))
    pairs = " ".join(f"{x / y:.2f}" for x, y in zip(doc.get(k, []), bench[k]))
    print(f"{k[0]:8} {k[1]:>9} {b:>14.2f} {o:>14.2f} {o / b:>14.2f}  ({pairs})")
PY
