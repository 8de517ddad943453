# lib.sh: what the examples/netns scripts share. Source it after setting
# sw (the switch namespace), hosts (the host namespaces) and tmp (a
# scratch directory whose pids file lists the running ranks).

# netns_cleanup kills the ranks in $tmp/pids and deletes the namespaces
# and $tmp (an EXIT trap).
netns_cleanup() {
  for p in $(cat "$tmp"/pids 2>/dev/null); do { kill -9 "$p" && wait "$p"; } 2>/dev/null || true; done
  for n in "${hosts[@]}" "$sw"; do ip netns del "$n" 2>/dev/null || true; done
  rm -rf "$tmp"
}

# netns_switch creates the switch namespace $sw. Returns 1, the reason in
# $tmp/err, when this machine cannot create network namespaces.
netns_switch() { ip netns add "$sw" 2>"$tmp/err"; }

# netns_hosts HOSTVETH SWVETH ADDR_OF: a bridge br0 in $sw, and each host i
# of ${hosts[@]} joined to it by a veth pair: HOSTVETH<i><id> in the host,
# renamed eth0, at address $(ADDR_OF i)/24; SWVETH<i><id> on the bridge.
# Call it outside a condition, so that set -e stops the script where a step
# fails.
netns_hosts() {
  local hv=$1 sv=$2 addr_of=$3
  local i h
  ip -n "$sw" link add br0 type bridge
  ip -n "$sw" link set br0 up
  for i in "${!hosts[@]}"; do
    h=${hosts[$i]}
    ip netns add "$h"
    ip link add "$hv$i$id" type veth peer name "$sv$i$id"
    ip link set "$hv$i$id" netns "$h"
    ip link set "$sv$i$id" netns "$sw"
    ip -n "$h" link set "$hv$i$id" name eth0
    ip -n "$h" addr add "$($addr_of "$i")/24" dev eth0
    ip -n "$h" link set eth0 up
    ip -n "$h" link set lo up
    ip -n "$sw" link set "$sv$i$id" master br0
    ip -n "$sw" link set "$sv$i$id" up
  done
}

# wait_ranks WHAT: waits for every rank in $tmp/pids; when one failed, it
# prints the last lines of each rank's $tmp/rank<r>.err and "WHAT failed",
# and exits 1.
wait_ranks() {
  local fail=0 p r
  for p in $(cat "$tmp/pids"); do wait "$p" || fail=1; done
  if ((fail)); then
    r=0
    for p in $(cat "$tmp/pids"); do echo "rank $r:"; tail -n 5 "$tmp/rank$r.err"; r=$((r + 1)); done >&2
    echo "$1 failed" >&2
    exit 1
  fi
}
