#!/usr/bin/env bash
# netns-test.sh: the trainer across "hosts" that are network namespaces,
# each with its own hostname (a UTS namespace per rank) and address, joined
# by a bridge in a switch namespace (the host's own network is untouched).
#
#   1. 4 ranks on 2 hosts (2 per host: same-host shards are mapped, the
#      other host's are read through the fabric over the veth link, never
#      lo): the loss of every epoch equals a 4-rank ddrun run on one host.
#   2. The link of host 1 is cut mid-training: every rank on host 0 fails
#      within the liveness deadline + 1 s (DDSTORE_LIVENESS=3s) with an
#      error naming a rank of host 1, and nothing hangs.
#   3. FABRIC_IFACE=lo across the two hosts: Open fails on every rank,
#      naming both ranks, both hosts, the interface and the key.
# Needs root and the ip tool; exits 0 with "SKIP: <reason>" otherwise, or 1
# under DDSTORE_REQUIRE_ROOT=1 (make test).
#   examples/netns/netns-test.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
# skip WHY: exit 0 saying why, or fail under DDSTORE_REQUIRE_ROOT=1 (make test).
skip() {
  if [[ ${DDSTORE_REQUIRE_ROOT:-} == 1 ]]; then echo "FAIL: $1 (DDSTORE_REQUIRE_ROOT=1)" >&2; exit 1; fi
  echo "SKIP: $1"
  exit 0
}
[[ $(id -u) == 0 ]] || skip "netns-test needs root (network namespaces)"
command -v ip >/dev/null || skip "netns-test needs the ip tool (iproute2)"
command -v unshare >/dev/null || skip "netns-test needs unshare (util-linux)"
LIVENESS=${LIVENESS:-3}
EPOCHS=${EPOCHS:-2} ROWS=${ROWS:-512}
id=$$
sw=ddsw$id
hosts=(ddh0$id ddh1$id)
tmp=$(mktemp -d)
cleanup() {
  for p in $(cat "$tmp"/pids 2>/dev/null); do kill -9 "$p" 2>/dev/null || true; done
  for n in "${hosts[@]}" "$sw"; do ip netns del "$n" 2>/dev/null || true; done
  rm -rf "$tmp"
}
trap cleanup EXIT
if ! ip netns add "$sw" 2>"$tmp/err"; then
  skip "cannot create network namespaces: $(cat "$tmp/err")"
fi
ip -n "$sw" link add br0 type bridge
ip -n "$sw" link set br0 up
for i in 0 1; do
  h=${hosts[$i]}
  ip netns add "$h"
  ip link add "v$i$id" type veth peer name "p$i$id"
  ip link set "v$i$id" netns "$h"
  ip link set "p$i$id" netns "$sw"
  ip -n "$h" link set "v$i$id" name eth0
  ip -n "$h" addr add "10.77.0.$((i + 1))/24" dev eth0
  ip -n "$h" link set eth0 up
  ip -n "$h" link set lo up
  ip -n "$sw" link set "p$i$id" master br0
  ip -n "$sw" link set "p$i$id" up
done
go build -o bin/ ./cmd/ddrun ./examples/train

# start_job EPOCHS [FABRIC_TIMEOUT_S]: ranks 0,1 on host 0 and 2,3 on host 1,
# each in its own UTS namespace named after its host; outputs in
# $tmp/rank<r>.{out,err}. The fabric deadline defaults to the liveness one
# (the cut test needs reads to a cut host to fail that fast too).
start_job() {
  local epochs=$1 fabric_timeout=${2:-$LIVENESS} port=$((20000 + RANDOM % 10000))
  : >"$tmp/pids"
  for r in 0 1 2 3; do
    local hi=$((r / 2))
    ip netns exec "${hosts[$hi]}" unshare --uts sh -c "hostname host$hi; exec env \
      RANK=$r WORLD_SIZE=4 LOCAL_RANK=$((r % 2)) LOCAL_WORLD_SIZE=2 \
      MASTER_ADDR=10.77.0.1 MASTER_PORT=$port DDSTORE_JOB=netns-$id-$port DDSTORE_JOB_TOKEN=netns-$id-$port \
      DDSTORE_LIVENESS=${LIVENESS}s DDSTORE_FABRIC_TIMEOUT=${fabric_timeout}s DDSTORE_TIMEOUT=20s DDSTORE_BOOTSTRAP_TIMEOUT=20s ${EXTRA_ENV:-} \
      bin/train --epochs $epochs --rows-per-rank $ROWS --json" >"$tmp/rank$r.out" 2>"$tmp/rank$r.err" &
    echo $! >>"$tmp/pids"
  done
}

losses() { # the per-epoch losses of a JSONL file, checked equal across ranks
  python3 - "$@" <<'PY'
import json, sys
by = {}
for f in sys.argv[1:]:
    for l in open(f):
        if l.startswith("{"):
            r = json.loads(l)
            by.setdefault(r["epoch"], set()).add(r["loss"])
if not by or any(len(v) != 1 for v in by.values()):
    sys.exit(f"ranks disagree or no output: {by}")
print(" ".join(repr(next(iter(by[e]))) for e in sorted(by)))
PY
}

# 1. Same loss as one host. Nothing is cut here, so reads get the default
# fabric deadline: the first read of a pair also connects, which on a
# loaded 2-core machine can take longer than the liveness deadline.
bin/ddrun -n 4 bin/train --epochs "$EPOCHS" --rows-per-rank "$ROWS" --json >"$tmp/one.out"
one=$(losses "$tmp/one.out")
start_job "$EPOCHS" 10
fail=0
for p in $(cat "$tmp/pids"); do wait "$p" || fail=1; done
if (( fail )); then
  for r in 0 1 2 3; do echo "rank $r:"; tail -n 5 "$tmp/rank$r.err"; done >&2
  echo "netns-test: the two-host job failed" >&2
  exit 1
fi
two=$(losses "$tmp"/rank{0,1,2,3}.out)
grep -h "fabric\|train:" "$tmp"/rank0.err | head -n 2 || true
echo "one host:  $one"
echo "two hosts: $two"
[[ "$one" == "$two" ]] || { echo "netns-test: losses differ" >&2; exit 1; }

# 2. Cut host 1's link mid-training.
start_job 1000
for _ in $(seq 600); do grep -q '"epoch":0' "$tmp/rank0.out" 2>/dev/null && break; sleep 0.1; done
grep -q '"epoch":0' "$tmp/rank0.out" || { echo "netns-test: no epoch finished before the cut" >&2; exit 1; }
pids=($(cat "$tmp/pids"))
t0=$(date +%s%N)
ip -n "$sw" link set "p1$id" down
worst=0
for r in 0 1; do
  wait "${pids[$r]}" && { echo "netns-test: rank $r went on after the cut" >&2; exit 1; } || true
  # The trainer prints "failed at <unix ns>" the moment its collective or
  # read fails (before its cleanup, which may wait for reads in flight).
  at=$(grep -m1 -oE 'failed at [0-9]+ ns' "$tmp/rank$r.err" | grep -oE '[0-9]+' || true)
  [[ -n "$at" ]] || { echo "netns-test: rank $r printed no failure:" >&2; cat "$tmp/rank$r.err" >&2; exit 1; }
  t=$(( (at - t0) / 1000000 ))
  (( t > worst )) && worst=$t
  msg=$(grep -m1 'failed at' "$tmp/rank$r.err")
  echo "rank $r (host 0) failed $t ms after the cut: ${msg:0:320}"
  # fault.RankList writes "rank 2", "ranks 2-3" or "ranks 1, 3".
  grep -qE "rank [23]|ranks [0-9, -]*[23]" <<<"$msg" || { echo "netns-test: rank $r's error names no rank of host 1" >&2; exit 1; }
done
limit=$(( (LIVENESS + 1) * 1000 ))
echo "survivors failed within $worst ms of the cut (liveness ${LIVENESS}s, limit $limit ms)"
(( worst <= limit )) || { echo "netns-test: slower than the liveness deadline + 1 s" >&2; exit 1; }

# 3. Loopback offered across hosts: Open fails on every rank, naming both
# ranks, both hosts, the interface and the key (no timeout later).
for p in $(cat "$tmp/pids"); do kill -9 "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
ip -n "$sw" link set "p1$id" up
EXTRA_ENV=FABRIC_IFACE=lo start_job 1
for r in 0 1 2 3; do
  p=$(sed -n "$((r + 1))p" "$tmp/pids")
  wait "$p" && { echo "netns-test: rank $r opened with FABRIC_IFACE=lo across hosts" >&2; exit 1; } || true
  grep -q 'loopback interface "lo"' "$tmp/rank$r.err" && grep -q FABRIC_IFACE "$tmp/rank$r.err" ||
    { echo "netns-test: rank $r: unexpected error:" >&2; cat "$tmp/rank$r.err" >&2; exit 1; }
done
echo "FABRIC_IFACE=lo across hosts: $(grep -m1 -o 'rank [0-9] on host[0-9] offers[^:]*' "$tmp/rank0.err")"
echo "netns-test: ok"
