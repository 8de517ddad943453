"""A pyddstore-style script that never calls close(): open the store from the
launcher's environment, add rows whose values derive from their global index,
read rows of every rank and check each one, then end. Prints one line
"ok <rank> <world> <rows checked>".
With --block: after the add, rank 0 sleeps while the others wait in a
barrier (a collective blocked on rank 0) until interrupted."""
import sys
import time

import numpy as np

import ddstore

ROWS, WIDTH = 64, 8


def say(line):
    """One line in one write, so that the ranks' lines reach the launcher's
    output whole."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def pattern(idx):
    idx = np.asarray(idx, dtype=np.int64)
    return (idx[:, None] * 1000 + np.arange(WIDTH)[None, :]).astype(np.int64)


st = ddstore.DDStore()
rank, world = st.rank, st.size
st.add("x", pattern(np.arange(rank * ROWS, (rank + 1) * ROWS)))
if "--block" in sys.argv:
    say("ready %d" % rank)
    if rank == 0:
        time.sleep(600)
    st.barrier()
    sys.exit(3)
idx = np.random.default_rng(rank).integers(0, world * ROWS, size=256)
out = st.get_batch("x", idx)
bad = np.flatnonzero((out != pattern(idx)).any(axis=1))
if bad.size:
    sys.exit("rank %d: row %d read %s, want %s" % (rank, idx[bad[0]], out[bad[0]], pattern(idx[bad[:1]])[0]))
say("ok %d %d %d" % (rank, world, len(idx)))
