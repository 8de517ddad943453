#!/usr/bin/env bash
# Side-by-side per-row read cost: the C++ ORNL DDStore (github.com/ORNL/DDStore)
# get() vs this project's BenchmarkGet, same machine, alternating rounds
# (peer, ours, peer, ours, ...), then a table of medians (summarize.py).
#
# usage: run.sh [ROUNDS]            (default 3)
#        run.sh build               (build the peer harness only)
# env:   PEER_GITDIR  bare git dir of ORNL/DDStore (a clone or mirror of github.com/ORNL/DDStore;
#                     required)
#        MAIN         our checkout (default: the checkout this script is in; only read)
#        BUILD        peer build dir (default MAIN/bin/peer/build)
#        OUT          logs + table (default MAIN/bin/peer/out)
#        REPS         peer runs per config per round (default 3; fixed-row variants: 1)
#        SECS         peer timed seconds per run (default 1.5)
#        SKIP_OURS=1 / SKIP_PEER=1
# needs: apt-get install libmpich-dev mpich libfabric-dev (Debian 12: MPICH 4.0.2
#        ch4:ucx, libfabric 1.17), Go at /usr/local/go/bin.
#
# Peer configurations (one `mpiexec.mpich -n 2` per run; rank 0 get()s one row at a
# time from rank 1's 128 MiB shard, see bench.cxx):
#   mpi  method 0 (MPI_Win_lock/MPI_Get/MPI_Win_unlock), unpatched peer sources
#   tcp  method 1 (fi_read), FABRIC_IFACE=lo -> tcp;ofi_rxm on lo, unpatched peer
#        sources; rank 1 polls its CQ (the peer has no progress thread; an idle
#        target hangs the first get)
#   shm  method 1, DDSTORE_FABRIC=shm, peer sources + shm-provider.patch; rank 1 polls
set -u
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
PEER_GITDIR=${PEER_GITDIR:-}
MAIN=${MAIN:-$(cd "$HERE/../.." && pwd)}
BUILD=${BUILD:-$MAIN/bin/peer/build}
OUT=${OUT:-$MAIN/bin/peer/out}
REPS=${REPS:-3}
SECS=${SECS:-1.5}
export PATH=$PATH:/usr/local/go/bin
OURS_BENCH='BenchmarkGet/path=(local|tcp|tcp-rma|memcpy)/row=(3072|1048576)/batch=(1|128)$'

build() {
    command -v mpicxx.mpich >/dev/null && [ -f /usr/include/rdma/fabric.h ] ||
        { echo "need: apt-get install -y libmpich-dev mpich libfabric-dev" >&2; exit 1; }
    mkdir -p "$BUILD"
    if [ ! -f "$BUILD/ddstore/src/common.cxx" ]; then
        [ -n "$PEER_GITDIR" ] || { echo "set PEER_GITDIR to a git dir of github.com/ORNL/DDStore" >&2; exit 1; }
        rm -rf "$BUILD/ddstore" && mkdir -p "$BUILD/ddstore"
        git --git-dir="$PEER_GITDIR" archive HEAD | tar -x -C "$BUILD/ddstore" || exit 1
        git --git-dir="$PEER_GITDIR" log -1 --format='%H %cd %s' > "$BUILD/ddstore/PEER_COMMIT"
    fi
    rm -rf "$BUILD/ddstore-shm" && cp -r "$BUILD/ddstore" "$BUILD/ddstore-shm"
    patch -s -d "$BUILD/ddstore-shm" -p1 < "$HERE/shm-provider.patch" || exit 1
    set -x
    mpicxx.mpich -O2 -g -std=c++17 -I"$BUILD/ddstore/include" "$HERE/bench.cxx" \
        "$BUILD/ddstore/src/ddstore.cxx" "$BUILD/ddstore/src/common.cxx" -lfabric -o "$BUILD/bench" || exit 1
    mpicxx.mpich -O2 -g -std=c++17 -I"$BUILD/ddstore-shm/include" "$HERE/bench.cxx" \
        "$BUILD/ddstore-shm/src/ddstore.cxx" "$BUILD/ddstore-shm/src/common.cxx" -lfabric -o "$BUILD/bench-shm" || exit 1
    { set +x; } 2>/dev/null
}

# run_peer LABEL ROUND ROWS_MODE ENV... -- BIN METHOD ROW
run_peer() {
    local label=$1 round=$2 rows=$3; shift 3
    local envs=()
    while [ "$1" != "--" ]; do envs+=("$1"); shift; done
    shift
    local bin=$1 method=$2 row=$3 log rc
    log=$(env "${envs[@]}" timeout 120 mpiexec.mpich -n 2 "$bin" "$method" "$row" "$SECS" 128 "" "" "$rows" 2>&1)
    rc=$?
    echo "$log" >> "$OUT/peer-$round.log"
    if [ $rc -eq 0 ] && grep -q '^RESULT.*verify=ok' <<<"$log"; then
        echo "PEER label=$label round=$round $(grep '^RESULT' <<<"$log")" | tee -a "$OUT/peer-$round.txt"
    else
        echo "PEER label=$label round=$round method=$method row=$row rows=$rows FAILED rc=$rc" | tee -a "$OUT/peer-$round.txt"
    fi
}

peer_round() {
    local r=$1 rep row
    for rep in $(seq "$REPS"); do
        for row in 3072 1048576; do
            run_peer mpi "$r" random -- "$BUILD/bench" 0 "$row"
            run_peer tcp "$r" random FABRIC_IFACE=lo -- "$BUILD/bench" 1 "$row"
            run_peer shm "$r" random DDSTORE_FABRIC=shm -- "$BUILD/bench-shm" 1 "$row"
        done
    done
    for row in 3072 1048576; do # same row every call, like ours' batch=1
        run_peer mpi "$r" fixed -- "$BUILD/bench" 0 "$row"
        run_peer tcp "$r" fixed FABRIC_IFACE=lo -- "$BUILD/bench" 1 "$row"
        run_peer shm "$r" fixed DDSTORE_FABRIC=shm -- "$BUILD/bench-shm" 1 "$row"
    done
}

ours_round() {
    local r=$1
    (cd "$MAIN" && go test ./engine -run '^$' -bench "$OURS_BENCH" -count 3 2>&1 | tee "$OUT/ours-$r.txt")
}

if [ "${1:-}" = build ]; then build; exit 0; fi
ROUNDS=${1:-3}
mkdir -p "$OUT"
build 2>&1 | tee "$OUT/build.log"
[ -x "$BUILD/bench" ] && [ -x "$BUILD/bench-shm" ] || exit 1
{
    date -u; uname -a; nproc; mpichversion | head -3; fi_info --version | head -2
    cat "$BUILD/ddstore/PEER_COMMIT" 2>/dev/null
    (cd "$MAIN" && git log -1 --format='ours: %H %s' 2>/dev/null); go version
} > "$OUT/env.txt"
for r in $(seq "$ROUNDS"); do
    [ "${SKIP_PEER:-0}" = 1 ] || { echo "== peer round $r"; peer_round "$r"; }
    [ "${SKIP_OURS:-0}" = 1 ] || { echo "== ours round $r"; ours_round "$r"; }
done
python3 "$HERE/summarize.py" "$OUT" | tee "$OUT/table.md"
