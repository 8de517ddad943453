"""A rank of a job that never calls close(), as ORNL pyddstore scripts do:
it opens a store (from the launcher's environment, or a two-rank tcp job
of its own with --tcp ADDR JOB RANK), adds a variable, reads every row,
checks it against its pattern and exits; the atexit hook closes the store
(and skips a store the script closed itself).
It prints "segment NAME" for its telemetry segment (in
$DDSTORE_TELEMETRY_DIR) and "rank R read N rows".
--fork: first forks a child that exits the normal way (atexit hooks run
in it) and checks that the store still works after it.
In a tcp job both ranks meet at a barrier once they have read; --crash
then leaves without the atexit hook (os._exit), as a rank that died
would, or --hang stays (until killed) without closing, as a rank that
hangs would.
--drop: drops its last reference to the store before exit (a store kept
in a local of main()): the hook closes it all the same.
--raise: ends by an uncaught error; --interrupt: by Ctrl-C (SIGINT to
itself, KeyboardInterrupt uncaught): the hook abandons the store then;
--term: by SIGTERM to itself; --own-term: with a SIGTERM handler of its
own (installed before the store opens) that exits with code 7.
--fork-term: forks a child that waits, ends it by SIGTERM and checks that
it ended by SIGTERM within 10 s and left the parent's store alone."""
import argparse
import gc
import signal
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import numpy as np  # noqa: E402
import ddstore  # noqa: E402
from conftest import add_pattern, pattern  # noqa: E402

ROW = (8,)


def say(line):
    """One line in one write: the ranks' lines reach the launcher's stdout
    whole (print writes the text and the newline apart)."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


ap = argparse.ArgumentParser()
ap.add_argument("--tcp", nargs=3, metavar=("ADDR", "JOB", "RANK"))
ap.add_argument("--timeout", type=float, default=60)
ap.add_argument("--fork", action="store_true")
ap.add_argument("--crash", action="store_true")
ap.add_argument("--hang", action="store_true")
ap.add_argument("--drop", action="store_true")
ap.add_argument("--raise", dest="raise_", action="store_true")
ap.add_argument("--interrupt", action="store_true")
ap.add_argument("--term", action="store_true")
ap.add_argument("--own-term", action="store_true")
ap.add_argument("--fork-term", action="store_true")
args = ap.parse_args()
if args.own_term:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(7))

with ddstore.DDStore(bootstrap={"method": "single", "world": 1, "rank": 0}, telemetry=False):
    pass  # closed before exit: the hook skips it (else ClosedError on stderr)

opts = {}
if args.tcp:
    addr, job, rank = args.tcp
    opts = {"node_mode": "fabric", "iface": "lo",
            "bootstrap": {"method": "tcp", "addr": addr, "job": job, "rank": int(rank), "world": 2, "timeout": 120}}
store = ddstore.DDStore(timeout=args.timeout, **opts)
tel = os.environ["DDSTORE_TELEMETRY_DIR"]
mine = [f for f in os.listdir(tel) if f.startswith("ddstore-") and f.endswith("-%d.tel" % store.rank)]
assert len(mine) == 1, os.listdir(tel)
say("segment %s" % mine[0])

n = add_pattern(store, "x", ROW, "int64")


def read_every_row():
    out = np.zeros((n,) + ROW, np.int64)
    store.get("x", out, 0)
    np.testing.assert_array_equal(out, pattern(np.arange(n), ROW, np.int64))
    rows = np.arange(n)[::-1]
    np.testing.assert_array_equal(store.get_batch("x", rows), pattern(rows, ROW, np.int64))


if args.fork:
    pid = os.fork()
    if pid == 0:
        sys.exit(0)  # the normal exit: atexit hooks run, and must leave the parent's store alone
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
    assert os.path.exists(os.path.join(tel, mine[0])), "the forked child's exit removed the parent's segment"
if args.fork_term:
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        os.write(w, b"x")  # the child runs Python code again: the fork hooks have run
        time.sleep(60)
        os._exit(0)
    os.close(w)
    os.read(r, 1)
    os.kill(pid, signal.SIGTERM)
    for _ in range(1000):
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        time.sleep(0.01)
    else:
        os.kill(pid, signal.SIGKILL)
        sys.exit("the forked child did not end within 10 s of SIGTERM")
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGTERM, status
    assert os.path.exists(os.path.join(tel, mine[0])), "the forked child's SIGTERM removed the parent's segment"
read_every_row()
say("rank %d read %d rows" % (store.rank, n))
if args.tcp:
    store.barrier()  # the other rank has read every row
if args.crash:
    os._exit(0)
if args.hang:
    time.sleep(3600)
if args.drop:
    del store
    gc.collect()
if args.raise_:
    raise RuntimeError("the script's own error")
if args.interrupt:
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(60)
if args.term or args.own_term:
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(60)
