#!/usr/bin/env python3
"""HydraGNN-style ragged records through ddstore.

Each rank builds graph samples of different sizes (nodes × features,
edges, a target), packs every sample into one structured numpy record as
HydraGNN's DistDataset does (ddstore_store_per_sample=True), concatenates
its records into one uint8 array and adds it as one variable. Record
lengths are shared through a second variable. A map-style Dataset reads
one record per __getitem__ (pyddstore's way: one read per sample); the
batch path reads a whole batch of records with one get_ranges call.
Every decoded value is checked against the sample's pattern.

    mpiexec.mpich -n 4 /usr/bin/python3 examples/torch/ragged.py
    bin/ddrun -n 4 /usr/bin/python3 examples/torch/ragged.py --node-mode fabric
"""
import argparse
import os
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import ddstore  # noqa: E402

FEAT = 8


def sample(i):
    """Graph sample i: node features (n, FEAT) float32, edges (2, e) int64, target float64."""
    rng = np.random.default_rng(i)
    n = int(rng.integers(8, 120))
    e = int(rng.integers(n, 4 * n))
    x = (np.arange(n * FEAT, dtype=np.float32).reshape(n, FEAT) + i) / 7.0
    edges = rng.integers(0, n, (2, e)).astype(np.int64)
    return {"x": x, "edge_index": edges, "y": np.array([i * 0.25])}


def pack(d):
    """One structured record per sample (HydraGNN's per-sample layout)."""
    dt = np.dtype([(k, v.dtype, v.shape) for k, v in d.items()])
    rec = np.zeros((), dtype=dt)
    for k, v in d.items():
        rec[k] = v
    return np.frombuffer(rec.tobytes(), dtype=np.uint8), dt


def unpack(buf, i):
    """Decodes record i (its layout follows from the sample's shapes)."""
    s = sample(i)  # the reader knows the shapes from the sample metadata; here: recomputed
    _, dt = pack(s)
    rec = np.frombuffer(buf, dtype=dt, count=1)[0]
    return {k: rec[k] for k in s}


def check(d, i):
    s = sample(i)
    for k in s:
        if not np.array_equal(d[k], s[k]):
            raise SystemExit("record %d field %s differs from its pattern" % (i, k))


class PerSampleDataset(torch.utils.data.Dataset):
    """pyddstore users' way: one read per sample."""

    def __init__(self, store, starts, lens):
        self.store, self.starts, self.lens = store, starts, lens

    def __len__(self):
        return len(self.lens)

    def raw(self, i):
        buf = np.empty(self.lens[i], dtype=np.uint8)
        return self.store.get("records", buf, int(self.starts[i]))

    def __getitem__(self, i):
        return unpack(self.raw(i), i)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--samples", type=int, default=2000)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--node-mode", default=None)
    args = p.parse_args()
    store = ddstore.DDStore(node_mode=args.node_mode)
    rank, world = store.rank, store.size
    lo, hi = rank * args.samples // world, (rank + 1) * args.samples // world
    recs = [pack(sample(i))[0] for i in range(lo, hi)]
    store.add("records", np.concatenate(recs))
    store.add("record_len", np.array([len(r) for r in recs], dtype=np.int64))
    lens = np.zeros(args.samples, dtype=np.int64)
    store.get("record_len", lens, 0)
    starts = np.concatenate([[0], np.cumsum(lens)[:-1]])

    # this rank's share of the samples, DistributedSampler style
    mine = np.random.default_rng(0).permutation(args.samples)[rank::world]
    ds = PerSampleDataset(store, starts, lens)
    t0 = time.perf_counter()
    got = [ds.raw(i) for i in mine]
    per_sample = time.perf_counter() - t0
    for i, buf in zip(mine, got):
        check(unpack(buf, i), i)

    t0 = time.perf_counter()
    got = [store.get_ranges("records", starts[mine[k:k + args.batch]], lens[mine[k:k + args.batch]])
           for k in range(0, len(mine), args.batch)]  # one call per batch
    batched = time.perf_counter() - t0
    for k, (buf, off) in zip(range(0, len(mine), args.batch), got):
        for j, i in enumerate(mine[k:k + args.batch]):
            check(unpack(buf[off[j]:off[j + 1]], i), i)
    store.barrier()
    if rank == 0:
        print("ragged: %d samples of %d-%d bytes on %d ranks; per-sample get %.3fs, get_ranges per batch of %d %.3fs "
              "(reads only; every record then decoded and checked)" % (args.samples, lens.min(), lens.max(), world, per_sample, args.batch,
                                              batched), flush=True)
    store.close()


if __name__ == "__main__":
    main()
