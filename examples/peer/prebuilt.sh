#!/usr/bin/env bash
# The single 3 KB read over tcp;ofi_rxm, side by side, from prebuilt binaries
# (for a quiet machine without Go), alternating in one sitting, then medians
# of µs per row, the ratios and the load average. Each round runs, in an
# order that rotates from round to round:
#   peer        the C++ peer's get(), a random row per call (the historical
#               figure). Its reader spins on fi_cq_read for the completion;
#               its target rank spins on fi_cq_read (bench.cxx TARGET=poll).
#   peer-fixed  the same, one row every call (as BenchmarkGet batch=1 reads)
#   ours        BenchmarkGet path=tcp batch=1, defaults: the reader spins on
#               its CQ (within 2 ms of its last completion, while at most
#               half the cores' readers do); the target's progress thread is
#               adaptive (polls while reads keep coming, else sleeps on the
#               CQ's fd).   fabric: fabric.Reader's own read, same cluster.
#   ours-spin   the same with the target's progress thread spinning (as the
#               peer's target does).   fabric-spin: fabric.Reader alone.
#   base        BenchmarkGet path=tcp batch=1 at the base commit, defaults.
#
#   examples/peer/prebuilt.sh prepare [BASE]   # here, with Go: builds bin/peer/pre/
#   examples/peer/prebuilt.sh bundle           # here, after prepare: MPICH's launcher and every
#                                              # library into bin/peer/mpi/, both in bin/peerdev/peer.tgz
#   examples/peer/prebuilt.sh run [ROUNDS]     # there, no Go: reads bin/peer/pre/ (default 7 rounds)
#
# A machine without MPICH or libfabric (the lent GPU machine): bundle here, carry
# bin/peerdev, and there `tar -C bin -xzf bin/peerdev/peer.tgz` before run, which
# then puts bin/peer/mpi first on PATH and LD_LIBRARY_PATH.
#
# prepare needs PEER_GITDIR (a git dir of github.com/ORNL/DDStore; run.sh
# builds the peer); BASE defaults to the merge base with main (else
# HEAD~1). Copy the whole checkout (or bin/peer/pre/ with this directory)
# to the quiet machine; it needs libfabric, MPICH (mpiexec.mpich) and
# python3 there. Wrap in flock /tmp/ddstore-bench.lock on a shared machine.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
MAIN=$(cd "$HERE/../.." && pwd)
PRE=${PRE:-$MAIN/bin/peer/pre}
BENCH='BenchmarkGet$/path=(tcp|fabric-tcp)$/row=3072$/batch=1$'
BENCH1='BenchmarkGet$/path=tcp$/row=3072$/batch=1$'
N=${N:-20000x} # our reads per run
SECS=${SECS:-1.5} # peer timed seconds per run

case "${1:-}" in
prepare)
    base=${2:-$(cd "$MAIN" && git merge-base HEAD main 2>/dev/null || echo HEAD~1)}
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
        echo "ours: $(cd "$MAIN" && git describe --always --dirty)"
        echo "base: $(cd "$MAIN" && git rev-parse --short "$base")"
        cat "$PRE/build/ddstore/PEER_COMMIT"
    } >"$PRE/versions.txt"
    cat "$PRE/versions.txt"
    ;;
bundle)
    [ -x "$PRE/peer-bench" ] || { echo "no $PRE/peer-bench: run '$0 prepare' first" >&2; exit 1; }
    mpi=$MAIN/bin/peer/mpi
    rm -rf "$mpi" && mkdir -p "$mpi/bin" "$mpi/lib"
    cp -L "$(command -v mpiexec.mpich)" "$mpi/bin/mpiexec.mpich"
    cp -L "$(command -v hydra_pmi_proxy)" "$mpi/bin/"
    for f in "$PRE/peer-bench" "$mpi/bin/"* "$PRE/engine.test"; do ldd "$f"; done |
        awk '$3 ~ /^\// && $1 !~ /^(libc|libm|libresolv|libpthread|libdl|ld-linux)[.-]/ { print $3 }' |
        sort -u | xargs -I{} cp -L {} "$mpi/lib/"
    strip "$PRE/engine.test" "$PRE/engine.base.test"
    rm -rf "$PRE/build/ddstore/.git"
    mkdir -p "$MAIN/bin/peerdev"
    tar -C "$MAIN/bin" -czf "$MAIN/bin/peerdev/peer.tgz" peer/mpi peer/pre
    ls -la "$MAIN/bin/peerdev/peer.tgz"
    ;;
run)
    rounds=${2:-7}
    if [ -d "$MAIN/bin/peer/mpi" ]; then
        export PATH=$MAIN/bin/peer/mpi/bin:$PATH LD_LIBRARY_PATH=$MAIN/bin/peer/mpi/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    fi
    for f in peer-bench engine.test engine.base.test; do
        [ -x "$PRE/$f" ] || { echo "no $PRE/$f: run '$0 prepare' on a machine with Go first" >&2; exit 1; }
    done
    out=$PRE/out-$(date -u +%Y%m%dT%H%M%S)
    mkdir -p "$out"
    cat "$PRE/versions.txt" >"$out/env.txt"
    { nproc; uname -a; echo "load at the start: $(cut -d' ' -f1-3 /proc/loadavg)"; } >>"$out/env.txt"
    # engine BIN LABEL [PROGRESS]: BenchmarkGet's lone read through the
    # engine (LABEL) and through fabric.Reader alone (fabric[-PROGRESS]),
    # on one cluster whose target (rank 1) progresses in mode PROGRESS.
    engine() {
        local bin=$1 label=$2 prog=${3:-} flabel=fabric re=$BENCH
        [ -n "$prog" ] && flabel=fabric-$prog
        [ "$label" = base ] && re=$BENCH1
        (cd "$out" && "$PRE/$bin" -test.run '^$' -test.bench "$re" -test.benchtime "$N" ${prog:+-bench.progress "$prog"} 2>&1) |
            awk -v l="$label" -v f="$flabel" '/^BenchmarkGet/ { for (i = 1; i < NF; i++) if ($(i+1) == "us/row") print ($1 ~ /fabric-tcp/ ? f : l), $i }'
    }
    # peer ROWS LABEL: the C++ peer's get() (its reader and target both
    # spin on fi_cq_read); ROWS random (a random row per call: the
    # historical figure) or fixed (the same row, as BenchmarkGet reads).
    peer() {
        local p
        p=$(FABRIC_IFACE=lo timeout 120 mpiexec.mpich -n 2 "$PRE/peer-bench" 1 3072 "$SECS" 128 "" "" "$1" 2>&1 |
            grep '^RESULT.*verify=ok' | sed 's/.*us_per_row=\([0-9.]*\).*/\1/') || true
        echo "$2 ${p:-FAILED}"
    }
    runs=("peer random peer" "engine engine.test ours" "peer fixed peer-fixed" "engine engine.test ours-spin spin" "engine engine.base.test base")
    for r in $(seq "$rounds"); do
        for k in $(seq 0 $((${#runs[@]} - 1))); do # each round starts one run later
            ${runs[$(((k + r - 1) % ${#runs[@]}))]} | tee -a "$out/figures.txt"
        done
    done
    python3 "$HERE/prebuilt-summary.py" "$out/figures.txt" | tee "$out/summary.txt"
    echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg); figures in $out" | tee -a "$out/summary.txt"
    ;;
*)
    sed -n '2,26p' "$0" >&2
    exit 2
    ;;
esac
