#!/usr/bin/env python3
"""Data-parallel PyTorch trainer that reads its data through ddstore.

Every rank holds a shard of a synthetic MNIST-like set (28×28 float32
images whose pixels and labels follow from the global row), reads its
batches through ddstore.Loader (Go workers, prefetch, zero-copy tensors),
and averages gradients with torch.distributed (gloo) through
DistributedDataParallel. Run it with any launcher the engine knows:

    mpiexec.mpich -n 4 /usr/bin/python3 examples/torch/train.py
    bin/ddrun -n 4 /usr/bin/python3 examples/torch/train.py

The loss depends only on the data order, so it is identical to the last
digit whatever the loader's workers, prefetch, batched or per-sample reads,
or the same-node or fabric path (--node-mode fabric). ddtop shows the run
like the Go trainer (telemetry is on by default).
"""
import argparse
import os
import socket
import sys
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import ddstore  # noqa: E402

H = W = 28
CLASSES = 10


def images(g):
    """Pixels of global rows g: a class-dependent blob plus row noise, exact in float32."""
    g = np.asarray(g, dtype=np.int64)
    lab = labels(g)
    yy, xx = np.mgrid[0:H, 0:W]
    cy, cx = 4 + 2 * lab, 24 - 2 * lab
    blob = np.exp(-((yy[None] - cy[:, None, None]) ** 2 + (xx[None] - cx[:, None, None]) ** 2) / 18.0)
    noise = ((g[:, None, None] * 7919 + yy * 131 + xx * 17) % 97) / 970.0
    return (blob + noise).astype(np.float32).reshape(-1, 1, H, W)


def labels(g):
    return (np.asarray(g, dtype=np.int64) * 2654435761 % 1000003) % CLASSES


def rendezvous(store):
    """rank 0's address for torch.distributed, shared through the store:
    rank 0 adds one row, every other rank none."""
    if store.rank == 0:
        s = socket.socket()
        s.bind(("", 0))
        port = s.getsockname()[1]
        s.close()
        host = os.environ.get("DDSTORE_TRAIN_HOST", "127.0.0.1")
        ip = np.frombuffer(socket.inet_aton(socket.gethostbyname(host)), dtype=np.uint8).astype(np.int64)
        row = np.concatenate([ip, [port]]).reshape(1, 5)
    else:
        row = np.zeros((0, 5), dtype=np.int64)
    store.add("_rendezvous", row)
    out = np.zeros((1, 5), dtype=np.int64)
    store.get("_rendezvous", out, 0)
    store.free("_rendezvous")
    return "%d.%d.%d.%d" % tuple(out[0, :4]), int(out[0, 4])


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rows", type=int, default=4096, help="global samples")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--prefetch", type=int, default=2)
    p.add_argument("--per-sample", action="store_true", help="one get per sample instead of one batched read")
    p.add_argument("--node-mode", default=None, help="auto (default) or fabric: every peer through libfabric")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--hold", type=float, default=0, help="seconds to stay open after training (for ddtop)")
    args = p.parse_args()

    torch.manual_seed(0)
    torch.set_num_threads(1)
    store = ddstore.DDStore(node_mode=args.node_mode)
    rank, world = store.rank, store.size
    lo, hi = rank * args.rows // world, (rank + 1) * args.rows // world
    store.add("img", images(np.arange(lo, hi)))
    store.add("label", labels(np.arange(lo, hi)))
    addr, port = rendezvous(store)
    dist.init_process_group("gloo", init_method="tcp://%s:%d" % (addr, port), rank=rank, world_size=world)

    model = nn.parallel.DistributedDataParallel(nn.Sequential(
        nn.Flatten(), nn.Linear(H * W, 64), nn.ReLU(), nn.Linear(64, CLASSES)))
    opt = torch.optim.SGD(model.parameters(), lr=args.lr)
    loader = ddstore.Loader(store, ["img", "label"], batch_size=args.batch, shuffle=True, seed=1,
                            workers=args.workers, prefetch=args.prefetch, batch_get=not args.per_sample,
                            drop_last=True)
    t0 = time.time()
    for epoch in range(args.epochs):
        loader.set_epoch(epoch)
        total, n = torch.zeros(1, dtype=torch.float64), 0
        for b in loader:
            x, y = b["img"], b["label"]
            # every value read is checked against its pattern
            idx = b["index"].numpy()
            if not (np.array_equal(x.numpy(), images(idx)) and np.array_equal(y.numpy(), labels(idx))):
                raise SystemExit("rank %d: epoch %d batch %d differs from its pattern" % (rank, epoch, b.number))
            opt.zero_grad()
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            total += loss.detach().double()
            n += 1
        dist.all_reduce(total)
        wait = loader.last_stats[0] if loader.last_stats else float("nan")
        if rank == 0:
            print("epoch %d loss %r batches/rank %d fetch-wait %.4fs" % (epoch, (total / (n * world)).item(), n, wait),
                  flush=True)
    if rank == 0:
        print("final-loss %r time %.2fs" % ((total / (n * world)).item(), time.time() - t0), flush=True)
    if args.hold > 0:
        if rank == 0:
            print("holding %.0fs" % args.hold, flush=True)
        time.sleep(args.hold)
    loader.close()
    dist.destroy_process_group()
    store.close()


if __name__ == "__main__":
    main()
