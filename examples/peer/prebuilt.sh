#!/usr/bin/env bash
# The single 3 KB read over tcp;ofi_rxm, side by side, from prebuilt binaries
# (for a quiet machine without Go): the C++ peer's get() (its target spins
# on fi_cq_read), this checkout's BenchmarkGet and the same benchmark at a
# base commit, alternating (peer, ours, base, peer, ours, base, ...), then
# medians of µs per row and the load average.
#
#   examples/peer/prebuilt.sh prepare [BASE]   # here, with Go: builds bin/peer/pre/
#   examples/peer/prebuilt.sh run [ROUNDS]     # there, no Go: reads bin/peer/pre/ (default 7 rounds)
#
# prepare needs PEER_GITDIR (a git dir of github.com/ORNL/DDStore; run.sh
# builds the peer) and BASE (default: the merge base with the main branch
# or HEAD~1). Copy the whole checkout (or bin/peer/pre/ with this script)
# to the quiet machine; it needs libfabric, MPICH (mpiexec.mpich) and
# python3 there. Wrap in flock /tmp/ddstore-bench.lock on a shared machine.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
MAIN=$(cd "$HERE/../.." && pwd)
PRE=${PRE:-$MAIN/bin/peer/pre}
BENCH='BenchmarkGet$/path=tcp$/row=3072$/batch=1$'
N=${N:-20000x} # our reads per run
SECS=${SECS:-1.5} # peer timed seconds per run

case "${1:-}" in
prepare)
    base=${2:-HEAD~1}
    export PATH=$PATH:/usr/local/go/bin
    mkdir -p "$PRE"
    BUILD="$PRE/build" "$HERE/run.sh" build >"$PRE/build.log" 2>&1 || { cat "$PRE/build.log"; exit 1; }
    cp "$PRE/build/bench" "$PRE/peer-bench"
    (cd "$MAIN" && go test -c -o "$PRE/engine.test" ./engine)
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    (cd "$MAIN" && git archive "$base" | tar -x -C "$tmp")
    (cd "$tmp" && go test -c -o "$PRE/engine.base.test" ./engine)
    {
        echo "ours: $(cd "$MAIN" && git rev-parse --short HEAD)"
        echo "base: $(cd "$MAIN" && git rev-parse --short "$base")"
        cat "$PRE/build/ddstore/PEER_COMMIT"
    } >"$PRE/versions.txt"
    cat "$PRE/versions.txt"
    ;;
run)
    rounds=${2:-7}
    for f in peer-bench engine.test engine.base.test; do
        [ -x "$PRE/$f" ] || { echo "no $PRE/$f: run '$0 prepare' on a machine with Go first" >&2; exit 1; }
    done
    out=$PRE/out-$(date -u +%Y%m%dT%H%M%S)
    mkdir -p "$out"
    cat "$PRE/versions.txt" >"$out/env.txt"
    { nproc; uname -a; } >>"$out/env.txt"
    ours() { # binary label
        (cd "$out" && "$PRE/$1" -test.run '^$' -test.bench "$BENCH" -test.benchtime "$N" 2>&1) |
            awk -v l="$2" '/^BenchmarkGet/ { for (i = 1; i < NF; i++) if ($(i+1) == "us/row") print l, $i }'
    }
    for r in $(seq "$rounds"); do
        p=$(FABRIC_IFACE=lo timeout 120 mpiexec.mpich -n 2 "$PRE/peer-bench" 1 3072 "$SECS" 128 "" "" random 2>&1 |
            grep '^RESULT.*verify=ok' | sed 's/.*us_per_row=\([0-9.]*\).*/\1/') || true
        echo "peer ${p:-FAILED}" | tee -a "$out/figures.txt"
        if [ $((r % 2)) = 1 ]; then
            ours engine.test ours | tee -a "$out/figures.txt"
            ours engine.base.test base | tee -a "$out/figures.txt"
        else
            ours engine.base.test base | tee -a "$out/figures.txt"
            ours engine.test ours | tee -a "$out/figures.txt"
        fi
    done
    python3 - "$out/figures.txt" <<'EOF'
import statistics, sys
v = {}
for line in open(sys.argv[1]):
    k, x = line.split()
    if x != "FAILED":
        v.setdefault(k, []).append(float(x))
m = {k: statistics.median(x) for k, x in v.items()}
for k in ("peer", "ours", "base"):
    if k in v:
        print(f"{k}: median {m[k]:.2f} µs/row (min {min(v[k]):.2f}, max {max(v[k]):.2f}, n={len(v[k])})")
if "ours" in v and "base" in v:  # one of each per round, in order
    q = sorted(o / b for o, b in zip(v["ours"], v["base"]))
    print(f"ours ÷ base per round: median {statistics.median(q):.3f} (all: {' '.join(f'{x:.3f}' for x in q)})")
if "peer" in m:
    for k in ("ours", "base"):
        if k in m:
            print(f"{k} ÷ peer: {m[k] / m['peer']:.3f}")
EOF
    echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg); figures in $out"
    ;;
*)
    sed -n '2,16p' "$0" >&2
    exit 2
    ;;
esac
