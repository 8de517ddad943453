#!/usr/bin/env bash
# The doctor's read figures against package fabric's own benchmark, run
# alternately in one session (paired, ROUNDS rounds, medians): single
# 3 KB read latency (BenchmarkRead inflight=1) and 128-in-flight batches
# (inflight=128), on tcp;ofi_rxm over lo and on shm. Prints both medians,
# their ratio, and the load average. Run from the repository root:
#   flock /tmp/ddstore-bench.lock bash examples/doctor/compare.sh
set -euo pipefail
ROUNDS=${ROUNDS:-5}
GO=${GO:-go}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
$GO test -c -o "$tmp/fabric.test" ./fabric
$GO build -o "$tmp/doctor" ./cmd/doctor
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
for i in $(seq "$ROUNDS"); do
  "$tmp/fabric.test" -test.run '^$' -test.bench 'BenchmarkRead$/prov=(tcp|shm)/row=3072/inflight=(1|128)$' \
    -test.benchtime=2000x >>"$tmp/bench.txt"
  FABRIC_IFACE=lo "$tmp/doctor" --quiet --json --providers 'tcp;ofi_rxm,shm' >"$tmp/doctor-$i.json"
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
        p = "tcp" if r["provider"].startswith("tcp") else r["provider"]
        doc.setdefault((p, 1), []).append(r["latency_us"])
        doc.setdefault((p, 128), []).append(r["batch_us_per_row"])
print(f"{'provider':8} {'in flight':>9} {'fabric µs/row':>14} {'doctor µs/row':>14} {'doctor/fabric':>14}")
for k in sorted(bench):
    b, o = statistics.median(bench[k]), statistics.median(doc.get(k, [float('nan')]))
    print(f"{k[0]:8} {k[1]:>9} {b:>14.2f} {o:>14.2f} {o / b:>14.2f}")
PY
