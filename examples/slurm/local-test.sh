#!/usr/bin/env bash
# local-test.sh: the example trainer under a real Slurm on this machine.
# Starts a one-machine Slurm (local-slurm.sh), runs examples/train as
# 4 ranks under `srun -n 4` (the engine derives its rendezvous from the
# step's node list and ids, nothing else set), under `srun --mpi=pmi2 -n 4`
# (Slurm's PMI-2 wire protocol) and under ddrun, and fails unless every
# epoch's loss is bit-identical across the three. Then 16 ranks (MANY)
# under srun: their loss, every rank's control connections, and one rank
# killed found by every other (below). Stops Slurm on exit.
#   examples/slurm/local-test.sh        (root; make deps installs slurm-wlm and munge)
set -euo pipefail
cd "$(dirname "$0")/../.."
EPOCHS=${EPOCHS:-2} ROWS=${ROWS:-512}
dir=$(mktemp -d /tmp/ddstore-slurm.XXXXXX)
trap 'examples/slurm/local-slurm.sh stop "$dir"; rm -rf "$dir"' EXIT
go build -o bin/ ./cmd/ddrun ./examples/train ./examples/opentime
examples/slurm/local-slurm.sh start "$dir"
export SLURM_CONF=$dir/slurm.conf

run() { # name launcher...: the per-epoch losses, checked equal on every rank (N, default 4)
  local name=$1
  shift
  timeout 300 "$@" bin/train --epochs "$EPOCHS" --rows-per-rank "$ROWS" --json >"$dir/$name.jsonl" 2>"$dir/$name.err" ||
    { echo "local-test: $name failed:" >&2; cat "$dir/$name.err" >&2; exit 1; }
  python3 - "$dir/$name.jsonl" "$name" "${N:-4}" <<'EOF'
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
by = {}
for r in recs:
    by.setdefault(r["epoch"], set()).add(r["loss"])
ranks = {r["rank"] for r in recs}
if ranks != set(range(int(sys.argv[3]))) or any(len(v) != 1 for v in by.values()):
    sys.exit(f"{sys.argv[2]}: ranks {sorted(ranks)}, losses per epoch {by}")
print(" ".join(repr(next(iter(by[e]))) for e in sorted(by)))
EOF
}

# Which bootstrap each srun variant used (the derived tcp rendezvous, or
# Slurm's PMI-2 store) and the job id (the step's, "slurm-<job>.<step>").
# The job's secret (README "Security"): the token file with the derived
# tcp rendezvous, rank 0's random one through the PMI-2 store; every
# control connection proved it (Open succeeded).
boot() { timeout 120 "$@" bin/opentime | python3 -c 'import json,sys; r=json.load(sys.stdin); print(r["bootstrap"], r["job"], r["secret"])'; }
read -r tcpboot tcpjob tcpsecret < <(boot srun -n 4)
read -r pmiboot pmijob pmisecret < <(boot srun --mpi=pmi2 -n 4)
echo "srun -n 4 bootstrapped by $tcpboot as job $tcpjob, secret from $tcpsecret; srun --mpi=pmi2 -n 4 by $pmiboot as job $pmijob, secret from $pmisecret"
[[ $tcpboot == tcp && $pmiboot == pmi2 && $tcpjob == slurm-* && $pmijob == slurm-* ]] ||
  { echo "local-test: unexpected bootstrap" >&2; exit 1; }
[[ $tcpsecret == tokenfile && $pmisecret == launcher ]] || { echo "local-test: unexpected job secret" >&2; exit 1; }

ddrun=$(run ddrun bin/ddrun -n 4)
srun=$(run srun srun -n 4)
pmi2=$(run srun-pmi2 srun --mpi=pmi2 -n 4)
echo "ddrun:            $ddrun"
echo "srun -n 4:        $srun"
echo "srun --mpi=pmi2:  $pmi2"
if [[ "$ddrun" != "$srun" || "$ddrun" != "$pmi2" ]]; then
  echo "local-test: losses differ between launchers" >&2
  exit 1
fi
echo "local-test: srun, srun --mpi=pmi2 and ddrun give the same loss"

# MANY (16) ranks under srun -n MANY: the first 2 epochs give ddrun's
# loss; every rank's control connections (the trainer's ctrl_conns) are
# checked (mesh: MANY-1 on every rank; tree, one node here: 1 on a plain
# rank, MANY-1 on the agent); then one plain rank is killed (kill -9 of
# its pid) and every other rank must fail within the liveness deadline +
# KILL_SLACK s naming it (tree; mesh: it or a rank that failed before). (A killed host is examples/netns step 6: this
# Slurm has one node.)
MANY=${MANY:-16} S_ROWS=${S_ROWS:-64} LIVENESS=${LIVENESS:-3} KILL_SLACK=${KILL_SLACK:-2} VICTIM=${VICTIM:-5}
t6=$SECONDS
ref=$(N=$MANY ROWS=$S_ROWS EPOCHS=2 run ddrun-many bin/ddrun -n "$MANY")
timeout 300 env DDSTORE_LIVENESS=${LIVENESS}s srun -n "$MANY" --kill-on-bad-exit=0 bin/train --epochs 100000 --rows-per-rank "$S_ROWS" --json \
  >"$dir/many.jsonl" 2>"$dir/many.err" &
job=$!
for _ in $(seq 1800); do (( $(grep -c '"epoch":1,' "$dir/many.jsonl" || true) == MANY )) && break; sleep 0.1; done
(( $(grep -c '"epoch":1,' "$dir/many.jsonl" || true) == MANY )) ||
  { kill "$job"; tail -n 5 "$dir/many.err" >&2; echo "local-test: srun -n $MANY did not finish 2 epochs" >&2; exit 1; }
tup=$((SECONDS - t6))
pid=$(python3 - "$dir/many.jsonl" "$MANY" "$ref" "$VICTIM" <<'PY'
import json, sys
path, world, ref, victim = sys.argv[1], int(sys.argv[2]), sys.argv[3].strip(), int(sys.argv[4])
recs = [json.loads(l) for l in open(path) if l.startswith("{")]
loss = {e: {x["loss"] for x in recs if x["epoch"] == e} for e in (0, 1)}
got = " ".join(repr(next(iter(loss[e]))) if len(loss[e]) == 1 else f"{loss[e]}" for e in (0, 1))
print(f"srun -n {world}, first 2 epochs: {got}; ddrun -n {world}: {ref}", file=sys.stderr)
if got != ref:
    sys.exit("local-test: losses differ between srun and ddrun")
conns, agent, kind, pids = {}, {}, {x.get("control") for x in recs}, {}
for x in recs:
    conns[x["rank"]] = max(conns.get(x["rank"], 0), x["ctrl_conns"])
    agent[x["rank"]], pids[x["rank"]] = x.get("ctrl_agent", False), x["pid"]
kind = kind.pop() if len(kind) == 1 else kind
if kind == "mesh":
    bad = {r: n for r, n in conns.items() if n != world - 1}
elif kind == "tree":
    bad = {r: n for r, n in conns.items() if n != (world - 1 if agent[r] else 1)}
    if sorted(r for r in agent if agent[r]) != [0]:
        bad["agents"] = sorted(r for r in agent if agent[r])
else:
    bad = {"control": kind}
print(f"control connections ({kind}): " + ", ".join(f"{n} on {sum(1 for r in conns if conns[r] == n)} ranks" for n in sorted(set(conns.values()))), file=sys.stderr)
if bad or len(conns) != world:
    sys.exit(f"local-test: control connections out of bounds: {bad}")
print(pids[victim], kind)
PY
)
read -r pid kind <<<"$pid"
t0=$(date +%s%N)
kill -9 "$pid"
wait "$job" && { echo "local-test: srun -n $MANY went on after rank $VICTIM was killed" >&2; exit 1; } || true
python3 - "$dir/many.err" "$MANY" "$VICTIM" "$t0" "$(( (LIVENESS + KILL_SLACK) * 1000 ))" "$kind" <<'PY'
import re, sys
path, world, victim, t0, limit = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
failed = {}
for l in open(path):
    m = re.search(r"train: rank (\d+) failed at (\d+) ns \(unix\): (.*)", l)
    if m and int(m[1]) not in failed:
        failed[int(m[1])] = ((int(m[2]) - t0) // 1_000_000, m[3])
def named(msg):
    got = set()
    for spec in re.findall(r"\branks? ([0-9][0-9, -]*[0-9]|[0-9])", msg):
        for part in spec.split(","):
            a, _, b = part.strip().partition("-")
            if a.isdigit():
                got.update(range(int(a), int(b or a) + 1))
    return got
# The tree floods the death to every rank; under the mesh a rank may
# first hit a peer that failed on it and left (named instead): it must
# name the victim or such a rank.
kind = sys.argv[6]
ok = {victim} if kind == "tree" else {victim} | set(failed)
want = set(range(world)) - {victim}
bad = sorted(r for r in want if r not in failed or not named(failed[r][1]) & ok)
direct = sum(1 for r in want if r in failed and victim in named(failed[r][1]))
worst = max((failed[r][0] for r in want if r in failed), default=-1)
print(f"rank {victim} killed ({kind}): {len(want) - len(bad)} of {len(want)} other ranks failed, {direct} naming it, the last {worst} ms after (limit {limit} ms); rank 0: {failed.get(0, (0, '?'))[1][:200]}")
if bad:
    sys.exit(f"local-test: ranks {bad} did not fail naming rank {victim}: " + "; ".join(f"{r}: {failed.get(r, (0, 'nothing'))[1][:200]}" for r in bad[:3]))
if worst > limit:
    sys.exit("local-test: slower than the liveness deadline + KILL_SLACK")
PY
echo "local-test: $MANY ranks up and 2 epochs in ${tup}s, all in $((SECONDS - t6))s"
