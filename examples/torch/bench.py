#!/usr/bin/env python3
"""The Python binding's goals, measured side by side in one run (issue 14).
Run on 2 ranks, under the bench lock:

    flock /work/bench.lock bin/ddrun -n 2 /usr/bin/python3 examples/torch/bench.py

handoff   batches/s through ddstore.Loader in Python ÷ the same loader
          drained by a Go consumer (dds_epoch_drain), same store and
          settings: 3 KB rows, batch 64, 1 worker, prefetch 2. Epochs alternate.
fetchwait fetch wait per epoch (time inside next()) of a map-style Dataset
          whose __getitem__ calls get() for one sample, under
          DataLoader(num_workers=0) with the default collate, ÷ that of
          ddstore.Loader, both feeding the same small training step.
ranges    128 records of 1–16 KB owned by the other rank, read over the
          fabric (node_mode fabric, tcp on lo): 128 single get() calls ÷
          one get_ranges call, per record; reads in the calling thread
          (interruptible_reads=False), then on the library thread.
single    one get() of 1 KB owned by the other rank over the fabric, the read
          on a library thread (interruptible_reads, the default: Ctrl-C
          works) vs in the calling thread (interruptible_reads=False),
          alternating: the cost of the thread handoff.
Medians of --reps runs. Rank 0 measures; rank 1 serves its shard.
"""
import argparse
import os
import statistics
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.utils.data as tud

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import ddstore  # noqa: E402

ELEMS = 768  # 3 KB float32 rows


def rows(g):
    g = np.asarray(g, dtype=np.int64)
    return ((g[:, None] * 31 + np.arange(ELEMS)[None]) % 1009).astype(np.float32)


def handoff(store, reps, rows_per_rank):
    ld = ddstore.Loader(store, ["x"], batch_size=64, workers=1, prefetch=2, shuffle=True, seed=1)
    py, go, cpu = [], [], {"py": [], "go": []}
    for r in range(reps):
        for kind in ("py", "go"):
            ld.set_epoch(r)
            it = iter(ld)
            c0 = time.process_time()
            if kind == "go":
                n, _, secs = it.drain_in_go()
                go.append(n / secs)
            else:
                t0 = time.perf_counter()
                n = 0
                for b in it:
                    n += 1
                py.append(n / (time.perf_counter() - t0))
            cpu[kind].append((time.process_time() - c0) / n * 1e6)
    ld.close()
    ratios = [p / g for p, g in zip(py, go)]
    return (statistics.median(py), statistics.median(go), statistics.median(ratios),
            statistics.median(cpu["py"]), statistics.median(cpu["go"]))


class PerSample(tud.Dataset):
    def __init__(self, store, n):
        self.store, self.n = store, n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        out = np.empty((1, ELEMS), dtype=np.float32)
        self.store.get("x", out, int(i))
        return torch.from_numpy(out[0])


def fetchwait(store, reps, n):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(ELEMS, 256), nn.ReLU(), nn.Linear(256, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    def step(x):
        opt.zero_grad()
        model(x).sum().backward()
        opt.step()

    ds = PerSample(store, n)
    sampler = tud.DistributedSampler(ds, num_replicas=store.width, rank=store.rank, shuffle=True, seed=1)
    dl = tud.DataLoader(ds, batch_size=64, sampler=sampler, num_workers=0)
    ld = ddstore.Loader(store, ["x"], batch_size=64, workers=1, prefetch=2, shuffle=True, seed=1)
    waits = {"map": [], "loader": []}
    for r in range(reps):
        for kind, src in (("map", dl), ("loader", ld)):
            if kind == "map":
                sampler.set_epoch(r)
            else:
                ld.set_epoch(r)
            it = iter(src)
            wait = 0.0
            while True:
                t0 = time.perf_counter()
                try:
                    b = next(it)
                except StopIteration:
                    break
                wait += time.perf_counter() - t0
                step(b if kind == "map" else b["x"])
                del b
            waits[kind].append(wait)
    ld.close()
    ratios = [m / l for m, l in zip(waits["map"], waits["loader"])]
    return statistics.median(waits["map"]), statistics.median(waits["loader"]), statistics.median(ratios)


def ranges(store, reps, starts, lens):
    """Records owned by rank 1, read by rank 0 over the fabric."""
    bufs = [np.empty(n, dtype=np.uint8) for n in lens]
    out = np.empty(int(np.sum(lens)), dtype=np.uint8)  # reused, like bufs
    single, batched = [], []
    for _ in range(reps):
        t0 = time.perf_counter()
        for s, b in zip(starts, bufs):
            store.get("rec", b, int(s))
        single.append((time.perf_counter() - t0) / len(lens))
        t0 = time.perf_counter()
        buf, off = store.get_ranges("rec", starts, lens, out=out)
        batched.append((time.perf_counter() - t0) / len(lens))
    for i, b in enumerate(bufs):  # the values are right
        assert np.array_equal(b, buf[off[i]:off[i + 1]])
        assert np.array_equal(b, ((starts[i] + np.arange(lens[i])) * 2654435761 >> 5).astype(np.uint8))
    ratios = [s / b for s, b in zip(single, batched)]
    return statistics.median(single), statistics.median(batched), statistics.median(ratios)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--reps", type=int, default=7)
    p.add_argument("--rows", type=int, default=8192, help="3 KB rows per rank")
    p.add_argument("--only", default="handoff,fetchwait,ranges,single")
    a = p.parse_args()
    only = a.only.split(",")
    same = "handoff" in only or "fetchwait" in only
    if same:
        samenode(a, only)
    if "ranges" in only or "single" in only:
        fabric(a, only, same)


def samenode(a, only):
    store = ddstore.DDStore(timeout=1800)
    rank = store.rank
    assert store.size == 2, "run on 2 ranks"
    store.add("x", rows(np.arange(rank * a.rows, (rank + 1) * a.rows)))
    store.barrier()
    if rank == 0:
        if "handoff" in only:
            py, go, r, cpy, cgo = handoff(store, a.reps, a.rows)
            print("handoff  (same node, 3 KB rows, batch 64, 1 worker, prefetch 2): Python %.0f batches/s, "
                  "Go %.0f batches/s, Python/Go %.2f; process CPU per batch: Python consumer %.1f us, "
                  "Go consumer %.1f us" % (py, go, r, cpy, cgo), flush=True)
        if "fetchwait" in only:
            m, l, r = fetchwait(store, a.reps, 2 * a.rows)
            print("fetchwait (same node, 3 KB rows, batch 64): map-style get() per sample %.4f s/epoch, "
                  "ddstore.Loader %.4f s/epoch, ratio %.1f" % (m, l, r), flush=True)
    store.barrier()
    store.close()


def single(store, reps, starts):
    """1 KB get() of records owned by rank 1: s/call with the read on a
    library thread, and in the calling thread."""
    buf = np.empty(1024, dtype=np.uint8)
    took = {True: [], False: []}
    for _ in range(reps):
        for on in (True, False):
            store.interruptible_reads = on
            t0 = time.perf_counter()
            for s in starts:
                store.get("rec", buf, int(s))
            took[on].append((time.perf_counter() - t0) / len(starts))
            assert np.array_equal(buf, ((int(starts[-1]) + np.arange(1024)) * 2654435761 >> 5).astype(np.uint8))
    store.interruptible_reads = True
    return statistics.median(took[True]), statistics.median(took[False])


def fabric(a, only, second):
    # A second store in this process: under ddrun, rendezvous on the next
    # port (the first store's is closed, but a store per rendezvous at a time).
    boot = {}
    if os.environ.get("MASTER_PORT") and second:
        boot = {"bootstrap": {"addr": "%s:%d" % (os.environ.get("MASTER_ADDR", "127.0.0.1"),
                                                 int(os.environ["MASTER_PORT"]) + 1)}}
    if True:
        fab = ddstore.DDStore(node_mode="fabric", timeout=1800, **boot)
        rank = fab.rank
        lens = np.random.default_rng(3).integers(1 << 10, 16 << 10, 256)
        mine = lens[:128] if rank == 0 else lens[128:]
        first = 0 if rank == 0 else int(lens[:128].sum())
        fab.add("rec", ((first + np.arange(int(mine.sum()))) * 2654435761 >> 5).astype(np.uint8))
        fab.barrier()
        if rank == 0:
            starts = int(lens[:128].sum()) + np.concatenate([[0], np.cumsum(lens[128:])[:-1]])
            order = np.random.default_rng(4).permutation(128)
            if "ranges" in only:
                # Both read modes: the calling thread is the fair measure of
                # the fabric path; the library thread's handoff also slows
                # every single get (see single).
                for on in (False, True):
                    fab.interruptible_reads = on
                    s, b, r = ranges(fab, a.reps * 3, starts[order], lens[128:][order])
                    print("ranges   (fabric %s, 128 records of 1-16 KB on the other rank, reads in the %s): single get "
                          "%.1f us/record, get_ranges %.1f us/record, ratio %.1f"
                          % (fab.query("rec").get("dtype"), "library thread" if on else "calling thread",
                             s * 1e6, b * 1e6, r), flush=True)
            if "single" in only:
                on, off = single(fab, a.reps * 3, starts[order])
                print("single   (fabric, 1 KB get() from the other rank): library thread (interruptible) %.1f us, "
                      "calling thread %.1f us, handoff %.1f us" % (on * 1e6, off * 1e6, (on - off) * 1e6), flush=True)
        fab.barrier()
        fab.close()


if __name__ == "__main__":
    main()
