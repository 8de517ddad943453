#!/usr/bin/env bash
# doctor-job.sh: doctor --job across 4 "hosts" (network namespaces, one
# rank each, own hostname, joined by a bridge in a switch namespace; the
# host's own network is untouched), with host 2's link rate-limited by
#   tc qdisc replace dev eth0 root tbf rate 50mbit burst 32kbit latency 50ms
# (this kernel has tbf, not netem). Each of RUNS runs must finish within
# 60 s and name host2 as the slow host, and no other host or link.
# Needs root, ip and tc; exits 0 with "SKIP: <reason>" otherwise. Run
# under the machine's singleton lock:
#   flock /tmp/ddstore-singleton.lock bash examples/netns/doctor-job.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
[[ $(id -u) == 0 ]] || { echo "SKIP: needs root (network namespaces)"; exit 0; }
for t in ip tc unshare; do command -v $t >/dev/null || { echo "SKIP: needs $t"; exit 0; }; done
RUNS=${RUNS:-5} SLOW=${SLOW:-2}
id=$$
sw=ddsw$id
hosts=(ddj0$id ddj1$id ddj2$id ddj3$id)
tmp=$(mktemp -d)
. examples/netns/lib.sh
trap netns_cleanup EXIT
addr_of() { echo "10.78.0.$(($1 + 1))"; }
if ! netns_switch; then
  echo "SKIP: cannot create network namespaces: $(cat "$tmp/err")"
  exit 0
fi
netns_hosts j k addr_of
tc -n "${hosts[$SLOW]}" qdisc replace dev eth0 root tbf rate 50mbit burst 32kbit latency 50ms
${GO:-go} build -o bin/ ./cmd/doctor

for run in $(seq "$RUNS"); do
  port=$((20000 + RANDOM % 10000))
  : >"$tmp/pids"
  t0=$(date +%s%N)
  for r in 0 1 2 3; do
    ip netns exec "${hosts[$r]}" unshare --uts sh -c "hostname host$r; exec env \
      RANK=$r WORLD_SIZE=4 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 \
      MASTER_ADDR=10.78.0.1 MASTER_PORT=$port DDSTORE_JOB=dj-$id-$port DDSTORE_JOB_TOKEN=dj-$id-$port \
      DDSTORE_TIMEOUT=50s DDSTORE_BOOTSTRAP_TIMEOUT=30s DDSTORE_FABRIC_TIMEOUT=20s \
      timeout 60 bin/doctor --job --json --quiet" >"$tmp/rank$r.out" 2>"$tmp/rank$r.err" &
    echo $! >>"$tmp/pids"
  done
  wait_ranks "doctor-job: run $run"
  took=$(( ($(date +%s%N) - t0) / 1000000 ))e-3
  python3 - "$tmp/rank0.out" "$SLOW" "$took" "$run" <<'PY'
import json, sys
rep = json.load(open(sys.argv[1]))
slow, took, run = "host" + sys.argv[2], float(sys.argv[3]), sys.argv[4]
links = [(l["FromHost"], l["ToHost"]) for l in rep["slow_links"]]
rates = ["%.3f" % l["gbps"] for l in rep["slow_links"]]
bad = [l for l in links if slow not in l]
print(f"run {run}: {took:.1f}s, median {rep['median_gbps']:.3f} GB/s, slow hosts {rep['slow_hosts']}, "
      f"slow links {['%s reads %s' % l for l in links]} at {rates} GB/s, findings {[f['rule'] + ' ' + f.get('host', '') for f in rep['findings']]}")
if rep["slow_hosts"] != [slow] or bad or not links or took > 60 or rep["disagreements"]:
    sys.exit(f"run {run}: want exactly {slow} named within 60 s; got hosts {rep['slow_hosts']}, other links {bad}, disagreements {rep['disagreements']}")
PY
done
echo "doctor-job: $RUNS of $RUNS runs named host$SLOW and nothing else"
