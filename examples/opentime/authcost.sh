#!/bin/bash
# paired: secret (default) vs DDSTORE_INSECURE=1, alternating ABBA, 16 ranks under ddrun
cd "$(dirname "$0")/../.."
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
for i in 1 2 3 4 5 6 7 8 9 10 11 12; do
  if (( i % 2 )); then order="sec ins"; else order="ins sec"; fi
  for m in $order; do
    if [[ $m == ins ]]; then e="DDSTORE_INSECURE=1"; else e="X=1"; fi
    env $e bin/ddrun -n 16 bin/opentime 2>/dev/null | python3 -c "import json,sys; r=json.loads(sys.stdin.readline()); print('$m', r['open_s'], r['add_s'])"
  done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
