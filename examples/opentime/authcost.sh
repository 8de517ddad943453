#!/bin/bash
# authcost.sh: Open of 16 ranks under ddrun with the job secret (the default)
# against DDSTORE_INSECURE=1, 12 pairs alternating ABBA; one line per run
# (sec|ins, open_s, add_s). Run under flock /tmp/ddstore-bench.lock.
cd "$(dirname "$0")/../.."
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
for i in 1 2 3 4 5 6 7 8 9 10 11 12; do
  if (( i % 2 )); then order="sec ins"; else order="ins sec"; fi
  for m in $order; do
    e=(); [[ $m == ins ]] && e=(DDSTORE_INSECURE=1)
    env "${e[@]}" bin/ddrun -n 16 bin/opentime 2>/dev/null | python3 -c "import json,sys; r=json.loads(sys.stdin.readline()); print('$m', r['open_s'], r['add_s'])"
  done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
